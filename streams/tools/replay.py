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
``models list``) in a traceback.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dpstream.agents.kinds import KINDS
from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LedgerEntryEvent, Prediction, Rejected, Release
from dpstream.streams.worker.topics import (ANSWERS, LEDGER, MODEL_EVENTS, PREDICTIONS, REJECTED, RELEASES,
                                           copies)

COMPARED = (PREDICTIONS, ANSWERS, LEDGER, RELEASES)
SCHEMAS = {PREDICTIONS: Prediction, ANSWERS: Prediction, LEDGER: LedgerEntryEvent, RELEASES: Release,
           REJECTED: Rejected}
EVENT_TYPES = ("model", "example", "query")
BATCH = 500                      # log records applied at a time (as the worker's batches)
IGNORED_FIELDS = ("source",)     # transport positions, not releases


class WrongKeyError(Exception):
    """The key given to replay is not the one that produced the published ledger."""


@dataclass
class TopicReport:
    matched: int = 0
    mismatches: list = field(default_factory=list)    # (model, seq, published, recomputed)
    missing: list = field(default_factory=list)       # recomputed but never published
    extra: list = field(default_factory=list)         # published but not recomputed

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.missing or self.extra)


@dataclass
class Invalid:
    """Records of one topic that are not valid records of it: how many, and the first one
    (its position in what was read, and what is wrong, never its content)."""
    topic: str
    count: int
    first: str

    def line(self) -> str:
        what = "log record" if self.topic == MODEL_EVENTS else f"{self.topic} record"
        many = self.count != 1
        return (f"{self.count} {what}{'s' if many else ''} that {'are' if many else 'is'} not "
                f"valid (first: {self.first}) skipped: a forged or corrupt record is a discrepancy")


def parse_json(value: bytes | None):
    """A record's JSON value as read from Kafka; a value that is not JSON becomes a
    marker that no schema takes (so ``screen`` counts it, and an export keeps it)."""
    import orjson
    try:
        return orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return {"not_json": True}


def screen_topic(topic: str, values: list) -> tuple[list[dict], Invalid | None]:
    """The values of an output topic that are valid records of it (as read: unchanged),
    and what was skipped."""
    from pydantic import ValidationError
    schema = SCHEMAS[topic]
    good, bad, first = [], 0, ""
    for i, v in enumerate(values):
        try:
            schema.model_validate(v)
        except ValidationError as err:
            if not bad:
                first = f"record {i}: {_what(err)}"
            bad += 1
            continue
        good.append(v)
    return good, (Invalid(topic, bad, first) if bad else None)


def screen_log(log: list) -> tuple[list[dict], Invalid | None]:
    """The log records replay can place (partition, offset, a value with a source and an
    event with a type and a model id); the processor judges the rest of each event."""
    good, bad, first = [], 0, ""
    for i, r in enumerate(log):
        problem = _log_problem(r)
        if problem:
            if not bad:
                first = f"record {i}: {problem}"
            bad += 1
            continue
        good.append(r)
    return good, (Invalid(MODEL_EVENTS, bad, first) if bad else None)


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


def _what(err) -> str:
    """A validation error without the value: where and which rule."""
    e = err.errors(include_input=False, include_url=False)[0]
    where = ".".join(map(str, e["loc"])) or "the record"
    return f"{where}: {e['msg']}"[:160]


def _log_problem(r) -> str | None:
    if not isinstance(r, dict) or not isinstance(r.get("value"), dict):
        return "not a log record"
    if not all(isinstance(r.get(k), int) and not isinstance(r.get(k), bool) for k in ("partition", "offset")):
        return "partition and offset must be integers"
    event = r["value"].get("event")
    if not isinstance(r["value"].get("source"), str) or not isinstance(event, dict):
        return "value needs a source and an event"
    if event.get("type") not in EVENT_TYPES or not isinstance(event.get("model_id"), str):
        return "event needs a type (model, example, query) and a model_id"
    return None


@dataclass
class ReplayReport:
    events: int
    topics: dict
    invalid: list = field(default_factory=list)      # Invalid: records skipped, unreplayed

    @property
    def ok(self) -> bool:
        return not self.invalid and all(t.ok for t in self.topics.values())

    def summary(self) -> str:
        lines = [f"replayed {self.events:,} model events"]
        lines += [f"  {i.line()}" for i in self.invalid]
        for name, t in self.topics.items():
            lines.append(f"  {name:12s} matched {t.matched:,}, mismatched {len(t.mismatches)}, "
                         f"missing {len(t.missing)}, extra {len(t.extra)}")
            if t.mismatches:
                model, seq, pub, rec = t.mismatches[0]
                diff = {k: (pub.get(k), rec.get(k)) for k in set(pub) | set(rec)
                        if pub.get(k) != rec.get(k)}
                lines.append(f"    first mismatch: model {model!r} seq {seq}: published vs recomputed {diff}")
            for label, items in (("missing", t.missing), ("extra", t.extra)):
                if items:
                    lines.append(f"    first {label}: model {items[0][0]!r} seq {items[0][1]}")
        lines.append("OK: every release reproduced" if self.ok else "FAILED: see above")
        return "\n".join(lines)


