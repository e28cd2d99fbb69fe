"""What any classifier can do on the imbalanced sets, with no privacy at all: is there a
region where the rare class is more likely than not?

    python bench/imbalanced_ceiling.py [--sets solar_flare yeast ...]

Issue 45 asks DP-FTRL to make fewer mistakes than the majority class on every set.
Fewer mistakes than "always the majority" means answering the rare class somewhere and
being right there more often than not (error < majority error is exactly TP > FP). So
before blaming the private learner, this script asks non-private scikit-learn models,
5-fold cross-validated on the whole stream (each trained on 80% of it, far more than an
online learner has seen on average), the same question on the declared dense rows
(bench/datasets.py, declarations from the public 10%):

* error and balanced error of the rule P(y = +1 | x) >= 1/2 (the fewest mistakes), the
  count of rare-class answers and how many of them were right;
* balanced error of the rule P(y = +1 | x) >= the prior (the lowest balanced error:
  learners/dp_ftrl.py ``decision="balanced"``), and the models' AUC.

On solar_flare and yeast (epsilon 4's DP-FTRL misses the majority there) no model's
rare-class answers are right more often than not (docs/models.md has the table):
beating "always no" in mistakes is out of reach whatever the privacy, while a balanced
error below 1/2 is reachable by the second rule.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets as D  # noqa: E402  (bench/datasets.py)
from common import auc, balanced_error  # noqa: E402

from dpstream.learners.features import Featuriser, suggest_fields  # noqa: E402


def models():
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    return {"logistic regression (C = 0.01)": LogisticRegression(C=0.01, max_iter=5000),
            "logistic regression (C = 1)": LogisticRegression(C=1.0, max_iter=5000),
            "gradient boosting": GradientBoostingClassifier(random_state=0),
            "random forest": RandomForestClassifier(300, min_samples_leaf=3, random_state=0),
            "15 nearest neighbours": KNeighborsClassifier(15)}


def main() -> None:
    from sklearn.model_selection import cross_val_predict
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sets", nargs="*", default=list(D.IMBALANCED))
    args = ap.parse_args()
    print("| set | model | error (majority's) | balanced error | rare-class answers: right / all "
          "| balanced error at the prior | AUC |\n|---|---|---|---|---|---|---|")
    for name in args.sets:
        s = D.load(name)
        f = Featuriser(suggest_fields(s.public))
        X, y = np.array([f.dense(r) for r in s.records]), s.labels
        prior, majority = float(np.mean(y == 1)), float(min(np.mean(y == 1), np.mean(y == -1)))
        for label, model in models().items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = cross_val_predict(model, X, y, cv=5, method="predict_proba")[:, 1]
            half, at_prior = np.where(p >= 0.5, 1, -1), np.where(p >= prior, 1, -1)
            print(f"| {name} | {label} | {np.mean(half != y):.2%} ({majority:.2%}) | "
                  f"{balanced_error(half, y):.3f} | {int(np.sum((half == 1) & (y == 1)))} / "
                  f"{int(np.sum(half == 1))} | {balanced_error(at_prior, y):.3f} | {auc(p, y):.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
