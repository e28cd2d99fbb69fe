"""Where the worker's CPU goes per event without Kafka: the agents alone, side by side.

    python bench/agents.py [--n 10000] [--batches 1 16 130 1000 5000] [--repeats 3]

For each model and batch size, n labelled examples are sequenced (agents/sequencer.py:
validate, check against the registered config, dump to the log record) and applied
(agents/processor.py) in batches of that size, with an in-memory state and an emit that
places records as Kafka would (one placement per topic per batch, JSON-encoded like the
worker's producer) but sends nothing. Printed per event, the fastest of --repeats runs:
the sequencer, the processor through its batch kernel (``on_examples``), and the
processor one example at a time (the kind's ``batch_from`` raised past the batch),
with the ratio of the last two. The models: the throughput bench's DP-Winnow (d =
1,000, K = 3: frozen after its updates, as most of a long run is), the same with a
threshold AboveThreshold never reaches (asked every round, never fires: the learning
path), and continual Winnow (epsilon 2, d = 1,000). Inputs: 20 of 1,000 features active.

What the worker adds on top (Kafka clients, faust, the consumer thread) is measured by
bench/throughput.py; py-spy on a running worker splits it further.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import json
import time

import orjson

import pipeline as P          # bench/pipeline.py: MODEL, payloads
import throughput as T        # bench/throughput.py: CONTINUAL

from dpstream.agents.kinds import kind
from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import sequence_batch
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(bytes(range(32)))


class _Placed:
    def __init__(self, offset: int):
        self.partition, self.offset = 0, offset


def placing_emit():
    """An emit with ``many`` (records.deliver's fast path) that encodes every output and
    places it at the next offset of its topic, as the broker would; nothing is sent."""
    offsets: dict[str, int] = {}

    async def emit(topic, key, value):
        return None

    async def many(items):
        groups: dict[str, list[int]] = {}
        for i, (topic, _, value) in enumerate(items):
            orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
            groups.setdefault(topic, []).append(i)
        out = []
        for topic, indices in groups.items():
            first = offsets.get(topic, 0)
            offsets[topic] = first + len(indices)
            done = asyncio.get_running_loop().create_future()
            done.set_result(_Placed(first))
            out.append((done, indices))
        return out

    emit.many = many
    return emit


async def _one_run(model: dict, data: list[bytes], batch: int) -> tuple[float, float]:
    """(sequencer, processor) seconds per event over ``data`` in batches of ``batch``."""
    state, emit = {}, placing_emit()
    processor = Processor(RNG, state, emit)
    registered = await sequence_batch([RawRecord("models", 0, 0, b"bench", json.dumps(model).encode())],
                                      state, emit)
    await processor.handle_batch(registered)
    records = [RawRecord("examples", 0, i, b"bench", v) for i, v in enumerate(data)]
    sequencing = applying = 0.0
    for a in range(0, len(records), batch):
        t0 = time.perf_counter()
        logged = await sequence_batch(records[a:a + batch], state, emit)
        t1 = time.perf_counter()
        await processor.handle_batch(logged)
        applying += time.perf_counter() - t1
        sequencing += t1 - t0
    return sequencing / len(data), applying / len(data)


def measure(model: dict, data: list[bytes], batch: int, repeats: int, one_at_a_time: bool):
    handler = kind(model["params"]["kind"])
    saved = handler.batch_from
    handler.batch_from = 10 ** 9 if one_at_a_time else saved
    try:
        runs = [asyncio.run(_one_run(model, data, batch)) for _ in range(repeats)]
    finally:
        handler.batch_from = saved
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 16, 130, 1000, 5000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    learning = copy.deepcopy(P.MODEL)
    learning["params"]["L"] = 1e9
    models = {"DP-Winnow (bench, K=3)": P.MODEL, "DP-Winnow, AboveThreshold never fires": learning,
              "continual Winnow eps 2": T.CONTINUAL}
    data = P.payloads(args.n)
    print(f"agents without Kafka, {args.n:,} examples, us per event (fastest of {args.repeats}; "
          "noisy 2-core machine: quote the ratios)")
    print("| model | batch | sequencer | processor, batch kernel | processor, one at a time | ratio |")
    print("|---|---|---|---|---|---|")
    for name, model in models.items():
        for batch in args.batches:
            seq, kernel = measure(model, data, batch, args.repeats, one_at_a_time=False)
            _, single = measure(model, data, batch, args.repeats, one_at_a_time=True)
            print(f"| {name} | {batch:,} | {seq * 1e6:.1f} | {kernel * 1e6:.1f} | {single * 1e6:.1f} "
                  f"| {single / kernel:.2f} |", flush=True)


if __name__ == "__main__":
    main()
