"""Crash safety and completeness of the agents without a broker (agents/records.py).

A kill -9 keeps every state write made before it and loses every output not yet
acknowledged. The agents must therefore (1) write state only after the event's outputs
are durable, and (2) reproduce identical outputs when a restarted worker re-applies an
event whose cold records (buffer chunks, weights, hypotheses) were already written.
The Kafka test in tests/streams kills a real worker at one random point; here the crash
is placed at chosen delivery calls of every model kind, deterministically. The last two
tests drop records on the way in, as faust's recovery can, and check that the agents
notice the gap and re-read it from the log.
"""
import asyncio
import json

import pytest

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import MODEL_EVENTS, sequence_batch
from dpstream.mechanisms.continual import tree_levels
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

from ..streams.kafka_helpers import per_model

RNG = KeyedRandomness(b"crash-order-tests-key-0000000000")


def workload():
    s = RNG.stream("crash-tests", "data", 0)
    ev = [("models", {"model_id": "w", "dimension": 20, "budget": {"epsilon": 1e6, "delta": 1e-6},
                      "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 100, "K": 30,
                                 "L": 2.0}}),
          ("models", {"model_id": "dl", "dimension": 6, "budget": {"epsilon": 2.0, "delta": 1e-6},
                      "params": {"kind": "decision_list", "window": 100}}),
          ("models", {"model_id": "p", "dimension": 1, "budget": {"epsilon": 8.0, "delta": 1e-6},
                      "params": {"kind": "predictor", "generator": "thresholds", "k": 90, "m": 10,
                                 "v_max": 10}}),
          ("models", {"model_id": "c", "dimension": 20, "budget": {"epsilon": 2.0, "delta": 1e-6},
                      "params": {"kind": "continual_winnow", "max_active": 4, "block": 25,
                                 "horizon": 300}}),          # 3 epochs, 12 releases each
          ("models", {"model_id": "f", "dimension": 3, "budget": {"epsilon": 2.0, "delta": 1e-6},
                      "params": {"kind": "dp_ftrl", "block": 25, "horizon": 300}})]
    for i in range(900):
        act = sorted(set(s.below(20, size=3).tolist()))
        ev.append(("examples", {"model_id": "w", "active": act, "y": 1 if min(act) < 4 else -1}))
        ev.append(("examples", {"model_id": "c", "active": act, "y": 1 if min(act) < 4 else -1}))
        x = [1 if b else -1 for b in s.bits(6).tolist()]
        ev.append(("examples", {"model_id": "dl", "x": x, "y": x[0] if x[1] == 1 else -1}))
        v = float(s.uniform(1)[0])
        ev.append(("examples", {"model_id": "p", "x": [v], "y": 1 if v >= 0.4 else -1}))
        f = (s.uniform(3) * 2 - 1).tolist()
        ev.append(("examples", {"model_id": "f", "x": f, "y": 1 if f[0] > f[1] else -1}))
    for i in range(40):
        ev.append(("queries", {"model_id": "w", "active": [i % 20]}))
        ev.append(("queries", {"model_id": "c", "active": [i % 20]}))
        ev.append(("queries", {"model_id": "dl", "x": [1, -1, 1, -1, 1, -1]}))
        ev.append(("queries", {"model_id": "p", "x": [i / 40]}))
        ev.append(("queries", {"model_id": "f", "x": [i / 40, 0.5, -0.5]}))
    return ev


@pytest.fixture(scope="module")
def log_and_expected():
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(workload()))
    log = [RawRecord(MODEL_EVENTS, 0, r["offset"], r["value"]["event"]["model_id"].encode(),
                     json.dumps(r["value"]).encode()) for r in rt.log]
    state = {}
    asyncio.run(_one_at_a_time(Processor(RNG, state, Broker().emit), log))
    return log, rt.outputs, state


async def _one_at_a_time(processor, records):
    for record in records:
        await processor.handle_batch([record])


class Crash(Exception):
    pass


class Broker:
    """Durable outputs; the ``fail_at``-th enqueue and everything after it in the same
    run are lost, as when the process dies before the producer's next acknowledgement."""

    def __init__(self):
        self.durable: dict[str, list] = {"predictions": [], "ledger": [], "releases": []}
        self.calls, self.fail_at = 0, None

    async def emit(self, topic, key, value):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise Crash
        self.durable[topic].append(value)


async def crash_then_restart(log, fail_at, restart_from):
    state, broker = {}, Broker()
    broker.fail_at = fail_at
    with pytest.raises(Crash):
        p = Processor(RNG, state, broker.emit)
        for rec in log:
            await p.handle_batch([rec])
    broker.fail_at = None
    p = Processor(RNG, state, broker.emit)         # a new worker: tables restored, no cache
    for rec in log[restart_from:]:                 # from the last committed input offset
        await p.handle_batch([rec])
    return broker.durable, state


