"""The featuriser of declared features (schemas/features.py): raw records in, learner rows
out, bounded rather than refused.

Two forms, one per kind of learner, and a third for finite classes:

* binary (Winnow family, decision lists, the binary predictor classes): every field
  contributes exactly one active index, so a row has exactly ``active_count`` (= the
  number of fields) active features. A numeric field is one of its bins or its missing
  slot; a categorical field one of its vocabulary, or 'other' (unseen or missing); a
  hashed one of its buckets or its missing slot; a boolean false, true or missing.
* real (DP-FTRL, the real predictor classes): a numeric field is its value scaled to
  [-1, 1] (0 when missing); a categorical field is one-hot over its vocabulary and
  'other' (hashed: its buckets and missing); a boolean is +1 / -1 (0 when missing). Every
  entry lies in [-1, 1], so ||x||_2 <= sqrt(dimension) and at most one entry per field
  is non-zero: ||x||_2 <= sqrt(len(fields)).
* a point (the predictor's finite class): the record's slots of the binary form, read as
  one index of the finite domain they span (``point``: ``domain_size`` points, the product
  of the fields' slot counts).

Bounded, never refused (the contribution bound that DP needs, without a dead letter
that would say something about a valid record): a number outside [lower, upper] is
clamped to it; a value of the wrong JSON type counts as missing; fields the declaration
does not name are ignored. So every JSON object featurises, and a neighbouring record
changes one row, within the same bounds as any other.

>>> from dpstream.schemas.features import BooleanField, CategoricalField, NumericField
>>> f = Featuriser([NumericField(name="amount", lower=0, upper=100, bins=4),
...                 CategoricalField(name="country", vocabulary=["fr", "us"]),
...                 BooleanField(name="online")])
>>> f.binary_dimension, f.active_count, f.real_dimension
(11, 3, 5)
>>> f.active({"amount": 30.0, "country": "us", "online": True})
[1, 6, 9]
>>> f.active({"amount": 1e9, "country": "jp"})          # clamped; unseen; missing
[3, 7, 10]
>>> f.dense({"amount": 25.0, "country": "fr", "online": False})
[-0.5, 1.0, 0.0, 0.0, -1.0]
>>> f.domain_size, f.point({"amount": 30.0, "country": "us", "online": True})   # (1, 1, 1)
(45, 13)
"""
from __future__ import annotations

import bisect
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass

from dpstream.schemas.features import BooleanField, CategoricalField, NumericField
from dpstream.schemas.limits import clean_text


def _number(value) -> float | None:
    """A JSON number as a float (None for anything else: bool, string, NaN, infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:                      # a JSON integer beyond float range
        return None
    return v if math.isfinite(v) else None


def _category(value) -> str | None:
    """A JSON scalar as a category name (None when missing or not a scalar). A string is
    read as the worker's decoder reads it: a lone UTF-16 surrogate is U+FFFD
    (schemas/limits.py), so it hashes and looks up alike everywhere."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


def bucket(value: str, buckets: int) -> int:
    """A public hash of a category into ``buckets`` (BLAKE2b, 64 bits): the same in every
    process and version."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big") % buckets


class _Field:
    """One declared field's slots in both forms."""

    def __init__(self, spec):
        self.spec, self.name = spec, spec.name
        self.binary_size, self.real_size = spec.sizes()
        if isinstance(spec, NumericField):
            self.scale = spec.upper - spec.lower
        elif isinstance(spec, CategoricalField):
            self.index = {v: i for i, v in enumerate(spec.vocabulary or ())}

    def slot(self, value) -> int:
        """The field's active slot (binary form), in [0, binary_size)."""
        s = self.spec
        if isinstance(s, NumericField):
            v = _number(value)
            if v is None:
                return s.bins                                   # missing
            v = min(max(v, s.lower), s.upper)
            if s.edges is not None:
                return bisect.bisect_right(s.edges, v)
            return min(s.bins - 1, int((v - s.lower) / self.scale * s.bins))
        if isinstance(s, CategoricalField):
            c = _category(value)
            if s.vocabulary is not None:
                return self.index.get(c, len(s.vocabulary)) if c is not None else len(s.vocabulary)
            return bucket(c, s.hash_buckets) if c is not None else s.hash_buckets
        return 2 if not isinstance(value, bool) else int(value)

    def real(self, value, out: list, at: int) -> None:
        """Write the field's entries (real form) into ``out[at:at + real_size]``."""
        s = self.spec
        if isinstance(s, NumericField):
            v = _number(value)
            # (v - lower) / scale lies in [0, 1] (rounding is monotone and the registration
            # made scale a float64, schemas/features.py), so no step overflows
            out[at] = 0.0 if v is None else \
                (min(max(v, s.lower), s.upper) - s.lower) / self.scale * 2.0 - 1.0
        elif isinstance(s, CategoricalField):
            out[at + self.slot(value)] = 1.0
        elif isinstance(value, bool):
            out[at] = 1.0 if value else -1.0


