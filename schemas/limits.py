"""The public structural limits of an input record, and the one decoder that applies them.

Every record on ``models``, ``examples`` and ``queries`` is one JSON value (RFC 8259) and
must keep within these limits, whatever its type, its model or its values:

==========================  ============  ==================================================
limit                       value         why this value
==========================  ============  ==================================================
bytes of the payload        524,288       half of Kafka's default largest message (the
                            (512 KiB)     broker's ``message.max.bytes`` is 1 MiB plus batch
                                          overhead, the producer's ``max.request.size``
                                          1 MiB; KAFKA-4203, apache/kafka#4154): room for
                                          the log record that carries the event on
nesting of arrays and       128           serde_json's default recursion limit; below every
objects (the record's own                 parser on the worker's path (pydantic-core's JSON
object counts as 1)                       parser stops at 200 levels, its validator at 255,
                                          Python's ``json`` near 1,000)
members of one object       1,000         the most fields a raw ``features`` object takes
digits of a JSON integer    4,300         Python's default int/str conversion limit
                                          (``sys.get_int_max_str_digits``, CVE-2020-10735):
                                          every integer within it converts both ways
==========================  ============  ==================================================

A record over a limit goes to the ``rejected`` topic with a short reason that starts with
the cause (``nested too deeply: ...``) and quotes the limit, never the record. A record
within the limits is never dead-lettered for its values: what is left is the schema of
its type (``x`` a list of numbers, ``y`` -1 or +1, a model id of the documented pattern).

What a string means. Any JSON string is a value, including one with a lone UTF-16
surrogate escape (``"\\ud83d"``: what JavaScript's ``JSON.stringify`` writes for a string
cut in the middle of an emoji; RFC 8259 section 8.2 allows it and leaves its meaning
open). ``decode`` reads every lone surrogate, in keys and values alike, as U+FFFD (the
replacement character), and a valid pair as the character it encodes; ``clean_text`` does
the same to a Python string, so the featuriser hashes and looks up the same text in the
library as in the worker. A model id must still match its pattern, so one with a lone
surrogate is a schema error (``invalid: model_id: string_pattern_mismatch``).

One decoder. ``decode`` is the meaning of a record's bytes for the worker (the sequencer,
also under ``dpstream run``) and for ``dpstream produce``'s local check, so both give the
same verdict. The worker's hot path lets pydantic-core parse a record itself only when
``plain`` certifies, from byte counts alone, that the record is within every limit and
holds no surrogate escape; any other record goes through ``decode``.

>>> decode(b'{"features": {"merchant": "\\\\ud83d"}, "y": 1}')
{'features': {'merchant': '\ufffd'}, 'y': 1}
>>> decode(b'[' * 129 + b']' * 129)
Traceback (most recent call last):
...
dpstream.schemas.limits.LimitError: nested too deeply: arrays and objects nest at most 128 levels (a structural limit, docs/limits.md)
"""
from __future__ import annotations

import json
import re

MAX_BYTES = 512 * 1024
MAX_DEPTH = 128
MAX_MEMBERS = 1_000
MAX_INTEGER_DIGITS = 4_300

_WHERE = "(a structural limit, docs/limits.md)"
# the reasons a dead letter gives, cause first
OVERSIZED = f"oversized payload: a record has at most {MAX_BYTES:,} bytes {_WHERE}"
TOO_DEEP = f"nested too deeply: arrays and objects nest at most {MAX_DEPTH} levels {_WHERE}"
TOO_MANY_MEMBERS = f"too many members: a JSON object has at most {MAX_MEMBERS:,} members {_WHERE}"
INTEGER_TOO_LONG = f"integer too long: a JSON integer has at most {MAX_INTEGER_DIGITS:,} digits {_WHERE}"
MALFORMED = "malformed JSON"
_LONG_INTEGER = re.compile(rb"(?<![0-9])[0-9]{%d}" % (MAX_INTEGER_DIGITS + 1))
# A run of more than MAX_INTEGER_DIGITS digits covers a whole aligned block of this many
# bytes (a run of length L from s covers [a, a + B) for the first multiple a of B from s
# once L >= 2B - 1), so blocks with a non-digit in them rule runs out at C speed.
_BLOCK = (MAX_INTEGER_DIGITS + 1) // 2
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class LimitError(ValueError):
    """A record over a structural limit, or not JSON at all; ``str(err)`` is the reason a
    dead letter carries (fixed words: the cause, then the limit). ``detail``: where the
    parser stopped, for a local check's message only (it is about the input, so the
    worker never publishes it)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.detail = detail


def limits() -> dict[str, int]:
    """The limits by name, as the JSON Schemas publish them (``x-dpstream-limits``)."""
    return {"max_bytes": MAX_BYTES, "max_depth": MAX_DEPTH, "max_members": MAX_MEMBERS,
            "max_integer_digits": MAX_INTEGER_DIGITS}


DESCRIPTION = (f"Structural limits (the same for every record; docs/limits.md): at most "
               f"{MAX_BYTES:,} bytes, arrays and objects nested at most {MAX_DEPTH} levels "
               f"(the record's own object is level 1), at most {MAX_MEMBERS:,} members in any "
               f"object, at most {MAX_INTEGER_DIGITS:,} digits in a JSON integer. A lone UTF-16 "
               f"surrogate escape in a string reads as U+FFFD.")


def document(schema: dict) -> None:
    """Add the limits to an input record's JSON Schema (pydantic ``json_schema_extra``)."""
    schema["x-dpstream-limits"] = limits()
    schema["description"] = f"{schema['description']}\n\n{DESCRIPTION}" \
        if schema.get("description") else DESCRIPTION


