"""Replay for audits: recompute every release from the model-events log and compare.

The log (``model-events``: partition, offset, validated event) fixes what each model
saw and in which order. Replay runs the same processor with the model's key on a
fresh in-memory state and compares, per model and per output seq, every prediction,
ledger entry and release with what was published. Before comparing anything it
checks the published ledger's key fingerprint against the key given, so a wrong key
fails at once instead of producing a storm of mismatches.

What it reads is screened first (``screen``): a record that is not a valid record of
its topic (``{}`` on the ledger, a payload that is not JSON, a field of the wrong type)
is skipped, counted and reported, and the replay fails: the ledger and the outputs are
writable by the worker's principal, and a forged record is exactly what an audit must
catch. Before (issue 41, item 12), one ``{}`` on the ledger ended ``replay`` (and
``models list``) in a traceback. A line of an export directory that is not JSON is such a
record too, named by file and line (``read_export``). What an audit concludes is a
``Verdict``: the text ``dpstream replay`` prints, which the audit report renders.

Duplicates: at-least-once delivery may publish a record twice, identically; two records
for the same place (a prediction or answer's (model, seq), a ledger charge's (model,
epoch, charge counter), a release's (model, seq, version)) that differ are a discrepancy,
whichever comes first (``distinct``). Before, the later one silently replaced the
earlier, so a forged record placed before the honest one passed.

The privacy unit: when the log has models whose unit is a person, the processor keeps its
private trace of admission decisions, and replay checks from the log that no person gave
a model more examples than its bound allows, and that every refusal was due
(streams/tools/unitcheck.py); a violation fails the replay, named by model and epoch.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from dpstream.agents.kinds import KINDS
from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LedgerEntryEvent, Prediction, Rejected, Release
from dpstream.streams.worker.topics import (ANSWERS, EXAMPLES, LEDGER, MODEL_EVENTS, PREDICTIONS, QUERIES,
                                           REJECTED, RELEASES, copies)

from .unitcheck import UnitCheck, bounded_models, check_units

COMPARED = (PREDICTIONS, ANSWERS, LEDGER, RELEASES)
SCHEMAS = {PREDICTIONS: Prediction, ANSWERS: Prediction, LEDGER: LedgerEntryEvent, RELEASES: Release,
           REJECTED: Rejected}
EVENT_TYPES = ("model", "example", "query")
BATCH = 500                      # log records applied at a time (as the worker's batches)
DIGITS = re.compile(r"[0-9]{1,18}")
DECLARED = ("rule", "budget_epsilon", "budget_delta", "key_fingerprint", "unit")   # fixed per model


class WrongKeyError(Exception):
    """The key given to replay is not the one that produced the published ledger."""


@dataclass
class TopicReport:
    matched: int = 0
    mismatches: list = field(default_factory=list)    # (model, seq, published, recomputed)
    missing: list = field(default_factory=list)       # recomputed but never published
    extra: list = field(default_factory=list)         # published but not recomputed
    conflicting: list = field(default_factory=list)   # (model, seq, one, another): differing duplicates

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.missing or self.extra or self.conflicting)


LISTED = 100                     # invalid records of a topic listed one by one; the rest counted


@dataclass
class Invalid:
    """Records of one topic that are not valid records of it: how many, and the first
    LISTED of them as (where, why): the position in what was read (an export's file and
    line) and what is wrong, never the record's content (``_what``)."""
    topic: str
    count: int
    records: list[tuple[str, str]]

    @property
    def first(self) -> str:
        return "{}: {}".format(*self.records[0])

    def line(self) -> str:
        what = "log record" if self.topic == MODEL_EVENTS else f"{self.topic} record"
        many = self.count != 1
        return (f"{self.count} {what}{'s' if many else ''} that {'are' if many else 'is'} not "
                f"valid (first: {self.first}) skipped: a forged or corrupt record is a discrepancy")


class Located(list):
    """Values read from a file, with where each one was read (``where[i]``, e.g.
    "predictions.jsonl line 7"), so that a record ``screen`` skips is named by its line."""

    def __init__(self, values, where: list[str]):
        super().__init__(values)
        self.where = where


