"""The online learner protocol every dpstream learner follows (River's verbs).

* ``learn_one(x, y) -> Step`` and ``learn_many(X, ys) -> list[Step]``: learn labelled
  examples in order; ``learn_many`` gives the same steps, state and charges as
  ``learn_one`` on each in turn (it is only faster).
* ``predict_one(x) -> int | None`` and ``predict_many(X) -> np.ndarray``: the released
  model's label, -1 or +1 (None where the learner cannot answer). For the online
  learners a prediction is post-processing of the released model and free; for the
  private predictor a query is itself a private release and is charged.
* ``ledger``: the learner's current epoch ledger. Every learner charges its own
  mechanisms to it before anything they pay for can leave, and hands each entry to the
  ``on_charge`` callback it was given (the worker publishes them on the ``ledger``
  topic, so a library user sees the same entries the worker publishes).

Each learner has one input type for all four verbs: ``ActiveRow`` (the indices of the
+1 features of a binary row) for the Winnow family, a dense float vector for DP-FTRL
and the predictor's real classes. ``learners/river.py`` puts a declared featuriser in
front, for raw feature dicts.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ActiveRow = Sequence[int]


@dataclass(frozen=True, slots=True)
class Step:
    """What learning one labelled example did.

    ``prediction`` is the released model's label for x before learning it: a function of
    the private example, so it is never published (in-process evaluation only).
    ``version`` (the released model's version after the example) and ``released`` (the
    example closed a release: the model changed) are functions of the released model
    sequence, so they are public. ``new_epoch``: the example ended its epoch."""
    prediction: int | None
    version: int
    released: bool = False
    new_epoch: bool = False
