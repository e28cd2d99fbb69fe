"""The data owner's report: what each model's declared featuriser makes of the records a
command holds (``dpstream produce``, ``dpstream run``), counted where the data is.

A misspelt field name, a number sent as a string, or 0/1 sent for a boolean is not an
error for the worker: the record is bounded (the value goes to the field's missing
slot, schemas/features.py), and the worker must not say so, since whether a record's
value was missing, unseen or clamped is a fact about a private record that no ledger
entry covers. The command that reads the file is on the data owner's side: it counts,
per declared field, the records whose value goes to the missing slot (absent, or of the
wrong type: numbers as strings, 0/1 integers for a boolean, and the rest), to "other"
(a category outside the vocabulary), or is clamped to the bounds, and the field names
the declaration does not have; it prints them on stderr, never to a topic.

The counts come from the worker's own featuriser (learners/features.py: the slot each
value takes), so they are what the model will see, not a second opinion.

For a model whose privacy unit is a person, the ID field is not a feature (never counted
as undeclared), and the examples without a usable ID are counted: they will not reach the
learner. No ID is ever printed.
"""
from __future__ import annotations

import math
from collections import Counter

from dpstream.learners.features import Featuriser
from dpstream.schemas.features import CategoricalField, NumericField

MISSING, STRINGS, INTS, WRONG, OTHER, CLAMPED, NONFINITE = (
    "missing", "numbers as strings", "0/1 integers", "wrong type", "other", "clamped", "not finite")
#: outcomes that are a mistake in the data rather than the bounding a declaration asks for
MISTAKES = (STRINGS, INTS, WRONG)
SHOWN = 8              # undeclared names listed per model


def _numeric_text(value) -> bool | None:
    """Whether text reads as a number: True finite, None "NaN"/"inf" (JSON has neither, and
    a table's NaN cell is usually a missing value), False not a number."""
    try:
        return True if math.isfinite(float(value)) else None
    except ValueError:
        return False


def outcome(field, value) -> str | None:
    """What the featuriser does with ``value`` for one declared ``field`` (a
    ``Featuriser.fields`` entry): None when it takes the value as it is."""
    spec = field.spec
    if value is None:
        return MISSING
    slot = field.slot(value)
    if isinstance(spec, NumericField):
        if slot == spec.bins:                       # the missing slot: not a number
            if not isinstance(value, str):
                return WRONG
            return {True: STRINGS, None: NONFINITE}.get(_numeric_text(value), WRONG)
        return CLAMPED if not spec.lower <= float(value) <= spec.upper else None
    if isinstance(spec, CategoricalField):
        size = len(spec.vocabulary) if spec.vocabulary is not None else spec.hash_buckets
        if slot != size:
            return None
        scalar = isinstance(value, (str, bool, int, float))
        return OTHER if spec.vocabulary is not None and scalar else WRONG
    if slot == 2:                                   # a boolean's missing slot
        return INTS if type(value) is int and value in (0, 1) else WRONG
    return None


_SAY = {MISSING: "missing", NONFINITE: "NaN or infinite (missing slot)", STRINGS: "numbers sent as strings (missing slot: send JSON numbers)",
        INTS: "0/1 integers (missing slot: send true/false, or declare it numeric 0..1 with 2 bins)",
        WRONG: "of the wrong type (missing slot)", OTHER: "not in the vocabulary (other slot)"}