def _at(values, i: int) -> str:
    where = getattr(values, "where", None)
    return where[i] if where is not None else f"record {i}"


NOT_JSON = "not_json"      # the one key of parse_json's marker for a value that is not JSON


def parse_json(value: bytes | None):
    """A record's JSON value as read from Kafka or an export's line, through the bounded
    decoder the worker uses (schemas/limits.py ``decode``, without its byte limit: a log
    record wraps an input record that may be at it). A value that is not JSON or is over a
    structural limit (cut in half, not UTF-8, nested 100,000 deep, a 100,000-digit
    integer) becomes a marker that no schema takes, ``{"not_json": REASON}``, so ``screen``
    counts it and names why, and an export keeps it. Before, orjson ended a line nested
    deeper than its own limit with "not JSON", saying nothing of the cause."""
    import orjson

    from dpstream.schemas.limits import LimitError, decode, plain
    value = value or b""
    if plain(value):         # within every limit by byte counts: orjson's reading is decode's
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            pass             # NaN, an integer beyond 64 bits, not JSON: decode's verdict
    try:
        return decode(value, max_bytes=None)
    except LimitError as err:
        return {NOT_JSON: str(err)}


def _not_json(value) -> str | None:
    """Why ``value`` is parse_json's marker (None when it is not one). Only the decoder's
    own fixed reasons are shown: a forged marker's text is not echoed."""
    from dpstream.schemas import limits
    if not (isinstance(value, dict) and len(value) == 1 and NOT_JSON in value):
        return None
    reasons = (limits.MALFORMED, limits.TOO_DEEP, limits.TOO_MANY_MEMBERS, limits.INTEGER_TOO_LONG)
    return f"not JSON ({value[NOT_JSON]})" if value[NOT_JSON] in reasons else "not JSON"


def screen_topic(topic: str, values: list) -> tuple[list[dict], Invalid | None]:
    """The values of an output topic that are valid records of it (as read: unchanged),
    and what was skipped."""
    from pydantic import ValidationError
    schema = SCHEMAS[topic]
    good, bad, found = [], 0, []
    for i, v in enumerate(values):
        why = _not_json(v)
        if not why:
            try:
                schema.model_validate(v)
                _finite(v)
            except (ValidationError, ValueError) as err:
                why = _what(err, schema)
        if why:
            bad += 1
            if len(found) < LISTED:
                found.append((_at(values, i), why))
            continue
        good.append(v)
    return good, (Invalid(topic, bad, found) if bad else None)


REREGISTERED = "the model is registered again with another config (the first registration is in force)"


def screen_log(log: list) -> tuple[list[dict], Invalid | None]:
    """The log records replay can place (partition, offset, a value with a source and an
    event with a type and a model id; a registration that is a valid ``ModelConfig``); the
    processor judges the rest of each event. A model has one config: the sequencer writes a
    second registration only when it is identical to the first (a no-op), and the processor
    applies the first, so a later one with another config is forged: it is not valid, and
    the audit report, which shows each model's config, never shows it."""
    problems: dict[int, str] = {}
    for i, r in enumerate(log):
        problem = _log_problem(r)
        if problem:
            problems[i] = problem
    first: dict[str, dict] = {}
    for i in sorted((i for i in range(len(log)) if i not in problems),
                    key=lambda i: (log[i]["partition"], log[i]["offset"])):
        event = log[i]["value"]["event"]
        if event["type"] == "model" and first.setdefault(event["model_id"], event) != event:
            problems[i] = REREGISTERED
    found = [(_at(log, i), problems[i]) for i in sorted(problems)[:LISTED]]
    good = [r for i, r in enumerate(log) if i not in problems]
    return good, (Invalid(MODEL_EVENTS, len(problems), found) if problems else None)


def screen(log: list, published: dict) -> tuple[list[dict], dict[str, list[dict]], list[Invalid]]:
    """``log`` and ``published`` without the records that are not valid, and those found."""
    invalid = []
    log, found = screen_log(log)
    invalid += [found] if found else []
    out = {}
    for topic, values in published.items():
        if topic in SCHEMAS:
            values, found = screen_topic(topic, values)
            invalid += [found] if found else []
        out[topic] = values
    return log, out, invalid