class Featuriser:
    """Declared fields -> learner rows (module docstring)."""

    def __init__(self, fields):
        self.fields = [_Field(f) for f in fields]
        self.binary_offsets, self.real_offsets = [], []
        b = r = 0
        for f in self.fields:
            self.binary_offsets.append(b)
            self.real_offsets.append(r)
            b, r = b + f.binary_size, r + f.real_size
        self.binary_dimension, self.real_dimension = b, r
        self.active_count = len(self.fields)
        self.domain_size = math.prod(f.binary_size for f in self.fields)

    def dimension(self, binary: bool) -> int:
        return self.binary_dimension if binary else self.real_dimension

    def active(self, record: dict) -> list[int]:
        """The binary row's active indices (ascending: one per field, in field order)."""
        return [o + f.slot(record.get(f.name)) for f, o in zip(self.fields, self.binary_offsets)]

    def dense(self, record: dict) -> list[float]:
        """The real row, entries in [-1, 1]."""
        out = [0.0] * self.real_dimension
        for f, o in zip(self.fields, self.real_offsets):
            f.real(record.get(f.name), out, o)
        return out

    def point(self, record: dict) -> int:
        """The record's point of the finite domain the fields span, in [0, domain_size): the
        row-major index of its binary slots (``numpy.ravel_multi_index`` over the fields'
        slot counts, the first field most significant)."""
        i = 0
        for f in self.fields:
            i = i * f.binary_size + f.slot(record.get(f.name))
        return i

    def row(self, record: dict, binary: bool) -> dict:
        """The row as an event's features: {"active": [...]} or {"x": [...]}."""
        return {"active": self.active(record)} if binary else {"x": self.dense(record)}


BINNINGS = ("quantile", "equal_width")


@dataclass
class Suggestion:
    """A suggested declaration: its ``fields``, and ``notes`` by field name: why a field
    was left out, or why it was declared as it was when that may surprise."""
    fields: list
    notes: dict[str, str]


def _value_kind(v) -> str | None:
    """"bool", "int", "real" or "str" for a sample value (numpy scalars too); None when
    missing (None, NaN, infinity) or not a scalar."""
    import numbers

    import numpy as np
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, numbers.Integral):
        return "int"
    if isinstance(v, numbers.Real):
        return "real" if math.isfinite(float(v)) else None
    return "str" if isinstance(v, str) else "other"


def _name_problem(name: str) -> str | None:
    """Why a declaration cannot name a field ``name`` (schemas/features.py FieldName), with
    a name it could take; the character at fault by position and code point, never the name."""
    from pydantic import TypeAdapter, ValidationError

    from dpstream.schemas.features import FieldName
    try:
        TypeAdapter(FieldName).validate_python(name)
    except ValidationError as err:
        fixed = "".join(c if c.isprintable() else "_" for c in name).strip()[:64].strip() or "field"
        why = err.errors()[0]
        detail = (why["msg"].removeprefix("Value error, ") if why["type"] == "value_error"
                  else "a field name has 1 to 64 printable characters, without whitespace at either end")
        return f"{detail} (rename it in the data, e.g. {fixed!r})"
    return None


