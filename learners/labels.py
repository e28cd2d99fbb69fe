"""A binary classifier's two classes in the user's own labels, and the learner's -1 / +1.

River's binary classifiers take bool labels and answer ``False`` / ``True``; users also
bring 0/1, -1/+1 and two named classes ("phish" / "legit", "yes" / "no"). The learners
(learners/protocol.py) speak -1 / +1. ``BinaryLabels`` translates both ways so that a
classifier answers only labels the user gave, and keeps the translation fixed from the
first label on (a learner's state is in -1 / +1: the meaning of a sign must not change
while it learns).

Which label is +1:
* declared ``classes=(negative, positive)`` (scikit-learn's ``classes_[1]`` is the
  positive class): that order;
* bools: ``True``; numbers: 1 is +1, 0 and -1 are -1 (so 0/1 and -1/+1 streams mean the
  same whatever their first label);
* any other label: the first class seen is +1, the second -1 (the learners treat both
  signs alike, so which one is +1 does not change what they learn).

What is known when (the model answers only when it can name both of its answers):
* declared ``classes``: from the start (public configuration);
* bools: both (``False``, ``True``, River's binary convention) from the first label;
* otherwise: once two distinct labels have been seen. Until then ``label`` is None for
  the class not yet seen, and the classifiers answer nothing (River's
  ``progressive_val_score`` skips a None answer), rather than a class the user never
  gave or the one class seen, which would count abstentions as that class.

Privacy: when ``classes`` is declared, or the labels are bools, the translation is fixed
before any data arrives. Otherwise the class names, and the moment the second one first
appears, are read from the labels: they are not covered by the learner's guarantee.
Declare ``classes`` when that matters.

>>> labels = BinaryLabels()
>>> labels.sign("phish"), labels.label(-1), labels.complete
(1, None, False)
>>> labels.sign("legit"), labels.label(-1), labels.classes
(-1, 'legit', ('legit', 'phish'))
>>> BinaryLabels().sign(False), BinaryLabels(classes=("no", "yes")).label(+1)
(-1, 'yes')
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from dpstream.mechanisms.errors import ParameterError


def _plain(y):
    """numpy scalars as Python ones (``np.True_`` is not a ``bool``)."""
    return y.item() if isinstance(y, np.generic) else y


def _preferred_sign(y) -> int:
    """+1 for True and 1, -1 for False, 0 and -1, +1 for anything else (first come)."""
    if isinstance(y, bool):
        return 1 if y else -1
    if isinstance(y, numbers.Number) and y in (0, -1):
        return -1
    return 1


def conventional(y) -> bool:
    """Whether ``y``'s sign is fixed by convention (a bool, or 1, 0, -1), not by the
    order the labels come in: only then is "y = +1" known without declared classes."""
    y = _plain(y)
    return isinstance(y, bool) or (isinstance(y, numbers.Number) and y in (0, 1, -1))


def _check(y, name: str = "y"):
    """A usable label: hashable, not None, not NaN. The value stays out of the message
    (labels are private)."""
    y = _plain(y)
    try:
        hash(y)
    except TypeError:
        raise ParameterError(name, "<unhashable label>",
                             "a hashable label (bool, number or string)") from None
    if y is None or (isinstance(y, float) and math.isnan(y)):
        raise ParameterError(name, "<missing label>", "a label (bool, number or string), not None or NaN")
    return y


class BinaryLabels:
    """The user's two classes and their signs (module docstring). ``classes``: the
    declared ``(negative, positive)`` labels, or None to read them from the labels."""

    def __init__(self, classes: tuple | list | None = None):
        self.by_sign: dict[int, object] = {}
        if classes is not None:
            if isinstance(classes, (str, bytes)):       # "ab" is not the classes "a" and "b"
                raise ParameterError("classes", classes,
                                     "two labels (negative, positive), e.g. ('no', 'yes')")
            pair = tuple(_check(c, "classes") for c in classes)
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ParameterError("classes", "<labels>", "two distinct labels (negative, positive)")
            self.by_sign = {-1: pair[0], 1: pair[1]}

    @property
    def complete(self) -> bool:
        """Both classes are known: the model can name each of its answers."""
        return len(self.by_sign) == 2

    @property
    def classes(self) -> tuple:
        """The known classes, negative first."""
        return tuple(self.by_sign[s] for s in (-1, 1) if s in self.by_sign)

    def sign(self, y) -> int:
        """The learner's label for the user's label ``y``, learning the classes if they
        were not declared. ParameterError for a third class, None, NaN or an unhashable."""
        y = _check(y)
        for s, known in self.by_sign.items():
            if known == y:
                return s
        if self.complete:
            raise ParameterError("y", "<a third class>", f"one of this model's two classes {self.classes}")
        s = _preferred_sign(y)
        if s in self.by_sign:
            s = -s
        self.by_sign[s] = y
        if isinstance(y, bool):                 # a bool names its pair
            self.by_sign.setdefault(-s, not y)
        return s

    def label(self, sign: int | None):
        """The user's label for a learner's answer (None: abstained, or not known yet)."""
        return self.by_sign.get(sign) if self.complete else None

    def proba(self, p_positive: float) -> dict:
        """{negative: 1 - p, positive: p} once both classes are known, else {}."""
        if not self.complete:
            return {}
        return {self.by_sign[-1]: 1.0 - p_positive, self.by_sign[1]: p_positive}