def _finite(v: dict) -> None:
    """ValueError for a NaN or infinite number (JSON has none; Python's parser takes them)."""
    import math
    bad = [k for k, x in v.items() if isinstance(x, float) and not math.isfinite(x)]
    if bad:
        raise ValueError(f"{bad[0]}: not a finite number")


def _what(err, schema) -> str:
    """A validation error without the record's content: where (the schema's own field
    names; a name the record made up is '?', a list position '[]') and which rule (the
    schema's fixed message), so a forged line cannot put its own text into replay's output
    or the audit report."""
    if not hasattr(err, "errors"):       # _finite's: it names a schema field (extras are refused first)
        return str(err)[:160]
    e = err.errors(include_input=False, include_url=False)[0]
    where = ".".join(p if isinstance(p, str) and p in schema.model_fields else
                     "[]" if isinstance(p, int) else "?" for p in e["loc"]) or "the record"
    what = ("a field this record's schema does not have" if e["type"] == "extra_forbidden"
            else e["msg"])
    return f"{where}: {what}"[:160]


def _log_problem(r) -> str | None:
    why = _not_json(r)
    if why:
        return why
    if not isinstance(r, dict) or not isinstance(r.get("value"), dict):
        return "not a log record"
    if not all(isinstance(r.get(k), int) and not isinstance(r.get(k), bool) for k in ("partition", "offset")):
        return "partition and offset must be integers"
    event = r["value"].get("event")
    if not isinstance(r["value"].get("source"), str) or not isinstance(event, dict):
        return "value needs a source and an event"
    if event.get("type") not in EVENT_TYPES or not isinstance(event.get("model_id"), str):
        return "event needs a type (model, example, query) and a model_id"
    if event["type"] == "model":
        return _registration_problem(event)
    return None


def _registration_problem(event: dict) -> str | None:
    """Why a logged registration is not a valid ``ModelConfig`` (the sequencer logs only
    valid ones): the top-level field, never a value (a validator's message may quote one)."""
    from pydantic import ValidationError

    from dpstream.schemas import ModelConfig
    try:
        ModelConfig.model_validate(event)
    except (ValidationError, ValueError, TypeError) as err:
        loc = err.errors(include_input=False, include_url=False)[0]["loc"] \
            if isinstance(err, ValidationError) else ()
        where = loc[0] if loc and loc[0] in ModelConfig.model_fields else "?"
        return f"not a valid model registration (field {where})"
    return None


@dataclass
class Verdict:
    """What an audit concludes, as ``dpstream replay`` prints it: ``text`` (its output),
    ``ok``, the records skipped as not valid (``invalid``, each listed by where it was read
    and why), and ``keyed``: every release recomputed with the key (``replay``), or only the
    checks that need no key (``replay --no-key``, ``public_verdict``). The audit report
    renders a verdict, so the page says what the terminal says."""
    ok: bool
    text: str
    invalid: list[Invalid]
    keyed: bool


@dataclass
class ReplayReport:
    events: int
    topics: dict
    invalid: list = field(default_factory=list)      # Invalid: records skipped, unreplayed
    units: UnitCheck = field(default_factory=UnitCheck)   # the privacy unit's bound (unitcheck.py)

    @property
    def ok(self) -> bool:
        return not self.invalid and all(t.ok for t in self.topics.values()) and self.units.ok

    def summary(self) -> str:
        lines = [f"replayed {self.events:,} model events"]
        lines += [f"  {i.line()}" for i in self.invalid]
        for name, t in self.topics.items():
            lines.append(f"  {name:12s} matched {t.matched:,}, mismatched {len(t.mismatches)}, "
                         f"missing {len(t.missing)}, extra {len(t.extra)}, conflicting {len(t.conflicting)}")
            if t.mismatches:
                model, seq, pub, rec = t.mismatches[0]
                lines.append(f"    first mismatch: model {model!r} seq {seq}: published vs recomputed "
                             f"{_diff(pub, rec)}")
            if t.conflicting:
                model, seq, one, other = t.conflicting[0]
                lines.append(f"    first conflicting duplicate: model {model!r} seq {seq}: published twice, "
                             f"differently {_diff(one, other)}")
            for label, items in (("missing", t.missing), ("extra", t.extra)):
                if items:
                    lines.append(f"    first {label}: model {items[0][0]!r} seq {items[0][1]}")
        lines += self.units.lines()
        lines.append("OK: every release reproduced" if self.ok else "FAILED: see above")
        return "\n".join(lines)

    def verdict(self) -> Verdict:
        return Verdict(self.ok, self.summary(), self.invalid, keyed=True)


