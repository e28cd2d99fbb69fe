"""Sampler throughput, measured side by side in one run (machine noise applies:
compare the ratios, not the absolute numbers, and rerun before quoting).

    python bench/samplers.py [--n 1000000]

Prints discrete Laplace draws/s for: one vectorised batch call, one call per draw
(as a per-event path would), a NoiseTape read one value per event (AboveThreshold's and
BetweenThresholds' query noise: blocks of 1,024), and numpy.random.Generator.laplace
(continuous, OS entropy; a speed baseline only, never usable in a mechanism here); and
discrete Gaussian draws/s in the blocks continual counting draws (mechanisms/continual.py
TreeNoise: 65,536 values at d = 1,000) and in blocks of 1,024.
To compare two versions side by side, run this script against each (e.g. a git worktree
of the older commit on PYTHONPATH as a ``dpstream`` package).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dpstream.mechanisms.noise_tape import NoiseTape  # noqa: E402
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402
from dpstream.mechanisms.samplers import discrete_gaussian, discrete_laplace, fraction_at_least  # noqa: E402


def rate(fn, count: int) -> float:
    t0 = time.perf_counter()
    fn()
    return count / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--single", type=int, default=5_000)
    ap.add_argument("--scale", type=float, default=4.0)
    args = ap.parse_args()
    rng = KeyedRandomness(b"bench-key-not-secret-00000000000")
    stream = rng.stream("bench", "dlap", 0)
    batch = rate(lambda: discrete_laplace(stream, args.scale, args.n), args.n)
    single = rate(lambda: [discrete_laplace(stream, args.scale, 1) for _ in range(args.single)],
                  args.single)
    tape = NoiseTape(rng, "bench", "tape", 0, fraction_at_least(args.scale))
    taped = rate(lambda: [tape[t] for t in range(args.n // 10)], args.n // 10)
    gauss = {(s2, size): rate(lambda s2=s2, size=size: [discrete_gaussian(stream, s2, size)
                                                         for _ in range(max(1, args.n // size))],
                              max(1, args.n // size) * size)
             for s2 in (100, 10**6) for size in (1024, 65536)}
    gen = np.random.default_rng()
    baseline = rate(lambda: gen.laplace(0.0, args.scale, args.n), args.n)
    print(f"discrete Laplace, scale {args.scale}, exact (CKS 2020), keyed ChaCha20 source")
    print(f"  batch of {args.n:>9,}      : {batch:>14,.0f} draws/s")
    print(f"  one per call ({args.single:,})  : {single:>14,.0f} draws/s")
    print(f"  NoiseTape per event ({args.n // 10:,}): {taped:>14,.0f} draws/s")
    print(f"  numpy Generator.laplace    : {baseline:>14,.0f} draws/s (float, unkeyed baseline)")
    for (s2, size), r in gauss.items():
        print(f"discrete Gaussian sigma2 {s2:>9,}, blocks of {size:>6,}: {r:>12,.0f} draws/s")
    print(f"ratio batch / one-per-call   : {batch / single:8.1f}x")
    print(f"ratio tape / one-per-call    : {taped / single:8.1f}x")
    print(f"ratio numpy / batch          : {baseline / batch:8.1f}x")


if __name__ == "__main__":
    main()
