"""A small multi-model workload, fed identically to Kafka and to the embedded runtime."""
from __future__ import annotations

import numpy as np

from dpstream.mechanisms.randomness import KeyedRandomness

DATA = KeyedRandomness(b"kafka-tests-data-not-secret00000")


def models():
    return [
        {"model_id": "fraud-a", "dimension": 30, "budget": {"epsilon": 1e6, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 300, "K": 50, "L": 2.0}},
        {"model_id": "fraud-c", "dimension": 40, "budget": {"epsilon": 2.0, "delta": 1e-6},
         "params": {"kind": "continual_winnow", "max_active": 4, "block": 20, "horizon": 200}},
        {"model_id": "rules", "dimension": 8, "budget": {"epsilon": 2.0, "delta": 1e-6},
         "params": {"kind": "decision_list", "window": 300}},
        {"model_id": "score", "dimension": 1, "budget": {"epsilon": 8.0, "delta": 1e-6},
         "params": {"kind": "predictor", "generator": "thresholds", "k": 270, "m": 10, "v_max": 20}},
    ]


def examples(n: int = 600):
    s = DATA.stream("kafka-tests", "examples", n)
    out = []
    for i in range(n):
        for mid, d in (("fraud-a", 30), ("fraud-c", 40)):
            act = sorted(set(s.below(d, size=4).tolist()))
            out.append({"model_id": mid, "active": act, "y": 1 if min(act) < 3 else -1})
        x = np.where(s.bits(8), 1, -1).tolist()
        out.append({"model_id": "rules", "x": x, "y": 1 if x[0] == 1 or x[5] == -1 else -1})
    xs = s.uniform(2700)
    out += [{"model_id": "score", "x": [float(v)], "y": 1 if v >= 0.4 else -1} for v in xs]
    return out


def queries(n: int = 150):
    s = DATA.stream("kafka-tests", "queries", n)
    out = []
    for i in range(n):
        out.append({"model_id": "fraud-a", "active": sorted(set(s.below(30, size=4).tolist())),
                    "query_id": f"a{i}"})
        out.append({"model_id": "fraud-c", "active": sorted(set(s.below(40, size=4).tolist())),
                    "query_id": f"c{i}"})
        out.append({"model_id": "rules", "x": np.where(s.bits(8), 1, -1).tolist()})
        out.append({"model_id": "score", "x": [float(s.uniform(1)[0])], "query_id": f"s{i}"})
    return out