def crash_points(log):
    """Delivery calls to fail at: a spread of charges (ledger records go first), every release,
    the first outputs of each model, the last and first events of its first three 256-row
    buffer chunks, and an even spread of the rest."""
    calls = asyncio.run(_ordered_calls(log))
    charges = [n for n, (_, topic) in enumerate(calls, 1) if topic == "ledger"]
    picks = set(charges[:3] + charges[3::6])
    picks.update(n for n, (_, topic) in enumerate(calls, 1) if topic == "releases")
    first_seen, per_model_n = set(), {}
    for n, (i, topic) in enumerate(calls, 1):
        model = json.loads(log[i].value)["event"]["model_id"]
        per_model_n[model] = per_model_n.get(model, 0) + (topic == "predictions")
        if model not in first_seen or (per_model_n[model] % 256 in (0, 255)
                                       and per_model_n[model] < 3 * 256):
            picks.add(n)
            first_seen.add(model)
    picks.update(range(1, len(calls) + 1, len(calls) // 10))
    return calls, sorted(picks)


async def _ordered_calls(log):
    calls, order = [], []

    async def emit(topic, key, value):
        order.append(topic)

    p = Processor(RNG, {}, emit)
    for i, rec in enumerate(log):
        before = len(order)
        await p.handle_batch([rec])
        calls += [(i, t) for t in order[before:]]
    return calls


@pytest.mark.slow
def test_a_crash_at_any_delivery_loses_and_changes_no_output(log_and_expected):
    log, expected, final_state = log_and_expected
    calls, picks = crash_points(log)
    assert {json.loads(log[i].value)["event"]["model_id"] for i, _ in calls} == {"w", "dl", "p", "c", "f"}
    assert {calls[n - 1][1] for n in picks} == {"predictions", "ledger", "releases"}
    for j, fail_at in enumerate(picks):
        event = calls[fail_at - 1][0]
        # the committed input offset is at or before the crash: just before, or the start
        for restart_from in sorted({max(0, event - 2)} | ({0} if j % 8 == 0 else set())):
            out, state = asyncio.run(crash_then_restart(log, fail_at, restart_from))
            for topic in ("predictions", "ledger", "releases"):
                assert per_model(out[topic]) == per_model(expected[topic]), (topic, fail_at)
            assert state == final_state, fail_at         # the learners' state too, record by record


def test_records_the_runtime_drops_are_re_read_from_the_log(log_and_expected):
    log, expected, final_state = log_and_expected
    dropped = {i for i in range(len(log)) if 100 <= i < 120 or i % 97 == 5}
    asked = []

    async def fetch(topic, partition, start, end):
        asked.append((topic, partition, start, end))
        return [r for r in log if start <= r.offset < end]

    async def go():
        state, broker = {}, Broker()
        p = Processor(RNG, state, broker.emit, fetch)
        for i, rec in enumerate(log):
            if i not in dropped:
                await p.handle_batch([rec])
        return state, broker.durable

    state, out = asyncio.run(go())
    for topic in ("predictions", "ledger", "releases"):
        assert per_model(out[topic]) == per_model(expected[topic]), topic
    # the re-read records are applied as one batch, which skips intermediate weight
    # versions; every record it did write equals the per-event run's, heads included
    kept = {k: v for k, v in state.items() if not k.startswith("log/")}
    assert all(final_state[k] == v for k, v in kept.items())
    assert {k for k in final_state if k.endswith(("/head", "/config"))} <= kept.keys()
    assert (MODEL_EVENTS, 0, 100, 120) in asked
    assert sum(end - start for *_, start, end in asked) == len(dropped)


async def test_the_sequencer_re_reads_dropped_input_records():
    events = [json.dumps(v).encode() for _, v in workload()[:400]]
    records = [RawRecord("examples", 0, i, None, v) for i, v in enumerate(events)]

    async def collect(skip, fetch):
        out, state = [], {}

        async def emit(topic, key, value):
            out.append((topic, value))

        for i, rec in enumerate(records):
            if i not in skip:
                await sequence_batch([rec], state, emit, fetch)
        return out

    async def fetch(topic, partition, start, end):
        return records[start:end]

    full = await collect(set(), None)
    assert await collect({0, 1, 57, 58, 59, 399}, fetch) == full[:-1]     # the last drop is unseen
    assert await collect({57}, None) != full[:-1]              # without fetch the gap would stay


@pytest.mark.parametrize("size", [7, 64, 500])
def test_batches_give_the_per_event_outputs_and_heads_even_across_a_crash(log_and_expected, size):
    log, expected, final_state = log_and_expected
    batches = [log[i:i + size] for i in range(0, len(log), size)]

    async def go(fail_at):
        state, broker = {}, Broker()
        broker.fail_at = fail_at
        p, done = Processor(RNG, state, broker.emit), 0
        try:
            for batch in batches:
                await p.handle_batch(batch)
                done += 1
        except Crash:
            broker.fail_at = None
            p = Processor(RNG, state, broker.emit)
            for batch in batches[max(0, done - 1):]:    # the committed offset may lag a batch
                await p.handle_batch(batch)
        return state, broker.durable

    for fail_at in (None, 40, 1500):
        state, out = asyncio.run(go(fail_at))
        for topic in ("predictions", "ledger", "releases"):
            assert per_model(out[topic]) == per_model(expected[topic]), (topic, fail_at)
        heads = {k for k in final_state if k.endswith("/head")}
        assert {k: state[k] for k in heads} == {k: final_state[k] for k in heads}
        assert all(final_state[k] == v for k, v in state.items())


COLD = ("/buffer/", "/node/", "/offset/", "/hyp/", "/weights/", "/release/", "/hard/")


def cold_keys(state, model):
    return {k for k in state if k.startswith(f"model/{model}/") and any(c in k for c in COLD)}


def test_the_state_keeps_only_the_cold_records_a_restart_reads(log_and_expected):
    """Retired records (agents/kinds/base.py): after 3 epochs of 12 tree releases, two
    decision-list windows, DP-Winnow updates and predictor hard queries, each model's
    cold records are exactly those a load of its head reads, and at no batch boundary
    does the tree hold more nodes than one decomposition (at most ``levels``), where
    before retirement it kept every node it ever wrote (36) and the predictor every
    hypothesis version."""
    log, expected, final_state = log_and_expected
    p = Processor(RNG, final_state, Broker().emit)
    for model in ("w", "dl", "p", "c"):
        assert cold_keys(final_state, model) == p.handler(model).live(), model
    assert {k for k in cold_keys(final_state, "c")} == {"model/c/offset/3/0"}   # epoch 3 starts

    async def go():
        state, written, most = {}, set(), 0
        p = Processor(RNG, state, Broker().emit)
        for i in range(0, len(log), 50):
            await p.handle_batch(log[i:i + 50])
            nodes = {k for k in state if k.startswith("model/c/node/")}
            written |= nodes
            most = max(most, len(nodes))
        return written, most

    written, most = asyncio.run(go())
    assert len(written) >= 30 and 0 < most <= tree_levels(12)


class StateCrash(Exception):
    pass


class CrashingState(dict):
    """A state mapping that dies at its ``fail_at``-th write or deletion (that one and
    every later one lost): a kill -9 between two state records reaching the changelog."""

    def __init__(self, fail_at=None):
        super().__init__()
        self.ops, self.fail_at = [], fail_at

    def _op(self, kind, key):
        if self.fail_at is not None and len(self.ops) + 1 >= self.fail_at:
            raise StateCrash
        self.ops.append((kind, key))

    def __setitem__(self, key, value):
        self._op("set", key)
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._op("del", key)
        super().__delitem__(key)


@pytest.mark.slow
def test_a_crash_between_any_two_state_writes_around_a_retirement_changes_no_output(log_and_expected):
    """Deletions follow the head that stops reading them: a crash anywhere in that
    sequence (before the head, between head and deletions, between two deletions)
    leaves a state from which a restarted worker, re-reading the log, gives the same
    outputs and the same heads. (A crash after the head and before its deletions may
    leave the records it did not delete behind: they are never read again.)"""
    log, expected, final_state = log_and_expected
    batches = [log[i:i + 64] for i in range(0, len(log), 64)]

    async def run(state, broker, todo):
        p = Processor(RNG, state, broker.emit)
        for batch in todo:
            await p.handle_batch(batch)

    dry = CrashingState()
    asyncio.run(run(dry, Broker(), batches))
    dels = [n for n, (kind, _) in enumerate(dry.ops, 1) if kind == "del"]
    assert {dry.ops[n - 1][1].split("/")[1] for n in dels} == {"w", "dl", "p", "c", "f"}
    picks = sorted({n + j for n in dels[::11] for j in (-1, 0, 1)})   # head, first, second deletion
    for fail_at in picks:
        state, broker = CrashingState(fail_at), Broker()
        with pytest.raises(StateCrash):
            asyncio.run(run(state, broker, batches))
        state.fail_at = None
        asyncio.run(run(state, broker, batches))            # restart from the first input
        for topic in ("predictions", "ledger", "releases"):
            assert per_model(broker.durable[topic]) == per_model(expected[topic]), (topic, fail_at)
        heads = {k for k in final_state if k.endswith("/head")}
        assert {k: state[k] for k in heads} == {k: final_state[k] for k in heads}, fail_at
        assert all(state[k] == v for k, v in final_state.items()), fail_at