def _key(v: dict) -> tuple:
    return v["model_id"], v["seq"], v.get("charges", v.get("version", 0) if "rules" in v else 0)


def _index(values) -> dict:
    out = {}
    for v in values:
        out[_key(v)] = {k: x for k, x in v.items() if k not in IGNORED_FIELDS}
    return out


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

    processor = Processor(rng, {}, emit)
    selected = [r for r in sorted(log, key=lambda r: (r["partition"], r["offset"]))
                if models is None or r["value"]["event"]["model_id"] in models]
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
        pub = [v for v in published.get(topic, []) if models is None or v["model_id"] in models]
        got, want = _index(pub), _index(recomputed[topic])
        report = TopicReport()
        for k in sorted(set(got) | set(want), key=lambda k: (k[0], k[1], k[2] or 0)):
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
    return ReplayReport(n, topics, invalid)


def verify_public(published: dict[str, list[dict]]) -> list[str]:
    """Checks that need no key (``dpstream replay --no-key``): each ledger's running totals
    equal the composition of its entries under the declared rule and stay within the
    budget, charge counters run 1, 2, 3, ... per (model, epoch), and prediction seqs and
    hypothesis versions never go backwards. Returns the problems found (empty: all good);
    a record that is not valid is one (``screen``), and the checks run on the rest."""
    from dpstream.mechanisms.accounting import Ledger
    from dpstream.mechanisms.errors import BudgetExhausted

    _, published, invalid = screen([], published)
    problems: list[str] = [i.line() for i in invalid]
    ledgers: dict[tuple, dict] = {}
    for e in published.get(LEDGER, []):
        ledgers.setdefault((e["model_id"], e["epoch"]), {})[e["charges"]] = e   # dedupe
    for (model, epoch), entries in sorted(ledgers.items()):
        order = sorted(entries)
        if order != list(range(1, len(order) + 1)):
            problems.append(f"ledger {model} epoch {epoch}: charge counters {order[:5]}... not 1..n")
            continue
        first = entries[order[0]]
        led = Ledger.create(epsilon=first["budget_epsilon"], delta=first["budget_delta"],
                            rule=first["rule"])
        for c in order:
            e = entries[c]
            try:
                led.charge(e["mechanism"], e["epsilon"], e["delta"], e["count"], e.get("rho"))
            except BudgetExhausted:
                problems.append(f"ledger {model} epoch {epoch} charge {c}: exceeds the budget")
                break
            t = led.totals()
            if abs(t.epsilon - e["spent_epsilon"]) > 1e-9 * max(1.0, t.epsilon) or \
                    abs(t.delta - e["spent_delta"]) > 1e-9 * max(1e-12, t.delta):
                problems.append(f"ledger {model} epoch {epoch} charge {c} (seq {e['seq']}): running "
                                f"total {e['spent_epsilon']!r} != composition {t.epsilon!r}")
    problems += _check_predictions(published)
    problems += _check_spent_against_ledger(published)
    problems += _check_answers(published)
    return problems


def _check_answers(published: dict[str, list[dict]]) -> list[str]:
    """The ``answers`` topic holds exactly the query records of ``predictions`` (what the
    querier reads is what the audit checks): a forged, altered or missing answer fails."""
    if ANSWERS not in published:
        return []                        # an export from before the answers topic existed
    queries = {(p["model_id"], p["seq"]): p for p in published.get(PREDICTIONS, []) if copies(PREDICTIONS, p)}
    answers = {(a["model_id"], a["seq"]): a for a in published[ANSWERS]}
    strip = lambda v: {k: x for k, x in v.items() if k not in IGNORED_FIELDS}   # noqa: E731
    for key in sorted(set(queries) | set(answers)):
        if key not in answers:
            return [f"answers {key[0]} seq {key[1]}: a query answer on predictions is not on answers"]
        if key not in queries or strip(answers[key]) != strip(queries[key]):
            return [f"answers {key[0]} seq {key[1]}: differs from the query's record on predictions"]
    return []


def _check_spent_against_ledger(published: dict[str, list[dict]]) -> list[str]:
    """Every budget a prediction reports as spent must be a running total the model's ledger
    shows: a ledger cut short (or predictions claiming charges nobody published) fails."""
    totals: dict[str, set] = defaultdict(set)
    for e in published.get(LEDGER, []):
        totals[e["model_id"]].add(round(e["spent_epsilon"], 9))
    problems = []
    for p in published.get(PREDICTIONS, []):
        spent = round(p["epsilon_spent"], 9)
        if spent and spent not in totals[p["model_id"]]:
            problems.append(f"predictions {p['model_id']} seq {p['seq']}: reports eps spent "
                            f"{p['epsilon_spent']!r}, which no ledger entry of the model shows")
            break
    return problems


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