def _diff(a: dict, b: dict) -> dict:
    """The fields where ``a`` and ``b`` differ: {field: (a's, b's)}."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _key(v: dict) -> tuple:
    return v["model_id"], v["seq"], v.get("charges", v.get("version", 0) if "rules" in v else 0)


def place(topic: str, v: dict) -> tuple:
    """Where a record of ``topic`` belongs: one record per place (module docstring)."""
    if topic == LEDGER:
        return v["model_id"], v["epoch"], v["charges"]
    if topic == RELEASES:
        return v["model_id"], v["seq"], v["version"]
    return v["model_id"], v["seq"]


def distinct(values, key) -> tuple[dict, list]:
    """``values`` by ``key(v)``, identical duplicates kept once, and the keys published
    twice differently as (key, one, another), in the order first seen: neither copy is
    trusted over the other, whichever came first."""
    out, conflicts, seen = {}, [], set()
    for v in values:
        k = key(v)
        if k not in out:
            out[k] = v
        elif out[k] != v and k not in seen:
            seen.add(k)
            conflicts.append((k, out[k], v))
    return out, conflicts


def check_key(rng: KeyedRandomness, ledger: list[dict]) -> None:
    prints = {e.get("key_fingerprint") for e in ledger if e.get("key_fingerprint")}
    if prints and prints != {rng.fingerprint()}:
        raise WrongKeyError(
            f"the published ledger was produced with key fingerprint(s) {sorted(prints)}, "
            f"the replay key's fingerprint is {rng.fingerprint()}: wrong key, nothing compared")


async def replay(rng: KeyedRandomness, log: list[dict], published: dict[str, list[dict]],
                 models: set[str] | None = None, progress=None, mistakes: dict | None = None
                 ) -> ReplayReport:
    """``log``: model-events records {partition, offset, value}; ``published``: the output
    topics' values. Only models in ``models`` are compared (all when None). With a dict
    ``mistakes``, each online learner's exact cumulative mistakes are collected into it
    after every batch of BATCH log records as {model: [(seq, mistakes)]}: a private
    statistic, for the internal audit report only. ``progress(n)`` after each batch.
    Records that are not valid are skipped and reported (``screen``)."""
    log, published, invalid = screen(log, published)
    check_key(rng, [e for e in published.get(LEDGER, [])
                    if models is None or e["model_id"] in models])
    recomputed: dict[str, list] = defaultdict(list)

    async def emit(topic, key, value):
        recomputed[topic].append(value)
        if copies(topic, value):
            recomputed[ANSWERS].append(value)

    selected = [r for r in sorted(log, key=lambda r: (r["partition"], r["offset"]))
                if models is None or r["value"]["event"]["model_id"] in models]
    processor = Processor(rng, {}, emit, trace=bool(bounded_models(selected)))
    for a in range(0, len(selected), BATCH):
        chunk = selected[a:a + BATCH]
        await processor.handle_batch([
            RawRecord(MODEL_EVENTS, r["partition"], r["offset"],
                      r["value"]["event"]["model_id"].encode(), b"", body=r["value"])
            for r in chunk])
        if mistakes is not None:            # each model's cumulative mistakes after the batch
            for model_id in dict.fromkeys(r["value"]["event"]["model_id"] for r in chunk
                                          if r["value"]["event"]["type"] == "example"):
                handler = processor.handler(model_id)
                done = handler.internal_mistakes() if handler is not None else None
                if done is not None:
                    mistakes.setdefault(model_id, []).append((handler.events - 1, done))
        if progress is not None:
            progress(len(chunk))
    n = len(selected)
    topics = {}
    for topic in COMPARED:
        if topic == ANSWERS and topic not in published:
            continue                     # an export from before the answers topic existed
        # a field a record leaves out is its schema's default (a ledger entry of before the
        # ``unit`` field is the unit "example" it names now)
        pub = _with_defaults(topic, [v for v in published.get(topic, [])
                                     if models is None or v["model_id"] in models])
        (got, conflicts), (want, _) = distinct(pub, _key), distinct(recomputed[topic], _key)
        report = TopicReport(conflicting=[(k[0], k[1], one, other) for k, one, other in conflicts])
        twice = {k for k, _, _ in conflicts}
        for k in sorted(set(got) | set(want), key=lambda k: (k[0], k[1], k[2] or 0)):
            if k in twice:
                continue                 # counted as conflicting: neither copy is the published one
            if k in got and k in want:
                if got[k] == want[k]:
                    report.matched += 1
                else:
                    report.mismatches.append((k[0], k[1], got[k], want[k]))
            elif k in want:
                report.missing.append(k)
            else:
                report.extra.append(k)
        topics[topic] = report
    units = check_units(selected, processor.unit_trace or {}, recomputed[PREDICTIONS])
    return ReplayReport(n, topics, invalid, units)


def verify_public(published: dict[str, list[dict]]) -> list[str]:
    """Checks that need no key and no private topic (``dpstream replay --no-key``): each
    ledger's running totals equal the composition of its entries under the declared rule
    and stay within the budget, charge counters run 1, 2, 3, ... per (model, epoch); every
    prediction's ``epsilon_spent`` is what its own epoch's ledger shows at its seq, and
    every epoch that released something has its charge; prediction seqs and hypothesis
    versions never go backwards; sources are consistent (``_check_sources``); no place
    holds two different records (``distinct``). Returns the problems found (empty: all
    good); a record that is not valid is one (``screen``), and the checks run on the rest.
    A model's entries all carry its first entry's budget, rule and key fingerprint."""
    _, published, invalid = screen([], published)
    return [i.line() for i in invalid] + _public_problems(published)


def public_verdict(published: dict[str, list[dict]], log: list | None = None) -> Verdict:
    """``verify_public`` as ``dpstream replay --no-key`` says it: its problems, or that
    the records are consistent. ``log``: an export's log, when it was read (the keyless
    audit report reads it for the model configs): a record of it that is not valid is a
    problem too."""
    log, valid, invalid = screen(log or [], published)
    problems = [i.line() for i in invalid] + _public_problems(valid) + _check_budgets(log, valid)
    text = "\n".join(problems) or (
        f"OK: {len(valid.get(LEDGER, []))} ledger entries and {len(valid.get(PREDICTIONS, []))} "
        "predictions are consistent (no key: releases themselves not recomputed)")
    return Verdict(not problems, text, invalid, keyed=False)


def _public_problems(published: dict[str, list[dict]]) -> list[str]:
    """``verify_public``'s checks of records that are all valid (``screen``)."""
    from dpstream.mechanisms.accounting import Ledger
    from dpstream.mechanisms.errors import BudgetExhausted

    problems: list[str] = []
    published = {topic: _with_defaults(topic, values) for topic, values in published.items()}
    published, conflicting = _distinct_topics(published)
    problems += conflicting
    ledgers: dict[tuple, dict] = {}
    declared: dict[str, tuple] = {}
    for e in sorted(published.get(LEDGER, []), key=lambda e: (e["model_id"], e["epoch"], e["charges"])):
        ledgers.setdefault((e["model_id"], e["epoch"]), {})[e["charges"]] = e
        terms = tuple(e.get(k) for k in DECLARED)
        if declared.setdefault(e["model_id"], terms) != terms:
            problems.append(f"ledger {e['model_id']} epoch {e['epoch']} charge {e['charges']}: "
                            f"{_diff(dict(zip(DECLARED, declared[e['model_id']])), dict(zip(DECLARED, terms)))} "
                            "differs from the model's first entry (one budget, rule and key per model)")
            declared[e["model_id"]] = terms            # said once per change
    for (model, epoch), entries in sorted(ledgers.items()):
        order = sorted(entries)
        if order != list(range(1, len(order) + 1)):
            problems.append(f"ledger {model} epoch {epoch}: charge counters {order[:5]}... not 1..n")
            continue
        first = entries[order[0]]
        try:
            led = Ledger.create(epsilon=first["budget_epsilon"], delta=first["budget_delta"],
                                rule=first["rule"])
        except (ValueError, TypeError, KeyError) as err:     # a budget or rule no worker takes
            problems.append(f"ledger {model} epoch {epoch}: budget or rule not valid ({str(err)[:120]})")
            continue
        for c in order:
            e = entries[c]
            try:
                led.charge(e["mechanism"], e["epsilon"], e["delta"], e["count"], e.get("rho"))
            except BudgetExhausted:
                problems.append(f"ledger {model} epoch {epoch} charge {c}: exceeds the budget")
                break
            except (ValueError, TypeError) as err:
                problems.append(f"ledger {model} epoch {epoch} charge {c}: not a valid charge "
                                f"({str(err)[:120]})")
                break
            t = led.totals()
            if abs(t.epsilon - e["spent_epsilon"]) > 1e-9 * max(1.0, t.epsilon) or \
                    abs(t.delta - e["spent_delta"]) > 1e-9 * max(1e-12, t.delta):
                problems.append(f"ledger {model} epoch {epoch} charge {c} (seq {e['seq']}): running "
                                f"total {e['spent_epsilon']!r} != composition {t.epsilon!r}")
    problems += _check_predictions(published)
    problems += _check_spent_against_ledger(published)
    problems += _check_sources(published)
    problems += _check_answers(published)
    return problems


