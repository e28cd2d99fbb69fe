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
        {"model_id": "dense", "budget": {"epsilon": 2.0, "delta": 1e-6},
         "params": {"kind": "dp_ftrl", "horizon": 250},        # 2 epochs and a half of 10 blocks
         "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
                      {"type": "numeric", "name": "age", "lower": 18, "upper": 90},
                      {"type": "categorical", "name": "channel", "vocabulary": ["web", "app", "shop"]},
                      {"type": "boolean", "name": "foreign"}]},
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
    out += [{"model_id": "dense", "features": f, "y": 1 if f.get("amount", 0) > 60 or f.get("foreign") else -1}
            for f in raw_features(s, 600)]
    return out


def raw_features(s, n: int) -> list[dict]:
    """Raw records as users send them: numbers (some out of their declared bounds), a
    category (some unseen), a boolean, fields missing now and then, and one undeclared."""
    u = s.uniform(4 * n).reshape(n, 4)
    channels = ["web", "app", "shop", "phone"]
    out = []
    for i, (a, b, c, d) in enumerate(u):
        f = {"amount": round(float(a) * 120, 2), "age": int(16 + b * 80), "channel": channels[int(c * 4)],
             "foreign": bool(d > 0.8), "note": "undeclared"}
        if i % 17 == 0:
            del f["age"]
        out.append(f)
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
    out += [{"model_id": "dense", "features": f, "query_id": f"d{i}"} for i, f in enumerate(raw_features(s, n))]
    return out
