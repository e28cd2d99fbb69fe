"""Declared features: how a model turns raw records into the rows its learner takes.

A registration may declare its fields (``ModelConfig.features``). The declaration is
public configuration (bounds, bin edges, vocabularies are public choices, e.g. computed
from a public sample); it fixes the model's dimension and how many features a row has
active, so nobody counts them by hand. learners/features.py is the featuriser: the same
code runs in the library, ``dpstream run``, the worker and replay.
"""
from __future__ import annotations

import math
import sys
from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field, model_validator

from .events import Strict
from .limits import clean_text

def _cleaned(value):
    """A string as the decoder reads it (a lone surrogate is U+FFFD, schemas/limits.py), so a
    vocabulary entry and a record's value compare alike in the library and the worker."""
    return clean_text(value) if isinstance(value, str) else value


# A field name as data frames name columns ("mean radius", "worst area (mm^2)", "naïve
# café"): 1 to 64 printable characters of any script, spaces inside it (U+0020) but not at
# either end, where a reader could not see them. Nothing a reader cannot see or that reorders
# what they see: a name is quoted in errors, reports and the published declaration, so a
# control character (category Cc), a format character (Cf: U+202E RIGHT-TO-LEFT OVERRIDE
# would show "evil" as "live", U+200B ZERO WIDTH SPACE would make two names look alike), a
# lone surrogate, a private-use or unassigned code point, a line or paragraph separator, or
# any space but U+0020 is refused (``str.isprintable``: Unicode's "Other" and "Separator"
# categories except the ASCII space, docs.python.org/3/library/stdtypes.html#str.isprintable).
# The exported JSON Schema keeps the coarser ASCII pattern (a JSON Schema regex has no
# Unicode categories without the "u" flag).
_NAME_PATTERN = r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$"


