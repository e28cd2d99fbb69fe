"""The privacy unit: a person's pseudonym, and the bound on how many of their examples
reach a learner (docs/privacy.md, "The privacy unit").

A model whose registration has a ``privacy_unit`` protects a person: two streams are
neighbours when they differ in the contents of all records of one privacy ID, at the same
positions. Of an ID's examples at most k (``max_contributions``) per epoch reach the
learner, the first k in the model's log order (its event counter ``seq``, the same in
every runtime), and for a kind whose learner releases per block at most one per block.
The charge is derived for those k participations (each kind's calibration). Epochs and
blocks are counted in arriving examples, admitted or not: a refused example takes its
place and teaches nothing (agents/kinds/base.py), so a decision moves no public counter,
and the slot an example is decided in is a function of the log alone.

Pseudonym. The sequencer replaces the raw ID by ``unit`` = HMAC-SHA256 under key material
derived from the secret key for the model (``KeyedRandomness.stream_key(model, PURPOSE,
0)``) of the ID's text, cut to 16 bytes, in hex, before anything is written to
``model-events``: the raw ID is never in the log, state, changelogs or outputs. The text
is a whole number's decimal digits (written as a JSON integer, a whole double or text
such as ``"123.0"``) or a string stripped of surrounding white space, so ``123``, ``123.0``,
``"123"`` and ``" 123"`` are one person (a CSV column is text where a JSONL file may hold
numbers: two units for one person would let them contribute 2k; ``id_text``), at most ``ID_BYTES`` of its UTF-8 (a longer ID is bounded, not
refused; two IDs equal in those bytes are one unit, which only bounds them more).

Bounding state: one record per (model, unit), ``model/<id>/unit/<unit>`` ->
``{"e": epoch, "s": [seqs admitted in it], "b": [their blocks], "E": [the epochs the
person's examples reached the learner in]}`` (at most k and ``max_epochs`` entries); a
record of an older epoch counts as empty for the per-epoch bound. A person's first example
of an epoch is admitted only while ``E`` holds fewer than ``max_epochs`` earlier epochs:
epochs are disjoint in examples, not in people, so without this cap a person present in
many epochs would compose their guarantees without bound. The decision for the example at seq q reads only
the entries of its epoch with seq < q, so re-applying a batch after a crash (entries at or
after q written by the attempt that crashed) decides the same and rewrites the same.

One addition to that layout, for a crash that spans an epoch: a batch can move the model
into a new epoch and rewrite a unit's record for it, then crash before its head is
written; re-applying from the older head meets the older epoch's examples again, whose
entries the rewritten record would have lost. So a record also keeps ``"p"``: the groups
``[epoch, seqs, blocks]`` of older epochs not below ``floor``, the epoch the model's last
committed head was in (``Handler.unit_floor``, kept by the processor): nothing is re-applied
from before it, so an older group is dropped. Bounded: the epochs one batch crossed. (So
which older groups a record still holds depends on where batches ended; no decision
reads one, and the decisions and outputs are the same for every batching.)

These records are written as the decisions are made (not retired with the cold-record
machinery) and reach the changelog before the batch's outputs; they survive restarts
through the changelogs like every other state record.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import re
from dataclasses import dataclass

PURPOSE = "privacy-unit"
ID_BYTES = 256          # the most bytes of an ID's text its pseudonym is computed from
UNIT_BYTES = 16         # a pseudonym's length before hex


_WHOLE = re.compile(r"[+-]?[0-9]{1,300}(\.0*)?")     # a decimal integer, maybe written "42.0"


def id_text(value) -> bytes | None:
    """The bytes an ID's pseudonym is computed from (module docstring); None for a value
    that is no usable ID (missing, empty text, a boolean, a fraction, a list, an object).

    One person must not become two units through the way a file writes their ID: the
    same column reaches dpstream as JSON numbers, JSON strings and CSV text (pandas writes
    an integer column with a missing value as floats, ``42.0``, in both formats). So text
    is stripped of surrounding white space (the CSV reader strips cells), and a whole
    number, whether a JSON integer, a whole double (``42.0``, as Jackson writes a Double)
    or text that spells one (``"42"``, ``"42.0"``, ``"+042"``), is its decimal digits
    without sign or leading zeros (``"-0"`` and ``"0"`` alike). Merging spellings only
    bounds people more (two IDs that become one unit share one bound)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return None
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if _WHOLE.fullmatch(text):
            value = int(text.split(".")[0])
    if isinstance(value, int):
        try:
            text = str(value)
        except ValueError:     # beyond Python's int/str limit (the record limit keeps it out)
            text = hex(value)
        if text == "-0":
            text = "0"
    elif not isinstance(value, str):
        return None
    if not text:
        return None
    return text.encode("utf-8", "surrogatepass")[:ID_BYTES]