def _check_budgets(log: list[dict], published: dict[str, list[dict]]) -> list[str]:
    """Each ledger entry's ``budget_epsilon`` and ``budget_delta`` are the budget of its
    model's registration in the log (valid records, ``screen_log``: one config per model),
    and its ``unit`` is the registration's privacy unit: the report shows the registration's
    budget beside the ledger's spend, and whom it protects. One line per model (its first
    entry that differs and how many)."""
    from dpstream.schemas import ModelConfig
    budgets, units = {}, {}
    for r in log:
        event = r["value"]["event"]
        if event["type"] == "model" and event["model_id"] not in budgets:
            config = ModelConfig.model_validate(event)
            budgets[event["model_id"]] = (config.budget.epsilon, config.budget.delta)
            units[event["model_id"]] = config.unit
    first: dict[str, str] = {}
    count: dict[str, int] = defaultdict(int)
    for e in sorted(_with_defaults(LEDGER, published.get(LEDGER, [])),
                    key=lambda e: (e["model_id"], e["epoch"], e["charges"])):
        model = e["model_id"]
        if model in budgets and (e["budget_epsilon"], e["budget_delta"]) != budgets[model]:
            first.setdefault(model, f"ledger {model} epoch {e['epoch']} charge {e['charges']}: budget "
                                    "differs from the model's registration in the log")
            count[model] += 1
        elif model in units and e["unit"] != units[model]:
            first.setdefault(model, f"ledger {model} epoch {e['epoch']} charge {e['charges']}: unit "
                                    f"{e['unit']!r} is not the registration's ({units[model]!r}, in the log)")
            count[model] += 1
    return [line + (f" ({count[m]} such entries of the model)" if count[m] > 1 else "")
            for m, line in sorted(first.items())]