def clean_text(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD and every surrogate
    pair joined into its character (a UTF-16 round trip that replaces what it cannot
    pair); other strings come back as they are."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def plain(payload: bytes) -> bool:
    """True when byte counts alone show that ``payload`` is within every limit and holds no
    surrogate escape: fewer brackets than the nesting limit, fewer colons than the members
    limit, no run of digits longer than the integer limit. Then a strict JSON parser's
    reading of it is ``decode``'s (the converse does not hold: False only means "ask
    ``decode``")."""
    n = len(payload)
    return (n <= MAX_BYTES
            and (n <= MAX_DEPTH or _count(payload, b"[", MAX_DEPTH) + _count(payload, b"{", MAX_DEPTH)
                 <= MAX_DEPTH)
            and (n <= MAX_MEMBERS or _count(payload, b":", MAX_MEMBERS) <= MAX_MEMBERS)
            and _no_long_digit_run(payload)
            and (b"\\" not in payload or _SURROGATE_ESCAPE.search(payload) is None))


def _count(payload: bytes, byte: bytes, limit: int) -> int:
    """How often ``byte`` occurs in ``payload``, counted up to ``limit + 1``. A long record
    is searched occurrence by occurrence (``find`` runs at memchr speed, ``count`` at a
    fraction of it: a 100 KB dense row has two brackets and three colons)."""
    if len(payload) < 4096:
        return payload.count(byte)
    n, at = 0, payload.find(byte)
    while at >= 0 and n <= limit:
        n, at = n + 1, payload.find(byte, at + 1)
    return n


def _no_long_digit_run(payload: bytes) -> bool:
    if len(payload) <= MAX_INTEGER_DIGITS:
        return True
    blocks = range(0, len(payload) - _BLOCK + 1, _BLOCK)
    return not any(payload[i:i + _BLOCK].isdigit() for i in blocks) or \
        _LONG_INTEGER.search(payload) is None


def _integer(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INTEGER_DIGITS:
        raise LimitError(INTEGER_TOO_LONG)
    return int(text)


def decode(payload: bytes, *, max_bytes: int | None = MAX_BYTES) -> object:
    """The record's JSON value, strings cleaned (``clean_text``), or LimitError with the
    reason: over a limit (module docstring) or not JSON ("malformed JSON"). Never raises
    anything else, whatever the bytes. ``max_bytes=None``: no byte limit, for a line of an
    export (a log record wraps an input record that may itself be at the limit); every
    other limit holds."""
    if max_bytes is not None and len(payload) > max_bytes:
        raise LimitError(OVERSIZED)
    try:
        value = json.loads(payload, parse_int=_integer)
    except LimitError:
        raise
    except RecursionError:
        raise LimitError(TOO_DEEP) from None
    except (UnicodeDecodeError, ValueError) as err:   # JSONDecodeError, or not text at all
        raise LimitError(MALFORMED, f"({err})") from None
    _check(value)
    return _cleaned(value)


def _check(value) -> None:
    """LimitError if ``value`` nests too deeply or has an object with too many members
    (iterative: ``json.loads`` may return ~1,000 levels)."""
    todo = [(value, 1)] if isinstance(value, (dict, list)) else []
    while todo:
        v, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise LimitError(TOO_DEEP)
        if isinstance(v, dict):
            if len(v) > MAX_MEMBERS:
                raise LimitError(TOO_MANY_MEMBERS)
            v = v.values()
        todo.extend((c, depth + 1) for c in v if isinstance(c, (dict, list)))


def _cleaned(value):
    """``value`` with every string (keys included) cleaned; the same object when none
    changes. Recursive: ``_check`` bounded the depth."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        items = [_cleaned(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, dict):
        pairs = [(clean_text(k), _cleaned(v)) for k, v in value.items()]
        if all(k is a and v is b for (k, v), (a, b) in zip(pairs, value.items())):
            return value
        return dict(pairs)
    return value
