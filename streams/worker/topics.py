"""Topic names, shared by the faust app, the CLI, replay and the tests, and their
creation on a broker (``ensure_topics``).

``predictions`` holds one record per example and per query: the audit's record of every
event (versions, budget, seq). ``answers`` holds the query answers alone, the same
records again (``copies``): what a querier reads (streams/tools/acls.py), so that reading its
answers no longer shows it one record per training example with its arrival time
(issue 41, item 14; docs/security-clients.md says what a querier still learns).
"""
from __future__ import annotations

import asyncio
import logging
import time

from .kafka import running

logger = logging.getLogger("dpstream.topics")
METADATA_MAX_AGE_MS = 15_000        # how soon a consumer notices topics it missed at start
MODELS, EXAMPLES, QUERIES = "models", "examples", "queries"
MODEL_EVENTS = "model-events"
PREDICTIONS, LEDGER, RELEASES, REJECTED = "predictions", "ledger", "releases", "rejected"
ANSWERS = "answers"
INPUTS = (MODELS, EXAMPLES, QUERIES)
OUTPUTS = (PREDICTIONS, ANSWERS, LEDGER, RELEASES, REJECTED)
ALL = INPUTS + (MODEL_EVENTS,) + OUTPUTS


def copies(topic: str, value: dict) -> bool:
    """Whether an output on ``topic`` is also published on ``answers``: a query's
    prediction record. Every runtime asks this one function (the worker's outputs
    producer, the embedded runtime, replay), so their outputs stay identical."""
    return topic == PREDICTIONS and value.get("kind") == "query"


def names(prefix: str = "") -> dict[str, str]:
    """Topic names with an optional prefix (several deployments or tests on one cluster)."""
    return {t: prefix + t for t in ALL}


async def ensure_topics(kafka, *, prefix: str = "", partitions: int = 4,
                        replication: int = 1, wait: float = 60.0) -> list[str]:
    """Create every dpstream topic that does not exist yet (returns the names created).

    A consumer that subscribes to a topic the broker does not have yet ignores it until
    its next metadata refresh (5 minutes by default), so a worker started on a fresh
    broker, before anything was produced, would sit idle. Creating the topics first, with
    the shared partition count, removes the race (aiokafka's admin client). It then
    waits until the broker's metadata lists every dpstream topic with a leader for each
    partition (a broker that just restarted can answer "unknown topic" for seconds after
    the creation succeeded), at most ``wait`` seconds."""
    from aiokafka.admin import NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
        existing = set(await admin.list_topics())
        new = [prefix + t for t in ALL if prefix + t not in existing]
        if new:
            try:
                answer = await admin.create_topics(
                    [NewTopic(n, partitions, replication) for n in new])
            except TopicAlreadyExistsError:
                pass                              # another worker created them meanwhile
            else:
                _refused(answer.topic_errors)
        names = [prefix + t for t in ALL]
        start = time.monotonic()
        while True:
            described = await admin.describe_topics(names)
            _refused([(t["topic"], t["error_code"]) for t in described])
            if _all_led(described):
                break
            if time.monotonic() - start > wait:
                logger.warning("topic metadata still incomplete after %.0f s; starting anyway "
                               "(consumers refresh it every %d s)", wait, METADATA_MAX_AGE_MS // 1000)
                break
            await asyncio.sleep(0.25)
        if time.monotonic() - start > 1.0:
            logger.warning("waited %.1f s for the broker to list every topic", time.monotonic() - start)
        return new


async def create_topic(kafka, name: str, partitions: int, replication: int = 1) -> None:
    """Create one topic (tests and benches make their own)."""
    from aiokafka.admin import NewTopic
    async with running(kafka.admin()) as admin:
        await admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=replication)])


def _refused(topic_errors) -> None:
    """Raise the broker's refusal (an authorization error, a bad configuration) for the
    topics it names: without this, a principal that may neither create nor describe the
    topics would wait ``wait`` seconds and then start a worker that can do nothing.
    "Already exists" (36) and a not-yet-known topic (3, the race the wait is for) pass."""
    from aiokafka.errors import for_code
    refused: dict[int, list[str]] = {}
    for entry in topic_errors:
        topic, code = entry[0], entry[1]
        if code not in (0, 3, 36):
            refused.setdefault(code, []).append(topic)
    for code, topics in sorted(refused.items()):
        raise for_code(code)(", ".join(sorted(topics)))


def _all_led(topics: list[dict]) -> bool:
    """Whether a metadata response shows every topic without error, each partition led."""
    return all(t["error_code"] == 0 and t["partitions"] and
               all(p["leader"] >= 0 for p in t["partitions"]) for t in topics)
