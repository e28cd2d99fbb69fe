"""Bounded models (privacy unit: a person) and streams of their examples, for the tests of
the privacy unit (agents, replay, the CLI, the worker)."""
import asyncio

from dpstream.agents.processor import Processor
from dpstream.agents.units import Pseudonyms
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

KEY = b"privacy-unit-tests-key-0000000000"
RNG = KeyedRandomness(KEY)


def ftrl(model_id="p", k=2, block=4, horizon=400, eps=8.0, epochs=1):
    """A DP-FTRL model (a block kind) of dimension 4 whose unit is a person, whose examples
    reach the learner in at most ``epochs`` epochs."""
    return {"model_id": model_id, "dimension": 4, "budget": {"epsilon": eps, "delta": 1e-6},
            "params": {"kind": "dp_ftrl", "horizon": horizon, "block": block},
            "privacy_unit": {"max_contributions": k, "max_epochs": epochs}}


def winnow(model_id="w", k=3, d=40):
    """A DP-Winnow model (one epoch, batches of 16 and more) whose unit is a person."""
    return {"model_id": model_id, "dimension": d, "budget": {"epsilon": 1e6, "delta": 1e-6},
            "params": {"kind": "winnow", "mode": "practical", "eps_hat": 1.0, "eta": 0.1,
                       "m": 500, "K": 200, "L": 3.0},
            "privacy_unit": {"max_contributions": k}}


def example(config, i: int, person, seed: int = 0) -> dict:
    """The i-th example of a stream for ``config`` (deterministic in i and seed), with
    ``privacy_id`` ``person`` (left out when None)."""
    s = RNG.stream("privacy-unit-tests", "rows", (seed, i))
    if config["params"]["kind"] == "winnow":
        act = sorted(set(s.below(config["dimension"], size=4).tolist()))
        e = {"model_id": config["model_id"], "active": act, "y": 1 if any(a < 3 for a in act) else -1}
    else:
        x = [float(v) * 2 - 1 for v in s.uniform(config["dimension"])]
        e = {"model_id": config["model_id"], "x": x, "y": 1 if x[0] + x[1] > 0 else -1}
    if person is not None:
        e["privacy_id"] = person
    return e


def stream(config, persons: list, seed: int = 0, queries_every: int = 0) -> list:
    """Examples, one per entry of ``persons`` (its privacy ID), with a query after every
    ``queries_every`` examples (0: none)."""
    out = []
    for i, person in enumerate(persons):
        out.append(("examples", example(config, i, person, seed)))
        if queries_every and i % queries_every == queries_every - 1:
            q = {k: v for k, v in example(config, i, None, seed + 1).items() if k != "y"}
            out.append(("queries", {**q, "query_id": f"q{i}"}))
    return out


def run(config, items, *, trace: bool = False, state=None) -> EmbeddedRuntime:
    """The embedded runtime over the registration and ``items``; with ``trace``, the
    processor keeps its admission decisions (``rt.processor.unit_trace``)."""
    rt = EmbeddedRuntime(RNG, state)
    if trace:
        rt.processor.unit_trace = {}
    asyncio.run(rt.feed_all([("models", config), *items]))
    return rt


def unit_of(model_id: str, person) -> str:
    return Pseudonyms(RNG).of(model_id, person)


def apply(log: list, batches: list[int], state=None, trace=None):
    """Apply ``log`` (an embedded run's) with a fresh processor over ``state``, in batches of
    the given sizes (the last repeated); (outputs in emit order, state, the processor)."""
    out, state = [], {} if state is None else state

    async def emit(topic, key, value):
        out.append((topic, value))

    from dpstream.agents.records import RawRecord
    proc = Processor(RNG, state, emit, trace=trace is not None)
    records = [RawRecord("model-events", 0, r["offset"], r["value"]["event"]["model_id"].encode(), b"",
                         body=r["value"]) for r in log]

    async def go():
        a, sizes = 0, list(batches)
        while a < len(records):
            n = sizes.pop(0) if len(sizes) > 1 else sizes[0]
            await proc.handle_batch(records[a:a + n])
            a += n
    asyncio.run(go())
    return out, state, proc
