"""Real binary classification streams that installed packages ship (offline), as raw
records (feature dicts) the way a user has them, each cut into a *public* sample (the
first 10%, at least 30 rows: what a user would fix bounds, bins and vocabularies from)
and the stream a private learner sees (the rest), in one fixed shuffled order.

| name | package | rows | features | label +1 |
|---|---|---|---|---|
| phishing | River ``Phishing`` | 1,250 | 9 numeric | phishing |
| segment | River ``ImageSegments`` | 2,310 | 18 numeric | natural scene (sky, foliage, grass) |
| shuttle | River ``Shuttle`` | 49,097 | 9 numeric | the 7% anomalies |
| bananas | River ``Bananas`` | 5,300 | 2 numeric | the second banana (not linearly separable) |
| breast_cancer | scikit-learn | 569 | 30 numeric | benign |
| digits | scikit-learn | 1,797 | 64 pixels | digit >= 5 |
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAMES = ("phishing", "segment", "shuttle", "bananas", "breast_cancer", "digits")


@dataclass
class Stream:
    name: str
    public: list[dict]            # the public sample's records (declarations come from them)
    records: list[dict]           # the private stream
    labels: np.ndarray            # +1 / -1

    @property
    def majority_online(self) -> np.ndarray:
        """Mistakes of answering the majority label seen so far (ties: +1), per example."""
        pos = np.concatenate([[0], np.cumsum(self.labels == 1)[:-1]])
        neg = np.arange(len(self.labels)) - pos
        return np.where(pos >= neg, 1, -1) != self.labels


def _river(dataset, positive) -> tuple[list[dict], list[int]]:
    rows = list(dataset())
    return [dict(x) for x, _ in rows], [1 if positive(y) else -1 for _, y in rows]


def _sklearn(loader, positive) -> tuple[list[dict], list[int]]:
    data = loader()
    names = [str(n) for n in getattr(data, "feature_names", range(data.data.shape[1]))]
    return ([{n.replace(" ", "_"): float(v) for n, v in zip(names, row)} for row in data.data],
            [1 if positive(t) else -1 for t in data.target])


def load(name: str) -> Stream:
    from river import datasets
    from sklearn import datasets as sk
    X, y = {
        "phishing": lambda: _river(datasets.Phishing, bool),
        "segment": lambda: _river(datasets.ImageSegments, lambda t: t in ("sky", "foliage", "grass")),
        "shuttle": lambda: _river(datasets.Shuttle, bool),
        "bananas": lambda: _river(datasets.Bananas, bool),
        "breast_cancer": lambda: _sklearn(sk.load_breast_cancer, lambda t: t == 1),
        "digits": lambda: _sklearn(sk.load_digits, lambda t: t >= 5),
    }[name]()
    order = np.random.default_rng(0).permutation(len(y))     # the data's order, not privacy noise
    X, y = [X[i] for i in order], np.asarray(y)[order]
    k = max(30, len(y) // 10)
    return Stream(name, X[:k], X[k:], y[k:])