def suggest_fields(records: list[dict], **kwargs) -> list:
    """The fields of ``suggest_declaration`` (for a library user who needs no notes)."""
    return suggest_declaration(records, **kwargs).fields


def suggest_declaration(records: list[dict], *, bins: int = 8, binning: str = "equal_width",
                        max_vocabulary: int = 100, hash_buckets: int = 64) -> Suggestion:
    """A declaration for raw records of a *public* sample (never the private data itself:
    bounds, edges and vocabularies are published with the model). Numbers get bounds of
    the sample's mean +- 2 standard deviations (outliers are clamped rather than squeezing
    every other value into a corner, and a dense row's 0 is the sample's mean: a skewed
    field mostly at its minimum then adds little to every row), and ``bins`` bins of equal
    width (the default: on six real sets at epsilon 4 it was the best choice or within 2
    points of it, bench/featurising.py; quantile bins lost up to 3x on a set whose
    positives sit in the tails) or between quantiles of the sample (``binning="quantile"``;
    repeated quantiles merge);
    strings a vocabulary of their values (hashed into ``hash_buckets`` when there are more
    than ``max_vocabulary``); booleans (also numpy's) a boolean field; integers that are
    all 0 or 1 a number in [0, 1] with 2 bins (a boolean field takes JSON true/false only,
    so 0/1 would all go to its missing slot). Fields whose values mix types, that are all
    missing or constant, or whose names a declaration cannot hold are left out, each with
    its reason in ``notes``."""
    if binning not in BINNINGS:
        raise ValueError(f"binning must be one of {BINNINGS}")
    import numpy as np
    values: dict[str, list] = {}
    for r in records:
        for k, v in r.items():
            values.setdefault(k, []).append(v)
    out, notes = [], {}
    for name, vs in values.items():
        vs, missing_note = _not_finite_as_missing(vs)
        present = [(v, k) for v in vs if (k := _value_kind(v)) is not None]
        kinds = Counter(k for _, k in present)
        problem = _name_problem(name)
        if name == "" or _UNNAMED.fullmatch(name):
            notes[name] = ("left out: " + ("pandas' name for " if name else "") + "a column without a "
                           "header (a DataFrame's index? write the file with to_csv(index=False))")
        elif problem:
            notes[name] = f"left out: {problem}"
        elif not present:
            notes[name] = "left out: no value in the sample"
        elif len(kinds) > 1 and not set(kinds) <= {"int", "real"}:
            notes[name] = "left out: mixed types (" + ", ".join(
                f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kn: (-kn[1], kn[0])))
            notes[name] += "): a field holds one type"
        elif "other" in kinds:
            notes[name] = "left out: lists or objects, not scalars"
        elif len({v for v, _ in present}) == 1:
            notes[name] = f"left out: constant (every value is {str(present[0][0])[:40]!r}): it says nothing"
        elif set(kinds) == {"bool"}:
            out.append(BooleanField(name=name))
        elif set(kinds) == {"int"} and {int(v) for v, _ in present} <= {0, 1}:
            out.append(NumericField(name=name, lower=0, upper=1, bins=2))
            notes[name] = ("0/1 integers: declared a number in [0, 1] with 2 bins (a boolean field "
                           "takes JSON true/false only)")
        elif set(kinds) <= {"int", "real"}:
            xs = np.array([float(v) for v, _ in present])
            field = _numeric(name, xs, bins, binning)
            if isinstance(field, str):
                notes[name] = f"left out: {field}"
            else:
                out.append(field)
        else:
            vocab = sorted({clean_text(v) for v, _ in present})        # as the worker reads them
            kept = [v for v in vocab if len(v) <= MAX_CATEGORY]
            if not kept or len(vocab) > max_vocabulary:
                out.append(CategoricalField(name=name, hash_buckets=hash_buckets))
            else:
                out.append(CategoricalField(name=name, vocabulary=kept))
            if len(kept) < len(vocab):      # never echoed: a long value may be anything
                notes[name] = (f"{len(vocab) - len(kept)} value(s) longer than {MAX_CATEGORY} "
                               "characters (a vocabulary entry's most) " +
                               ("left out of the vocabulary: they go to its 'other' slot"
                                if out[-1].vocabulary is not None else f"hashed into {hash_buckets} buckets"))
        if missing_note:
            notes[name] = f"{notes[name]}; {missing_note}" if name in notes else missing_note
    return Suggestion(out, notes)