def _with_defaults(topic: str, values: list[dict]) -> list[dict]:
    """Valid records with the fields their schema defaults filled in: a record may leave
    out ``epoch`` or ``updated`` (the schema gives 0 and False), and the checks read every
    field (an export with such a record ended in a KeyError)."""
    schema = SCHEMAS.get(topic)
    if schema is None:
        return values
    defaults = {name: f.default for name, f in schema.model_fields.items()
                if not f.is_required() and f.default_factory is None}
    return [{**defaults, **v} if defaults.keys() - v.keys() else v for v in values]


def _distinct_topics(published: dict[str, list[dict]]) -> tuple[dict, list[str]]:
    """``published`` with identical duplicates dropped, and one line per topic that has a
    place published twice differently (``distinct``): the first such place and how many."""
    out, problems = dict(published), []
    for topic in (PREDICTIONS, ANSWERS, LEDGER, RELEASES):
        if topic not in published:
            continue
        by_place, conflicts = distinct(published[topic], lambda v, t=topic: place(t, v))
        out[topic] = list(by_place.values())
        if conflicts:
            k, one, other = conflicts[0]
            where = (f"epoch {k[1]} charge {k[2]}" if topic == LEDGER else f"seq {k[1]}"
                     + (f" version {k[2]}" if topic == RELEASES else ""))
            more = f" ({len(conflicts)} places in all)" if len(conflicts) > 1 else ""
            problems.append(f"{topic} {k[0]} {where}: published twice, differently {_diff(one, other)}{more}")
    return out, problems