class OwnerReport:
    """Per model and declared field, how many records' values took each ``outcome``;
    the undeclared field names; the records seen; and how the files were read (labels
    mapped, table columns left out)."""

    def __init__(self, configs: dict, *, left_out: list[str] | None = None,
                 notes: list[str] | None = None):
        self.featurisers = {mid: Featuriser(c.features) for mid, c in configs.items()
                            if c.features is not None}
        # a person's ID field is not a feature, nor an undeclared name
        self.declared = {mid: {f.name for f in c.features} | (
                             {c.privacy_unit.id_field} if c.privacy_unit is not None else set())
                         for mid, c in configs.items() if c.features is not None}
        self.units = {mid: c for mid, c in configs.items() if c.privacy_unit is not None}
        self.without_id: Counter = Counter()     # a bounded model's examples without a usable ID
        self.counts: dict[str, dict[str, Counter]] = {}
        self.undeclared: dict[str, Counter] = {}
        self.records: Counter = Counter()
        self.left_out = left_out or []      # table columns not sent (userfiles.table_rows)
        self.notes = notes or []            # how the files were read (userfiles.map_labels)

    def add(self, record) -> None:
        """Count one example or query (anything else passes)."""
        model_id = record.get("model_id") if isinstance(record, dict) else None
        if isinstance(model_id, str) and "y" in record and model_id in self.units:
            from dpstream.agents.units import id_text, raw_id
            features = record.get("features")
            found = raw_id(self.units[record["model_id"]], record.get("privacy_id"),
                           features if isinstance(features, dict) else None)
            if id_text(found) is None:
                self.without_id[record["model_id"]] += 1
        if not isinstance(record, dict) or not isinstance(record.get("features"), dict):
            return
        model_id = record.get("model_id")
        featuriser = self.featurisers.get(model_id) if isinstance(model_id, str) else None
        if featuriser is None:
            return
        features = record["features"]
        self.records[model_id] += 1
        counts = self.counts.setdefault(model_id, {})
        for field in featuriser.fields:
            what = outcome(field, features.get(field.name))
            if what is not None:
                counts.setdefault(field.name, Counter())[what] += 1
        declared = self.declared[model_id]
        for name in features:
            if name not in declared:
                self.undeclared.setdefault(model_id, Counter())[name] += 1

    def misnamed(self) -> list[tuple[str, str, str]]:
        """(model, declared field, column) where the field is missing from every record of
        the model while the file has a column of nearly its name (case aside, or a close
        spelling: difflib's ratio >= 0.8) that no model declares: a renamed or misspelt
        header, not data (a newcomer's ``Income`` for ``income`` sent 5,000 records whose
        income all went to the missing slot)."""
        from difflib import get_close_matches
        found = []
        for model_id, n in sorted(self.records.items()):
            spare = sorted(set(self.left_out) | set(self.undeclared.get(model_id, ())))
            by_fold = {c.casefold(): c for c in spare}
            for field in self.featurisers[model_id].fields:
                if self.counts.get(model_id, {}).get(field.name, Counter())[MISSING] < n:
                    continue
                match = by_fold.get(field.name.casefold()) or next(
                    iter(get_close_matches(field.name, spare, n=1, cutoff=0.8)), None)
                if match is not None:
                    found.append((model_id, field.name, match))
        return found

    def mistakes(self) -> int:
        """Values of the wrong type, and undeclared names in the records (what ``--strict``
        refuses). Not the table columns left out: no model declares them, so they are not
        sent (only listed); before, ``features`` then ``run --strict`` on the same CSV was
        refused for the constant columns ``features`` itself had left out."""
        wrong = sum(c[m] for fields in self.counts.values() for c in fields.values() for m in MISTAKES)
        return wrong + sum(sum(c.values()) for c in self.undeclared.values())

    def lines(self, command: str) -> list[str]:
        """The report, one line per finding (none for a model whose records had nothing
        to say beyond a one-line all-clear)."""
        out = [f"dpstream {command}: {note}" for note in self.notes]
        for model_id, n in sorted(self.without_id.items()):
            field = self.units[model_id].privacy_unit.id_field
            out.append(f"dpstream {command}: model {model_id}: {n:,} examples have no usable ID in "
                       f"'{field}' (text or a whole number): they will not reach the learner")
        for model_id, n in sorted(self.records.items()):
            fields = self.featurisers[model_id].fields
            counts = self.counts.get(model_id, {})
            found = []
            for f in fields:
                c = counts.get(f.name)
                if not c:
                    continue
                parts = [f"{c[k]:,} {_SAY[k]}" for k in (STRINGS, INTS, WRONG, NONFINITE, MISSING, OTHER) if c[k]]
                if c[CLAMPED]:
                    parts.append(f"{c[CLAMPED]:,} clamped to [{f.spec.lower:g}, {f.spec.upper:g}]")
                found.append(f"  {f.name}: " + ", ".join(parts))
            names = self.undeclared.get(model_id, Counter())
            if names:
                shown = ", ".join(f"{name[:40]!r} ({k:,})" for name, k in names.most_common(SHOWN))
                more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
                found.append(f"  fields the model does not declare (ignored): {shown}{more}")
            if not found:
                out.append(f"dpstream {command}: model {model_id}: every declared field had a value "
                           f"of its type in all {n:,} records")
                continue
            out.append(f"dpstream {command}: what model {model_id} makes of these {n:,} records "
                       "(counted here; the worker publishes none of it):")
            out.extend(found)
        if self.left_out:
            out.append(f"dpstream {command}: columns not sent (no model declares them): "
                       + ", ".join(repr(c[:40]) for c in self.left_out[:SHOWN])
                       + (f" and {len(self.left_out) - SHOWN} more" if len(self.left_out) > SHOWN else ""))
        return out