# Printable yet blank or invisible (issue 43): Unicode's Default_Ignorable_Code_Point
# (DerivedCoreProperties.txt, Unicode 15.1; unicode.org/reports/tr44/#Default_Ignorable_Code_Point),
# of which U+3164 HANGUL FILLER, U+FFA0, U+17B4, U+034F COMBINING GRAPHEME JOINER and the
# variation selectors pass ``isprintable``, and U+2800 BRAILLE PATTERN BLANK (category So,
# drawn as a blank cell). A name whose first character is a combining mark (category M)
# draws that mark over whatever precedes the name where it is quoted.
_BLANK = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
          (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
          (0x2060, 0x206F), (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F),
          (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
          (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


def _blank(ch: str) -> bool:
    o = ord(ch)
    return any(a <= o <= b for a, b in _BLANK)


def _printable_name(name: str) -> str:
    """``name`` if a reader sees exactly what it holds (above); else ValueError naming the
    first offending character's position and code point, never the rest of the name."""
    import unicodedata
    for i, ch in enumerate(name, 1):
        if not (ch.isprintable() or ch == " ") or (ch.isspace() and i in (1, len(name))) \
                or _blank(ch) or (i == 1 and unicodedata.category(ch).startswith("M")):
            raise ValueError(f"a field name holds printable characters, with spaces only inside it: "
                             f"character {i} of {len(name)} is {_code_point(ch)}")
    return name


def quoted(value: str) -> str:
    """``value`` in double quotes, as a reader can tell it apart from its neighbours in a
    list (a report's vocabulary: ``"fr", "de", "a, b"``): a quote, a backslash and every
    character the field-name rule above refuses (unprintable, blank or invisible, or
    reordering what follows, e.g. U+202E) written as a JSON escape (``\\u202e``); any
    other character of any script as itself. A vocabulary entry is a value the data
    holds, so it is not refused for these characters, only shown unambiguously."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif not ch.isprintable() or _blank(ch) or (ch.isspace() and ch != " "):
            out.extend(f"\\u{u:04x}" for u in _utf16(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _utf16(ch: str) -> list[int]:
    """The UTF-16 code units of one character, as a JSON escape writes them."""
    o = ord(ch)
    if o < 0x10000:
        return [o]
    o -= 0x10000
    return [0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)]


def _code_point(ch: str) -> str:
    """'U+202E (RIGHT-TO-LEFT OVERRIDE, category Cf)'."""
    import unicodedata
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X} (" + (f"{name}, " if name else "") + f"category {unicodedata.category(ch)})"


FieldName = Annotated[str, Field(min_length=1, max_length=64, json_schema_extra={"pattern": _NAME_PATTERN}),
                      BeforeValidator(lambda v: _printable_name(v) if isinstance(v, str) else v)]
# (before pydantic's own str check: a lone surrogate gets this message, not "unable to
# parse raw data as a unicode string")
MAX_FIELDS = 500


class NumericField(Strict):
    """A number with public bounds. Values outside them are clamped; a missing value, or
    one that is not a number, goes to the field's missing slot. Binary learners see one
    of ``bins`` bins (equal width over [lower, upper], or between the given ``edges``, e.g.
    quantiles of a public sample) or the missing slot; dense learners see the value
    scaled to [-1, 1] (0 when missing)."""
    type: Literal["numeric"] = "numeric"
    name: FieldName
    lower: float
    upper: float
    bins: int = Field(default=8, ge=2, le=256)
    edges: list[float] | None = Field(default=None, max_length=255)   # inner edges, increasing

    @model_validator(mode="after")
    def _bounds(self):
        if not (math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper):
            raise ValueError("numeric bounds must be finite with lower < upper")
        if not math.isfinite(self.upper - self.lower):
            # the featuriser scales by upper - lower: it must be a float64 (every value in
            # [lower, upper] then maps into [-1, 1] and into a bin, learners/features.py)
            raise ValueError(f"numeric field '{self.name}': upper - lower must be at most "
                             f"{sys.float_info.max:.4g} (float64's largest value); "
                             f"[{self.lower:g}, {self.upper:g}] spans more: narrow the bounds")
        if self.edges is not None:
            e = self.edges
            if len(e) + 1 != self.bins:
                raise ValueError("edges must hold bins - 1 inner edges")
            if any(not math.isfinite(v) for v in e) or any(b <= a for a, b in zip(e, e[1:])):
                raise ValueError("edges must be finite and strictly increasing")
            if e and not (self.lower < e[0] and e[-1] < self.upper):
                raise ValueError("edges must lie strictly between lower and upper")
        return self

    def sizes(self) -> tuple[int, int]:
        """(slots in the binary form, entries in the real form): the bins and missing; the value."""
        return self.bins + 1, 1


class CategoricalField(Strict):
    """A category: one of a public ``vocabulary`` (anything else, or missing, goes to the
    'other' slot), or hashed into ``hash_buckets`` buckets (a public hash; missing goes
    to its own slot)."""
    type: Literal["categorical"] = "categorical"
    name: FieldName
    vocabulary: list[Annotated[str, Field(max_length=128), BeforeValidator(_cleaned)]] | None = \
        Field(default=None, max_length=10_000)
    hash_buckets: int | None = Field(default=None, ge=2, le=1_000_000)

    @model_validator(mode="after")
    def _one_way(self):
        if (self.vocabulary is None) == (self.hash_buckets is None):
            raise ValueError("give a vocabulary or hash_buckets (one of them)")
        if self.vocabulary is not None and len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError("the vocabulary repeats a value")
        return self

    def sizes(self) -> tuple[int, int]:
        """One slot per value or bucket, and 'other' (vocabulary) or missing (hashed), in both forms."""
        n = len(self.vocabulary) + 1 if self.vocabulary is not None else self.hash_buckets + 1
        return n, n


class BooleanField(Strict):
    """true / false (JSON booleans; anything else counts as missing)."""
    type: Literal["boolean"] = "boolean"
    name: FieldName

    def sizes(self) -> tuple[int, int]:
        """false, true, missing; one entry (+1 / -1 / 0)."""
        return 3, 1


FeatureField = Annotated[Union[NumericField, CategoricalField, BooleanField], Field(discriminator="type")]


def check_fields(fields: list) -> None:
    """ValueError if two fields share a name or there are too many."""
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError("two declared features share a name")
    if not 1 <= len(fields) <= MAX_FIELDS:
        raise ValueError(f"declare between 1 and {MAX_FIELDS} features")


def new_names_problem(fields: list) -> str | None:
    """Why a *new* registration's field names would mislead a reader (None when they do
    not): a name holding U+FFFD (what the decoder makes of a lone surrogate or of bytes
    that are not UTF-8: before, "a\\ud800b" registered as "a\\ufffdb"), or two names that
    look the same (equal in Unicode's NFC form: "café" typed with one code point or with
    "e" and a combining accent; before, both registered and printed alike). Checked when
    a model is registered (agents/sequencer.py), not in the schema: a config stored before
    this check keeps loading, so its model keeps running after an upgrade."""
    import unicodedata
    for f in fields:
        at = f.name.find("\ufffd")
        if at >= 0:
            return (f"a field name holds printable characters, with spaces only inside it: character "
                    f"{at + 1} of {len(f.name)} is U+FFFD (REPLACEMENT CHARACTER: a lone surrogate or "
                    "bytes that are not UTF-8)")
    if len({unicodedata.normalize("NFC", f.name) for f in fields}) != len(fields):
        return ("two declared features have names that look the same (they differ only in how an "
                "accented letter is encoded, Unicode NFC): give them distinct names")
    return None


def declared_dimension(fields: list, binary: bool) -> int:
    """The dimension a declaration gives a model (binary or real rows)."""
    return sum(f.sizes()[0 if binary else 1] for f in fields)