class Pseudonyms:
    """Each model's pseudonym of a privacy ID (module docstring), under one secret key."""

    def __init__(self, rng):
        self.rng = rng
        self._keys: dict[str, bytes] = {}

    def of(self, model_id: str, value) -> str | None:
        """``value``'s pseudonym for ``model_id`` (32 hex digits), or None when it is no
        usable ID (``id_text``)."""
        text = id_text(value)
        if text is None:
            return None
        key = self._keys.get(model_id)
        if key is None:
            if len(self._keys) >= 10_000:
                self._keys.clear()
            key = self._keys[model_id] = self.rng.stream_key(model_id, PURPOSE, 0)
        return hmac.new(key, text, hashlib.sha256).digest()[:UNIT_BYTES].hex()


def raw_id(config, privacy_id, features: dict | None):
    """Where a bounded model's example holds its ID: the top-level ``privacy_id``, or the
    registration's ``id_field`` of the raw ``features`` (None when absent)."""
    field = config.privacy_unit.id_field
    if field == "privacy_id":
        return privacy_id
    return features.get(field) if features is not None else None


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission decision, as the private trace records it (replay's check): never
    published, never logged."""
    model_id: str
    seq: int
    unit: str | None
    epoch: int
    block: int | None
    admitted: bool


def unit_key(model_id: str, unit: str) -> str:
    """``model/<id>/unit/<unit>``: where a person's record sits among the model's records
    (kinds/storage.py ``model_key``; not imported: the kinds import this module)."""
    return f"model/{model_id}/unit/{unit}"


def _groups(record: dict | None) -> dict[int, list[tuple[int, int | None]]]:
    """A record's entries by epoch: {epoch: [(seq, block), ...]}."""
    if not record:
        return {}
    out = {record["e"]: list(zip(record["s"], record["b"]))}
    for epoch, seqs, blocks in record.get("p", ()):
        out[epoch] = list(zip(seqs, blocks))
    return out


def decide(record: dict | None, *, seq: int, epoch: int, block: int | None, k: int,
           floor: int, epochs: int = 1) -> tuple[bool, dict | None]:
    """Whether the example at ``seq`` entering (``epoch``, ``block``) is admitted, given its
    unit's ``record``; and the record to write (None: unchanged). Admitted when fewer than
    ``k`` of the unit's examples of this epoch before ``seq`` were, (``block`` given) none
    of them in this block, and, for the unit's first example of this epoch, it reached the
    learner in fewer than ``epochs`` earlier epochs. Every part reads only what was
    decided before ``seq`` (entries of this epoch below it, epochs below this one), so a
    re-application after a crash decides the same."""
    groups = _groups(record)
    before = [(s, b) for s, b in groups.get(epoch, ()) if s < seq]
    earlier = [e for e in (record or {}).get("E", ()) if e < epoch]
    admitted = (len(before) < k and (block is None or all(b != block for _, b in before))
                and (bool(before) or len(earlier) < epochs))
    if not admitted:
        return False, None
    groups = {e: g for e, g in groups.items() if floor <= e < epoch}
    new = {"e": epoch, "s": [s for s, _ in before] + [seq], "b": [b for _, b in before] + [block],
           "E": earlier + [epoch]}
    if groups:
        new["p"] = [[e, [s for s, _ in g], [b for _, b in g]] for e, g in sorted(groups.items())]
    return True, new


def describe(config) -> str:
    """What a model's guarantee covers, in one sentence (``models show``, ``/status``, the
    audit report)."""
    u = config.privacy_unit
    if u is None:
        return ("one example: the guarantee covers the contents (features and label) of any one "
                "example")
    where = "its top-level 'privacy_id'" if u.id_field == "privacy_id" else \
        f"the raw feature '{u.id_field}'"
    per = "" if u.max_contributions == 1 else "s"
    epochs = "its first epoch" if u.max_epochs == 1 else f"at most {u.max_epochs} epochs"
    return (f"one person (the ID in {where}), at most {u.max_contributions} example{per} per epoch "
            f"reaching the learner, in {epochs}: the guarantee covers the contents of all of a "
            "person's records; that a record arrived, and when, is public")
