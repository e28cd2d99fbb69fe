"""Private predictor throughput and hard queries, halfspaces in R^d, one run.

    python bench/predictor.py [--T 1000000] [--k 10000] [--d 10]

Target: a halfspace through the origin region; sample of k*m points from N(0, I);
oblivious queries: a fixed stream from the same distribution; adaptive queries: every
1,000th query is the point of a 64-point pool on which the current ensemble is most
split (the adversary sees the hypotheses: stronger than the seed's model). Prints
queries/s, hard queries against the bounds (oblivious: O(VC log T); adaptive: d + 1),
the eps spent, and the eps a naive predictor would spend answering every query with
the same per-answer mechanism under advanced composition (Theorem 3).
Machine noise applies.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from common import DATA_KEY, timed

from dpstream.learners.generators import Halfspaces, reference_fit
from dpstream.learners.predictor import PredictorConfig, PrivatePredictor
from dpstream.mechanisms.accounting import Ledger, advanced_composition
from dpstream.mechanisms.randomness import KeyedRandomness


def gaussian(seed: str, n: int, d: int) -> np.ndarray:
    u = DATA_KEY.stream("bench", f"predictor-{seed}", 0).uniform(2 * n * d)
    u1, u2 = np.maximum(u[: n * d], 1e-300), u[n * d:]
    return (np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)).reshape(n, d)


def run(mode: str, args, X, y, target) -> None:
    rng = KeyedRandomness(b"bench-predictor-key-000000000000")
    adaptive = mode == "adaptive"
    eps, v_max = (2.0, args.d + 2) if adaptive else (8.0, 64)
    config = PredictorConfig(k=args.k, epsilon=eps, delta=1e-6, v_max=v_max, accounting="instance")
    model = PrivatePredictor(config=config, generator=Halfspaces(args.d, adaptive=adaptive),
                             rng=rng, model_id=f"bench-{mode}")
    _, t_fit = timed(lambda: model.start_epoch(X, y))
    Q = gaussian(f"queries-{mode}", args.T, args.d)
    pool = gaussian(f"pool-{mode}", 64, args.d)
    correct = answered = 0
    regen_time = 0.0

    def loop():
        nonlocal correct, answered, regen_time
        for i in range(args.T):
            x = Q[i]
            if adaptive and i % 1000 == 0:
                split = [abs(int((model.votes(p) == 1).sum()) - args.k / 2) for p in pool]
                x = pool[int(np.argmin(split))]
            tops = model.state.tops
            a, dt = timed(lambda: model.answer(x))
            if model.state.tops != tops:
                regen_time += dt
            if a.label is not None:
                answered += 1
                correct += a.label == (1 if x @ target >= 0.2 else -1)

    _, t_loop = timed(loop)
    spent = Ledger(model.state.ledger).totals()
    naive = advanced_composition(config.budget().eps_bt, config.budget().delta_bt, args.T, 1e-6 / 2)
    b = float(model.calibration.scale)
    print(f"\n[{mode}] k={args.k:,}, d={args.d}, T={args.T:,}, budget (eps={eps}, delta=1e-6), "
          f"v_max={v_max}: eps_BT={config.budget().eps_bt:.4f}, noise scale b={b:.1f} votes, "
          f"accuracy margin {config.accuracy_margin(args.T, 0.01):.0f} votes")
    print(f"  fit {args.k:,} LPs: {t_fit:.1f}s; queries/s {args.T / (t_loop - regen_time):,.0f} "
          f"(excluding {regen_time:.1f}s of regeneration after hard queries)")
    bound = f"d+1 = {args.d + 1}" if adaptive else f"VC*log2(T) = {(args.d + 1) * math.log2(args.T):.0f}"
    print(f"  regeneration after a hard query: {regen_time / max(model.state.tops, 1):.2f} s on average "
          f"({'all' if adaptive else 'the disagreeing'} blocks refit)")
    print(f"  hard queries {model.state.tops} (bound {bound}); answered {answered:,}; "
          f"accuracy {correct / max(answered, 1):.4f}; exhausted {model.state.exhausted}")
    print(f"  eps spent {spent.epsilon:.3f} vs naive per-query composition {naive.epsilon:,.0f}: "
          f"{naive.epsilon / spent.epsilon:,.0f}x more queries per unit eps")


def solver_times(args, X, y, blocks: int = 300) -> None:
    """Seconds per block LP, the generator's (highspy) against the same program through
    scipy's linprog, on the same blocks and hard query, side by side."""
    hx, hy = gaussian("hard", 1, args.d), [1]
    for adaptive in (False, True):
        gen = Halfspaces(args.d, adaptive=adaptive)
        parts = [(X[i * args.m:(i + 1) * args.m], y[i * args.m:(i + 1) * args.m]) for i in range(blocks)]
        _, t_fast = timed(lambda: [gen.fit(Xb, yb, hx, hy) for Xb, yb in parts])
        _, t_ref = timed(lambda: [reference_fit(gen, Xb, yb, hx, hy) for Xb, yb in parts])
        print(f"LP per block ({'adaptive' if adaptive else 'oblivious'}, m={args.m}, d={args.d}): "
              f"highspy {1e3 * t_fast / blocks:.2f} ms, scipy linprog {1e3 * t_ref / blocks:.2f} ms "
              f"(ratio {t_fast / t_ref:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--m", type=int, default=30)
    ap.add_argument("--modes", nargs="+", default=["oblivious", "adaptive"])
    args = ap.parse_args()
    target = np.ones(args.d) / math.sqrt(args.d)
    X = gaussian("sample", args.k * args.m, args.d)
    y = np.where(X @ target >= 0.2, 1, -1)
    solver_times(args, X, y)
    for mode in args.modes:
        run(mode, args, X, y, target)


if __name__ == "__main__":
    main()
