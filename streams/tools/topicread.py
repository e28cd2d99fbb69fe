"""What the CLI reads from a deployment before it acts: whether a topic exists (without
creating one), a topic read to its end, a topic followed as Kafka's console consumer
does, and the model registrations in force, as the worker decides them.

Kafka creates a topic when a metadata request names one that does not exist, if the
request allows it and the broker auto-creates topics; aiokafka's requests always allow
it, so ``consume --topic exampels`` used to create that topic. Every question about a
topic here goes through ``faust_seam.describe_topic``, which never creates one: a name
that does not exist is refused with a did-you-mean before any client asks for it, and
one this principal may not describe reaches the broker's own refusal, which names the
missing right.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from difflib import get_close_matches

from dpstream.streams.worker import topics
from dpstream.streams.worker.kafka import Kafka, running

TOPIC_WAIT = 60.0      # seconds register/produce wait for a worker to create the topics
UNKNOWN_TOPIC, NO_LEADER = 3, 5     # Kafka error codes


class TopicMissing(Exception):
    """A topic that does not exist (the message says what creates it)."""


def known_names(prefix: str) -> list[str]:
    """The topics a dpstream deployment with this prefix uses."""
    return [prefix + t for t in topics.ALL]


async def _describe(kafka: Kafka, name: str) -> dict:
    from dpstream.streams.worker.faust_seam import describe_topic
    async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
        return await describe_topic(admin, name)


async def check_topic_name(kafka: Kafka, name: str, prefix: str) -> None:
    """TopicMissing, with a did-you-mean for a name that is not dpstream's, when the
    broker has no topic ``name`` (it is not created by asking)."""
    if (await _describe(kafka, name))["error_code"] != UNKNOWN_TOPIC:
        return
    if name in known_names(prefix):
        raise TopicMissing(f"the topic {name} does not exist on {kafka.bootstrap} yet: a worker "
                           "creates its topics when it starts (dpstream worker, with the same --prefix)")
    guess = get_close_matches(name, known_names(prefix), n=1, cutoff=0.6)
    hint = f"did you mean {guess[0]}? " if guess else ""
    raise TopicMissing(f"no topic {name!r} on {kafka.bootstrap} ({hint}the dpstream topics"
                       f"{f' with prefix {prefix!r}' if prefix else ''}: "
                       f"{', '.join(topics.ALL)}); nothing read, and no topic created")


async def wait_for_topic(kafka: Kafka, name: str, wait: float) -> None:
    """Return once ``name`` exists, or TopicMissing after ``wait`` seconds: the worker
    creates its topics when it starts, and a command run right after ``dpstream worker &``
    may come first. A principal that may not describe it gets the broker's refusal."""
    import sys

    from aiokafka.errors import for_code
    deadline = time.monotonic() + wait
    said = False
    while True:
        described = await _describe(kafka, name)
        code = described["error_code"]
        if code == 0 and described["partitions"]:
            return
        if code not in (0, UNKNOWN_TOPIC, NO_LEADER):
            raise for_code(code)(name)
        if not said and sys.stderr.isatty():
            print(f"waiting up to {wait:.0f} s for a worker to create {name} ...", file=sys.stderr)
            said = True
        if time.monotonic() > deadline:
            raise TopicMissing(f"the topic {name} does not exist on {kafka.bootstrap} (waited "
                               f"{wait:.0f} s): start a worker first (dpstream worker, with the "
                               "same --prefix); it creates its topics")
        await asyncio.sleep(0.5)


async def _assigned(kafka: Kafka, topic: str, consumer) -> list:
    """The topic's partitions, assigned to ``consumer``."""
    from aiokafka import TopicPartition
    described = await _describe(kafka, topic)
    if described["error_code"]:
        from aiokafka.errors import for_code
        raise for_code(described["error_code"])(topic)
    tps = [TopicPartition(topic, p["partition"]) for p in sorted(described["partitions"],
                                                                  key=lambda p: p["partition"])]
    consumer.assign(tps)
    return tps


async def read_to_end(kafka: Kafka, topic: str, *, timeout: float = 5.0) -> list:
    """Every record of ``topic`` from its beginning to the end it had when the read began
    (or until ``timeout`` seconds pass without a new record), in partition order."""
    out = []
    async with running(kafka.consumer(enable_auto_commit=False, group_id=None,
                                      auto_offset_reset="earliest")) as consumer:
        tps = await _assigned(kafka, topic, consumer)
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > 0}
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=int(timeout * 1000))
            if not batch:
                break
            for tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                out.extend(r for r in records if r.offset < ends[tp])
            for tp in list(todo):
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
    return out


