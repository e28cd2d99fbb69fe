"""Topic names, shared by the faust app, the CLI, replay and the tests. Their settings per
role are streams/worker/topic_plan.py, their creation and the worker's start check
streams/worker/topic_admin.py.

``predictions`` holds one record per example and per query: the audit's record of every
event (versions, budget, seq). ``answers`` holds the query answers alone, the same
records again (``copies``): what a querier reads (streams/tools/acls.py), so that reading its
answers no longer shows it one record per training example with its arrival time
(issue 41, item 14; docs/security-clients.md says what a querier still learns).
"""
from __future__ import annotations

from .kafka import running

METADATA_MAX_AGE_MS = 15_000        # how soon a consumer notices topics it missed at start
DEFAULT_PARTITIONS = 4              # of every topic (streams/worker/topic_plan.py)
MODELS, EXAMPLES, QUERIES = "models", "examples", "queries"
MODEL_EVENTS = "model-events"
PREDICTIONS, LEDGER, RELEASES, REJECTED = "predictions", "ledger", "releases", "rejected"
ANSWERS = "answers"
INPUTS = (MODELS, EXAMPLES, QUERIES)
OUTPUTS = (PREDICTIONS, ANSWERS, LEDGER, RELEASES, REJECTED)
ALL = INPUTS + (MODEL_EVENTS,) + OUTPUTS
# State kept forever, never compacted, replicated as state (streams/worker/topic_plan.py)
STATE_TOPICS = (MODELS, MODEL_EVENTS, LEDGER)


def copies(topic: str, value: dict) -> bool:
    """Whether an output on ``topic`` is also published on ``answers``: a query's
    prediction record. Every runtime asks this one function (the worker's outputs
    producer, the embedded runtime, replay), so their outputs stay identical."""
    return topic == PREDICTIONS and value.get("kind") == "query"


async def create_topic(kafka, name: str, partitions: int, replication: int = 1) -> None:
    """Create one topic (tests and benches make their own)."""
    from aiokafka.admin import NewTopic
    async with running(kafka.admin()) as admin:
        await admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=replication)])
