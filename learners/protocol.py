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
and the predictor's real classes. ``learners/online.py`` puts a declared featuriser in
front, for raw feature dicts.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ActiveRow = Sequence[int]


@dataclass(frozen=True, slots=True)
class Step:
    """What learning one labelled example did.

    ``prediction`` is the released model's label for x before learning it (None: the
    learner abstained, knowing nothing yet): a function of the private example, so it
    is never published (in-process evaluation only).
    ``version`` (the released model's version after the example) and ``released`` (the
    example closed a release: the model changed) are functions of the released model
    sequence, so they are public. ``new_epoch``: the example ended its epoch."""
    prediction: int | None
    version: int
    released: bool = False
    new_epoch: bool = False


class BlockReleases:
    """The loop of a learner that releases its model once per block of ``params.block``
    examples and starts a new epoch every ``params.horizon`` (continual Winnow, DP-FTRL):
    ``learn_rows`` takes a run of checked rows a block segment at a time (the released
    model is fixed within a segment) through the learner's ``_learn_segment(rows, ys)``
    (its predictions and learning for the segment), then closes the block and maybe the
    epoch; ``pass_over`` moves through the blocks alike with examples that teach nothing.
    The same steps as one example at a time."""

    def blocks_left(self) -> int:
        """Examples until the current block closes (a release)."""
        return self.params.block - self.state.t % self.params.block

    @property
    def version(self) -> int:
        """Releases so far, over all epochs: the released model's version."""
        return self.state.epoch * self.params.blocks + self.state.b

    def learn_rows(self, rows, ys) -> list[Step]:
        return self._advance(len(ys), lambda a, b: self._learn_segment(rows[a:b], ys[a:b]))

    def pass_over(self, n: int) -> list[Step]:
        """n examples that take their places in the blocks and teach nothing (a zero
        gradient or increment each; no prediction): the blocks close, release and start
        epochs exactly as n learned examples would make them. For examples that may not
        reach the learner (a person past their bound, agents/units.py): the release
        schedule counts arriving examples, so whether one reached the learner moves no
        public counter, only noised sums."""
        return self._advance(n, lambda a, b: np.zeros(b - a, dtype=np.int64))

    def _advance(self, n: int, segment) -> list[Step]:
        """n examples, a block segment [a, b) at a time through ``segment(a, b)`` (the
        segment's predictions, 0: none), each block closed as it fills."""
        p, s = self.params, self.state
        steps: list[Step] = []
        start = 0
        while start < n:
            stop = min(n, start + self.blocks_left())
            pred = segment(start, stop)
            s.t += stop - start
            version = self.version
            released = new_epoch = False
            if s.t % p.block == 0:
                self._close_block()
                released = True
                if s.t >= p.horizon:
                    self._next_epoch()
                    new_epoch = True
            steps.extend(Step(int(v) or None, version) for v in pred[:-1])   # 0: abstained
            steps.append(Step(int(pred[-1]) or None, self.version, released, new_epoch))
            start = stop
        return steps

    def _learn_segment(self, rows, ys) -> np.ndarray:
        raise NotImplementedError

    def _close_block(self) -> None:
        raise NotImplementedError

    def _next_epoch(self) -> None:
        raise NotImplementedError