async def follow(kafka: Kafka, topic: str, write, *, from_beginning: bool, timeout: float | None,
                 limit: int | None, counted: list) -> None:
    """Hand each record's value to ``write`` as it arrives, as Kafka's console consumer
    does: from the end of the topic (only what arrives from now on) unless
    ``from_beginning``; until ``limit`` records, or ``timeout`` seconds without a new one
    (None: until interrupted). ``counted[0]`` holds how many were written."""
    # the start comes from the reset policy, not a seek: a seek right after ``assign`` races
    # with the fetcher's own reset (measured: half the reads from the beginning then saw
    # nothing for seconds)
    reset = "earliest" if from_beginning else "latest"
    async with running(kafka.consumer(enable_auto_commit=False, group_id=None,
                                      auto_offset_reset=reset)) as consumer:
        await _assigned(kafka, topic, consumer)
        wait_ms = int(timeout * 1000) if timeout is not None else 1000
        while limit is None or counted[0] < limit:
            batch = await consumer.getmany(timeout_ms=wait_ms)
            if not batch:
                if timeout is not None:
                    return
                continue
            for tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                for r in records:
                    if limit is not None and counted[0] >= limit:
                        return
                    write(r.value)
                    counted[0] += 1


@dataclass
class Refused:
    """A registration the worker dead-letters: where it sits, the model id it names (None
    when it names none the worker could read) and the worker's own reason."""
    source: str
    model_id: str | None
    reason: str


@dataclass
class Registrations:
    in_force: dict = field(default_factory=dict)      # model id -> ModelConfig
    refused: list = field(default_factory=list)       # Refused, in the order read


def decide(records) -> Registrations:
    """The worker's verdict on each record of the models topic, in the order given
    (RawRecord ``models`` records): its decoder (schemas/limits.py ``decode``: a lone
    surrogate reads as U+FFFD), its key and topic checks, the schema, feasibility, and
    an id registered before with another config refused (an identical one is a no-op), all
    through agents/sequencer.py ``parse`` with the sequencer's own state layout. One state
    for the whole topic, as one worker holding every partition keeps it (a registration is
    keyed by its model id, so an id's records share a partition and their order)."""
    from dpstream.agents.sequencer import parse
    from dpstream.schemas import ModelConfig
    from dpstream.schemas.limits import LimitError, decode
    state: dict = {}
    out = Registrations()
    for record in records:
        event, reason = parse(record, state)
        if event is None:
            try:
                raw = decode(record.value)
            except LimitError:
                raw = None
            named = raw.get("model_id") if isinstance(raw, dict) else None
            out.refused.append(Refused(record.source, named if isinstance(named, str) else None, reason))
            continue
        if f"config/{event['model_id']}" not in state:
            state[f"config/{event['model_id']}"] = event
            out.in_force[event["model_id"]] = ModelConfig.model_validate(event)
    return out


async def read_registrations(kafka: Kafka, prefix: str, *, wait: float = 0.0,
                             timeout: float = 5.0) -> Registrations:
    """The registrations on the models topic as the worker decides them (``decide``):
    those in force, by model id, and those it refuses. Feasibility runs the privacy
    accountants (about 2 s the first time in a process, milliseconds after)."""
    from dpstream.agents.records import RawRecord
    topic = prefix + topics.MODELS
    if wait:
        await wait_for_topic(kafka, topic, wait)
    return decide(RawRecord(topics.MODELS, r.partition, r.offset, r.key, r.value or b"")
                  for r in await read_to_end(kafka, topic, timeout=timeout))


async def registrations(kafka: Kafka, prefix: str, *, wait: float = 0.0,
                        timeout: float = 5.0) -> dict:
    """The registrations in force on the models topic, by model id, as the worker decides
    them (``decide``). Before (issue 41), this validated each record with the schema alone:
    a registration with a lone surrogate decoded otherwise than in the worker, and one the
    worker dead-lettered (invalid to its decoder, keyed by another id, infeasible) could be
    listed as in force."""
    return (await read_registrations(kafka, prefix, wait=wait, timeout=timeout)).in_force