def _check_answers(published: dict[str, list[dict]]) -> list[str]:
    """The ``answers`` topic holds exactly the query records of ``predictions`` (what the
    querier reads is what the audit checks): a forged, altered or missing answer fails."""
    if ANSWERS not in published:
        return []                        # an export from before the answers topic existed
    queries = {(p["model_id"], p["seq"]): p for p in published.get(PREDICTIONS, []) if copies(PREDICTIONS, p)}
    answers = {(a["model_id"], a["seq"]): a for a in published[ANSWERS]}
    for key in sorted(set(queries) | set(answers)):
        if key not in answers:
            return [f"answers {key[0]} seq {key[1]}: a query answer on predictions is not on answers"]
        if key not in queries or answers[key] != queries[key]:
            return [f"answers {key[0]} seq {key[1]}: differs from the query's record on predictions"]
    return []


def _check_spent_against_ledger(published: dict[str, list[dict]]) -> list[str]:
    """Each prediction's ``epsilon_spent`` is the running total of its own epoch's last
    charge at or before its seq (0 before the epoch's first charge): the schema's "what
    the model's current epoch has committed". A prediction that reports a release (an
    update, or a version above 0) has a charge of its epoch at or before it, and so does
    every release on ``releases``. Before (issue 41), a prediction was only checked to show
    some running total of its model, any epoch: a spend moved between epochs, or an epoch
    whose charge was cut from the ledger while another epoch showed the same total, passed.
    One line per model (its first problem and how many)."""
    from bisect import bisect_right
    charges: dict[tuple, list] = defaultdict(list)
    for e in published.get(LEDGER, []):
        charges[(e["model_id"], e["epoch"])].append((e["seq"], e["charges"], e["spent_epsilon"]))
    earliest: dict[str, int] = {}                  # each model's first charged epoch
    for (model, epoch), entries in charges.items():
        entries.sort()
        earliest[model] = min(epoch, earliest.get(model, epoch))
    first: dict[str, str] = {}
    count: dict[str, int] = defaultdict(int)

    def found(model, line):
        first.setdefault(model, line)
        count[model] += 1

    for p in sorted(published.get(PREDICTIONS, []), key=lambda p: (p["model_id"], p["seq"])):
        model, epoch = p["model_id"], p["epoch"]
        entries = charges.get((model, epoch), [])
        i = bisect_right(entries, (p["seq"], float("inf")))
        shown = entries[i - 1][2] if i else 0.0
        released = p["updated"] or p["version"] > 0
        if abs(p["epsilon_spent"] - shown) > 1e-9 * max(1.0, abs(shown)):
            found(model, f"predictions {model} seq {p['seq']}: reports eps spent {p['epsilon_spent']!r} "
                         f"in epoch {epoch}, which no ledger entry shows there (epoch {epoch}'s running "
                         f"total at that seq: {shown!r})")
        elif released and not i and not earliest.get(model, epoch) < epoch:
            found(model, f"predictions {model} seq {p['seq']}: version {p['version']} released in "
                         f"epoch {epoch} without any ledger charge of the model before it")
    for r in published.get(RELEASES, []):
        paid = [s for (m, _), entries in charges.items() if m == r["model_id"] for s, _, _ in entries
                if s <= r["seq"]]
        if not paid:
            found(r["model_id"], f"releases {r['model_id']} seq {r['seq']} version {r['version']}: "
                                 "no ledger charge of the model pays for it")
    return [line + (f" ({count[m]} such records of the model)" if count[m] > 1 else "")
            for m, line in sorted(first.items())]