# pandas' name for a column whose header cell is empty (``read_csv`` of a file written with
# ``to_csv()``, whose first column is the index): pandas.io.parsers, "Unnamed: {i}"
_UNNAMED = re.compile(r"Unnamed: \d+")


# the longest vocabulary entry a declaration takes (schemas/features.py CategoricalField);
# before, a longer sample value ended `features --sample` in a traceback that echoed it
MAX_CATEGORY = 128


def _not_finite_text(v) -> bool:
    """A string that reads as a number that is not finite ("inf", "-Infinity", "NaN": what
    pandas and numpy write for them), or an integer beyond float64 (a 400-digit one: the
    worker sends it to a numeric field's missing slot, docs/limits.md; before, it ended
    `features --sample` in an OverflowError traceback)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v.bit_length() > 1024 and _overflows(v)
    if not isinstance(v, str):
        return False
    try:
        return not math.isfinite(float(v))
    except ValueError:
        return False


def _overflows(v: int) -> bool:
    try:
        float(v)
    except OverflowError:
        return True
    return False


def _not_finite_as_missing(vs: list) -> tuple[list, str | None]:
    """A field's sample values with each not-finite number written as text turned into a
    missing value, when every other value is a number or missing: the worker sends such a
    value, a string, to a numeric field's missing slot. And a note that says how many."""
    n = sum(map(_not_finite_text, vs))
    if not n or not all(_not_finite_text(v) or _value_kind(v) in (None, "int", "real") for v in vs):
        return vs, None
    shown = ", ".join(sorted({repr(v.strip()[:12]) if isinstance(v, str) else "an integer beyond float64"
                              for v in vs if _not_finite_text(v)})[:3])
    return ([None if _not_finite_text(v) else v for v in vs],
            f"{n} value(s) {shown} read as missing (not a finite number: a numeric field sends them "
            "to its missing slot)")


def _numeric(name: str, xs, bins: int, binning: str):
    """A numeric field over the sample ``xs`` (``suggest_declaration``), or why there is
    none (a string). The mean and standard deviation of values near float64's largest
    (1e200: their squares overflow) are taken over the values scaled by the largest
    magnitude; bounds beyond float64's range are cut to the sample's least and greatest
    value; a span no float64 holds leaves the field out."""
    import numpy as np
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = float(xs.mean()), float(xs.std())
        if not (math.isfinite(mean) and math.isfinite(std)):
            scale = float(np.abs(xs).max())
            ys = xs / scale
            mean, std = float(ys.mean()) * scale, float(ys.std()) * scale
        lower, upper = mean - 2 * std, mean + 2 * std
    if not (math.isfinite(lower) and math.isfinite(upper)):
        lower, upper = max(lower, float(xs.min())), min(upper, float(xs.max()))
    if not math.isfinite(upper - lower):
        return (f"values from {xs.min():.3g} to {xs.max():.3g} span more than a float64 holds: "
                "scale the field in the data")
    if binning == "equal_width":
        return NumericField(name=name, lower=lower, upper=upper, bins=bins)
    inner = sorted(set(float(q) for q in np.quantile(xs, np.arange(1, bins) / bins)
                       if lower < q < upper))
    return (NumericField(name=name, lower=lower, upper=upper, bins=len(inner) + 1, edges=inner)
            if inner else NumericField(name=name, lower=lower, upper=upper, bins=2))
