"""``dpstream demo``: the main job on the embedded runtime, no Kafka needed.

Data (generated here, documented, reproducible from a public data key):
* ``card-fraud`` (continual-release Winnow at epsilon = 2): card transactions as sparse
  binary features: one of 40 merchant categories, one of 60 countries, channel, hour
  bucket and 20 device flags, plus a constant feature (d = 200). Fraud (+1) iff any of
  6 risky indicators is present (a planted monotone disjunction). Labelled examples
  arrive with occasional unlabelled queries.
* ``risk-score`` (private predictor): two real-valued risk scores per applicant
  (standard normal), label +1 iff 1.0 * s1 - 0.6 * s2 >= 0.2 (a planted halfspace);
  a labelled epoch sample, then unlabelled queries answered with BetweenThresholds.

Beside each private model the demo prints what a user would compare it with, computed
in-process where the data is (never from the output topics): the majority class and a
non-private learner on the same stream. The demo uses a *public* demo key unless
DPSTREAM_SECRET_KEY(_FILE) is set: its noise is reproducible by anyone, so it shows the
pipeline and the accuracy at that epsilon, not privacy.
"""
from __future__ import annotations

import asyncio
import math

import numpy as np

from dpstream.mechanisms.errors import MissingKeyError
from dpstream.mechanisms.randomness import KeyedRandomness

from .embedded import EmbeddedRuntime

DEMO_KEY = b"dpstream-public-demo-key (not secret)"
DATA_KEY = KeyedRandomness(b"dpstream-demo-data (public)00000")
RISKY = [3, 17, 45, 88, 120, 150]


def demo_key() -> tuple[KeyedRandomness, bool]:
    try:
        return KeyedRandomness.from_env(), True
    except MissingKeyError:
        return KeyedRandomness(DEMO_KEY), False


def fraud_stream(n: int):
    s = DATA_KEY.stream("demo", "fraud", 0)
    cat, country = s.below(40, size=n), 40 + s.below(60, size=n)
    channel, hour = 100 + s.below(4, size=n), 104 + s.below(6, size=n)
    flags = s.bits(n * 20).reshape(n, 20) & s.bits(n * 20).reshape(n, 20) & s.bits(n * 20).reshape(n, 20)
    risky_hit = s.bits(n) & s.bits(n)
    risky_pick = np.array(RISKY)[s.below(len(RISKY), size=n)]
    for i in range(n):
        act = {int(cat[i]), int(country[i]), int(channel[i]), int(hour[i]), 199}
        act |= {110 + int(j) for j in np.flatnonzero(flags[i])}
        act -= set(RISKY)
        if risky_hit[i]:
            act.add(int(risky_pick[i]))
        yield sorted(int(a) for a in act), (1 if risky_hit[i] else -1)


def risk_scores(n: int, seed: int):
    u = DATA_KEY.stream("demo", "risk", seed).uniform(4 * n)
    r = np.sqrt(-2 * np.log(np.maximum(u[:2 * n], 1e-300)))
    X = (r * np.cos(2 * math.pi * u[2 * n:])).reshape(n, 2)
    return X, np.where(X @ np.array([1.0, -0.6]) >= 0.2, 1, -1).tolist()


# card-fraud: continual-release Winnow at (epsilon, delta) = (2, 1e-6) per example, one
# epoch of 20,000 examples in blocks of 100 (bench/continual_winnow.py chose block, eta
# and margin). Rows have at most 15 active features here, so max_active = 16 loses none.
MODELS = [
    {"model_id": "card-fraud", "dimension": 200, "budget": {"epsilon": 2.0, "delta": 1e-6},
     "params": {"kind": "continual_winnow", "max_active": 16, "block": 100, "horizon": 20_000}},
    {"model_id": "risk-score", "dimension": 2, "budget": {"epsilon": 2.0, "delta": 1e-6},
     "params": {"kind": "predictor", "generator": "halfspace", "k": 3000, "m": 40, "v_max": 16}},
]


def epsilon_meaning(epsilon: float, delta: float) -> str:
    return (f"eps = {epsilon:g} per example: replacing any one example by another changes "
            f"the probability of any released output by at most a factor e^{epsilon:g} = "
            f"{math.exp(epsilon):,.1f}, except with probability delta = {delta:g}")


def events(n_fraud: int, n_queries: int):
    for cfg in MODELS:
        yield "models", cfg, None
    for i, (act, y) in enumerate(fraud_stream(n_fraud)):
        yield "examples", {"model_id": "card-fraud", "active": act, "y": y}, y
        if i % 10 == 0:
            yield "queries", {"model_id": "card-fraud", "active": act, "query_id": f"f{i}"}, y
    k, m = MODELS[1]["params"]["k"], MODELS[1]["params"]["m"]
    X, y = risk_scores(k * m, 0)
    for x, t in zip(X, y):
        yield "examples", {"model_id": "risk-score", "x": x.tolist(), "y": int(t)}, int(t)
    Q, qy = risk_scores(n_queries, 1)
    for i, (x, t) in enumerate(zip(Q, qy)):
        yield "queries", {"model_id": "risk-score", "x": x.tolist(), "query_id": f"r{i}"}, int(t)