def _check_sources(published: dict[str, list[dict]]) -> list[str]:
    """Each prediction's ``source`` is an input position ("topic:partition:offset") on the
    topic of its kind (``examples`` or ``queries``, with the deployment's prefix), no
    input position is the source of two predictions (one input is one event of one
    model), and within a model and an input partition, offsets rise with seq (the worker
    sequences each input partition in order). Answers carry their prediction's source
    (``_check_answers``). Before (issue 41), replay ignored ``source`` altogether."""
    seen: dict[str, tuple] = {}
    last: dict[tuple, tuple] = {}
    for p in sorted(published.get(PREDICTIONS, []), key=lambda p: (p["model_id"], p["seq"])):
        model, seq, src = p["model_id"], p["seq"], p["source"]
        topic, partition, offset = (src.rsplit(":", 2) + ["", ""])[:3]
        wanted = {"example": EXAMPLES, "query": QUERIES}[p["kind"]]
        if not (topic.endswith(wanted) and DIGITS.fullmatch(partition) and DIGITS.fullmatch(offset)):
            return [f"predictions {model} seq {seq}: source {src[:80]!r} is not a position on "
                    f"{wanted} ({'an example' if p['kind'] == 'example' else 'a query'}'s record comes from {wanted})"]
        if src in seen:
            return [f"predictions {model} seq {seq}: source {src!r} is also the source of "
                    f"{seen[src][0]} seq {seen[src][1]} (one input is one event)"]
        seen[src] = (model, seq)
        where = (model, topic, int(partition))
        if where in last and last[where][1] > int(offset):
            return [f"predictions {model} seq {seq}: source {src!r} is before the source of seq "
                    f"{last[where][0]} (a model's events follow its input partition's order)"]
        last[where] = (seq, int(offset))
    return []


def _check_predictions(published: dict[str, list[dict]]) -> list[str]:
    problems: list[str] = []
    preds: dict[str, dict[int, dict]] = defaultdict(dict)
    for p in published.get(PREDICTIONS, []):
        preds[p["model_id"]][p["seq"]] = p
    epochs_at: dict[str, list[tuple[int, int]]] = defaultdict(list)
    charge_seqs: dict[str, list[int]] = defaultdict(list)
    for e in published.get(LEDGER, []):
        epochs_at[e["model_id"]].append((e["seq"], e["epoch"]))
        charge_seqs[e["model_id"]].append(e["seq"])
    online = _online_models(published.get(LEDGER, []))
    for model, by_seq in preds.items():
        winnow = model in online
        prev, exhausted_at = None, None
        for seq in sorted(by_seq):
            p = by_seq[seq]
            if prev is not None and p["epoch"] < prev["epoch"]:
                problems.append(f"predictions {model} seq {seq}: epoch went back to {p['epoch']}")
            if prev is not None and p["version"] < prev["version"]:
                problems.append(f"predictions {model} seq {seq}: version went back to {p['version']}")
            elif prev is not None and winnow and \
                    p["version"] != prev["version"] + int(bool(p.get("updated"))):
                problems.append(f"predictions {model} seq {seq}: version changed without an update "
                                f"(or an update without a version change)")
            if p["status"] == "budget_exhausted" and exhausted_at is None:
                exhausted_at = seq
                later = [c for c in charge_seqs[model] if c > seq]
                if winnow and later:
                    problems.append(f"ledger {model}: charge at seq {later[0]} after exhaustion "
                                    f"at seq {seq}")
            elif exhausted_at is not None and not winnow and p["label"] is not None:
                if any(exhausted_at < s2 <= seq for s2, _ in epochs_at[model]):
                    exhausted_at = None
                else:
                    problems.append(f"predictions {model} seq {seq}: answered after exhaustion at "
                                    f"seq {exhausted_at} without a new epoch")
            prev = p
    return problems


def _online_models(ledger: list[dict]) -> set[str]:
    """Models whose ledger shows an online learner's mechanisms (kinds with
    ``Handler.online``: their versions move exactly with the released updates)."""
    mechanisms = {m for k in KINDS.values() if k.online for m in k.mechanisms}
    return {e["model_id"] for e in ledger if e["mechanism"] in mechanisms}
