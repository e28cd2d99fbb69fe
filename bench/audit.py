"""Privacy audit table: measured epsilon lower bounds (95% Clopper-Pearson) for each
correct mechanism next to its claim, and for each deliberately broken variant.

    python bench/audit.py [--runs 100000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dpstream.mechanisms.audit import run_scenario, standard_scenarios  # noqa: E402
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000)
    args = ap.parse_args()
    rng = KeyedRandomness(b"bench-audit-key-0000000000000000")
    print(f"{'mechanism':48s} {'claim':>12s} {'eps lower bound':>16s} {'verdict':>10s}")
    for sc in standard_scenarios():
        t0 = time.perf_counter()
        runs = args.runs // 4 if "halves" in sc.name or "reused" in sc.name else args.runs
        res = run_scenario(sc, rng, runs)
        claim = f"({sc.claimed_epsilon:g}, {sc.delta:g})"
        verdict = "FLAGGED" if res.flags(sc.claimed_epsilon) else "ok"
        print(f"{sc.name:48s} {claim:>12s} {res.epsilon_lower_bound:16.3f} {verdict:>10s}"
              f"   [{runs:,} runs/side, {time.perf_counter() - t0:.1f}s]")


if __name__ == "__main__":
    main()
