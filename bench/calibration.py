"""Seconds to calibrate the private predictor's BetweenThresholds noise, per configuration.

    python bench/calibration.py

For a grid of (epsilon, v_max, accounting, k) at delta 1e-6, the wall time of one cold
calibration (mechanisms/bt_epoch.calibrate_epoch for "epoch" accounting,
mechanisms/between_thresholds.calibrate_between_thresholds for "instance"), slowest
first, with the noise scale b it found. The cost grows with b (the exact computation
runs over counts within 40 b of the thresholds). Registration runs it in a thread
(never on the event loop); a process caches what it computed. Noisy machine: compare
rows of one run.
"""
from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpstream.learners.predictor import MAX_BLOCKS, PredictorConfig, smallest_k  # noqa: E402
from dpstream.mechanisms.errors import InfeasibleParameters  # noqa: E402


def main() -> None:
    rows = []
    for eps, v_max, accounting in itertools.product([0.25, 1, 4, 10], [1, 8, 64], ["epoch", "instance"]):
        try:
            k_min = smallest_k(epsilon=eps, delta=1e-6, v_max=v_max, accounting=accounting)
        except InfeasibleParameters:        # more blocks than MAX_BLOCKS (docs/limits.md)
            continue
        for k in sorted({k_min, 2_000, MAX_BLOCKS - 1}):
            if k < k_min:
                continue
            config = PredictorConfig(k=k + 1, epsilon=eps, delta=1e-6, v_max=v_max,
                                     accounting=accounting)    # k + 1: not in any cache
            t0 = time.perf_counter()
            try:
                scale = float(config.calibration().scale)
            except InfeasibleParameters:
                continue
            rows.append((time.perf_counter() - t0, eps, v_max, accounting, k + 1, scale))
    rows.sort(reverse=True)
    print("| seconds | epsilon | v_max | accounting | k | noise scale b |\n|---|---|---|---|---|---|")
    for secs, eps, v_max, accounting, k, scale in rows:
        print(f"| {secs:.3f} | {eps} | {v_max} | {accounting} | {k:,} | {scale:.2f} |")
    print(f"{len(rows)} configurations; slowest {rows[0][0]:.3f} s, "
          f"{sum(r[0] < 1 for r in rows)} under 1 s")


if __name__ == "__main__":
    main()
