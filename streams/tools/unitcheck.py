"""Replay's check of the privacy unit: that no person gave a learner more than the
registration allows (docs/privacy.md, "The privacy unit").

The processor, asked by replay, keeps a private trace of its admission decisions
(agents/units.py ``Decision``: model, seq, unit, epoch, block, admitted). This check reads
it against the log, not against the processor's own bookkeeping:

* each example of a bounded model that got a record has a decision, made for the unit its
  log event carries (found through the record's ``source``: the log event's, read here);
* per (model, epoch, unit) at most k (``max_contributions``) examples are admitted, and for
  a kind whose learner releases per block at most one per block; per (model, unit) examples
  are admitted in at most ``max_epochs`` epochs;
* every refusal was due: its unit had k admitted before it in that epoch, or one in that
  block, or had reached the learner in ``max_epochs`` earlier epochs, or it had no unit (no
  usable ID).

A problem names the model, the epoch and the seq (public: every example has a record at
its seq), never a unit or an ID. The trace and the log stay in memory.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dpstream.agents.kinds import kind
from dpstream.agents.kinds.base import BlockReleaseKind
from dpstream.schemas import ModelConfig

SHOWN = 10       # problem lines listed; the rest counted


@dataclass
class UnitCheck:
    """What the check found: the bounded models and their examples it checked, and the
    problems: one line per (model, epoch, problem), with its first seq and how many
    examples have it; none names a unit."""
    models: int = 0
    examples: int = 0
    _found: dict = field(default_factory=dict)    # (where, what) -> [first seq, count]

    @property
    def ok(self) -> bool:
        return not self._found

    def found(self, where: str, what: str, seq: int) -> None:
        self._found.setdefault((where, what), [seq, 0])[1] += 1

    @property
    def problems(self) -> list[str]:
        return [f"{where}: {what} (at seq {seq}" + (f", and {n - 1:,} more examples)" if n > 1 else ")")
                for (where, what), (seq, n) in self._found.items()]

    def lines(self) -> list[str]:
        if not self.models:
            return []
        head = (f"  {'units':12s} {self.examples:,} examples of {self.models} model"
                f"{'s' if self.models != 1 else ''} bounded per person: ")
        if self.ok:
            return [head + "every person within the bound, every refusal due"]
        shown = self.problems
        more = [f"    ... and {len(shown) - SHOWN} more"] if len(shown) > SHOWN else []
        return [head + "BOUND NOT KEPT"] + [f"    {p}" for p in shown[:SHOWN]] + more


def bounded_models(log: list[dict]) -> dict[str, ModelConfig]:
    """The registrations in ``log`` (valid records, replay.screen_log: one per model) whose
    unit is a person."""
    out = {}
    for r in log:
        event = r["value"]["event"]
        if event["type"] == "model" and event["model_id"] not in out:
            out[event["model_id"]] = ModelConfig.model_validate(event)
    return {m: c for m, c in out.items() if c.privacy_unit is not None}


def check_units(log: list[dict], trace: dict, predictions: list[dict]) -> UnitCheck:
    """The check (module docstring) of ``trace`` ((model, seq) -> Decision) against ``log``
    and the recomputed ``predictions``."""
    configs = bounded_models(log)
    check = UnitCheck(models=len(configs))
    if not configs:
        return check
    logged = {}                          # (model, source) -> the unit its log event carries
    for r in log:
        event = r["value"]["event"]
        if event["type"] == "example" and event["model_id"] in configs:
            unit = event.get("unit")
            logged[(event["model_id"], r["value"]["source"])] = unit if isinstance(unit, str) else None
    decisions = []
    for p in sorted(predictions, key=lambda p: (p["model_id"], p["seq"])):
        model = p["model_id"]
        if p["kind"] != "example" or model not in configs:
            continue
        check.examples += 1
        d = trace.get((model, p["seq"]))
        if d is None:
            check.found(f"model {model}", "an example reached the model without an admission "
                        "decision", p["seq"])
            continue
        if d.unit != logged.get((model, p["source"])):
            check.found(f"model {model} epoch {d.epoch}", "an admission decision was made for another "
                        "unit than its example's log event carries", d.seq)
            continue
        decisions.append(d)
    admitted: dict[tuple, list] = defaultdict(list)       # (model, epoch, unit) -> [(seq, block)]
    epochs: dict[tuple, set] = defaultdict(set)           # (model, unit) -> epochs it reached the learner in
    for d in decisions:
        k = configs[d.model_id].privacy_unit.max_contributions
        most = configs[d.model_id].privacy_unit.max_epochs
        blocks = issubclass(kind(configs[d.model_id].kind), BlockReleaseKind)
        where = f"model {d.model_id} epoch {d.epoch}"
        if blocks and d.block is None:
            check.found(where, "a decision names no block (the kind releases per block)", d.seq)
            continue
        before = admitted[(d.model_id, d.epoch, d.unit)] if d.unit is not None else []
        full = len(before) >= k
        taken = d.block is not None and any(b == d.block for _, b in before)
        seen = epochs[(d.model_id, d.unit)]
        spent = not before and len({e for e in seen if e < d.epoch}) >= most
        if d.admitted:
            if d.unit is None:
                check.found(where, "an example without an ID was admitted", d.seq)
            elif full:
                check.found(where, f"an example was admitted beyond its person's bound of k={k}", d.seq)
            elif taken:
                check.found(where, "a person's second example in one block was admitted", d.seq)
            elif spent:
                check.found(where, f"a person's examples were admitted in more than max_epochs={most} "
                            "epochs", d.seq)
            if d.unit is not None:
                before.append((d.seq, d.block))
                seen.add(d.epoch)
        elif d.unit is not None and not full and not taken and not spent:
            check.found(where, f"an example was refused though its person had fewer than k={k} "
                        f"admitted, none in its block, and fewer than max_epochs={most} epochs", d.seq)
    return check