def baselines(cfg: dict, labelled: list, query_truths: list) -> dict:
    """What a user would pick instead, on the same stream, in-process (never published):
    the majority class (from the labels seen so far, online) and a non-private learner."""
    from dpstream.learners.inputs import BinaryInput
    from dpstream.learners.winnow import Winnow

    pos = neg = mistakes_majority = 0
    for _, y in labelled:
        mistakes_majority += (1 if pos >= neg else -1) != y
        pos, neg = pos + (y == 1), neg + (y == -1)
    majority = 1 if pos >= neg else -1
    out = {"majority: query accuracy": (sum(t == majority for t in query_truths) / len(query_truths))
           if query_truths else float("nan")}
    if cfg["params"]["kind"] == "continual_winnow":
        d = cfg["dimension"]
        learner = Winnow(d=d, eta=0.5)
        out["majority: online mistakes"] = mistakes_majority
        out["non-private Winnow: online mistakes"] = sum(
            learner.learn_one(BinaryInput.from_active(x, d), y) != y for x, y in labelled)
    return out


def summarise(rt: EmbeddedRuntime, truth: dict, labelled: dict) -> list[dict]:
    """One row per model. ``truth``: source ("topic:0:offset") -> true label of each input;
    ``labelled``: model -> [(features, label)] of its examples, in order."""
    rows = []
    for cfg in MODELS:
        mid = cfg["model_id"]
        preds = [(p, truth[p["source"]]) for p in rt.outputs["predictions"] if p["model_id"] == mid]
        queries = [(p, t) for p, t in preds if p["kind"] == "query"]
        answered = [(p, t) for p, t in queries if p["label"] is not None]
        ledger = [e for e in rt.outputs["ledger"] if e["model_id"] == mid]
        last = preds[-1][0]
        handler = rt.processor.handler(mid)
        rows.append({
            "model": mid, "kind": cfg["params"]["kind"], "events": len(preds),
            "eps budget (per example)": cfg["budget"]["epsilon"],
            "eps charged (last epoch)": ledger[-1]["spent_epsilon"] if ledger else 0.0,
            "queries answered": f"{len(answered)}/{len(queries)}",
            "query accuracy": (sum(p["label"] == t for p, t in answered) / len(answered)) if answered else float("nan"),
            # computed in-process from the learner (where the data is), never from the topic
            "online mistakes": handler.internal_mistakes(),
            "updates / hard queries": sum(p["updated"] or p["status"] == "hard_query" for p, _ in preds),
            **baselines(cfg, labelled[mid], [t for _, t in queries]),
            "status": last["status"],
        })
    return rows


def run_demo(n_fraud: int = 20_000, n_queries: int = 5_000, progress: bool = True) -> list[dict]:
    rng, keyed = demo_key()
    items = list(events(n_fraud, n_queries))
    rt = EmbeddedRuntime(rng)
    truth, labelled, offsets = {}, {cfg["model_id"]: [] for cfg in MODELS}, {}
    for topic, payload, label in items:
        offsets[topic] = offsets.get(topic, -1) + 1
        truth[f"{topic}:0:{offsets[topic]}"] = label
        if topic == "examples":
            labelled[payload["model_id"]].append((payload.get("active", payload.get("x")), label))
    feed = [(topic, payload) for topic, payload, _ in items]
    if progress:
        from .cli import Progress
        bar = Progress("dpstream demo", len(feed))
        asyncio.run(rt.feed_all(feed, bar.advance))
        bar.done()
    else:
        asyncio.run(rt.feed_all(feed))
    rows = summarise(rt, truth, labelled)
    rows.append({"_key_source": "configured" if keyed else "public demo key (not private)",
                 "_rejected": len(rt.outputs["rejected"]),
                 "_meaning": [f"{cfg['model_id']}: " + epsilon_meaning(cfg["budget"]["epsilon"],
                                                                         cfg["budget"]["delta"])
                              for cfg in MODELS]})
    return rows


def write_examples(directory: str, n: int = 20_000) -> None:
    """Write the card-fraud example files of ``examples/`` (model, examples, queries)."""
    import json
    from pathlib import Path

    out = Path(directory)
    (out / "card-fraud.model.json").write_text(json.dumps(MODELS[0]) + "\n")
    with open(out / "card-fraud.examples.jsonl", "w") as ex, \
            open(out / "card-fraud.queries.jsonl", "w") as qu:
        for i, (act, y) in enumerate(fraud_stream(n)):
            ex.write(json.dumps({"model_id": "card-fraud", "active": act, "y": y}) + "\n")
            if i % 10 == 0:
                qu.write(json.dumps({"model_id": "card-fraud", "active": act, "query_id": f"q{i}"}) + "\n")
