"""Kind ``dp_ftrl``: DP-FTRL online logistic regression with matrix-factorization noise
(learners/dp_ftrl.py; mechanisms/factorization.py): the dense online learner.

Records: ``params`` (the calibrated noise, written once), ``head`` (counters, this
block's integer gradient sum, the epoch ledger: every batch), ``prefix/<epoch>/<b>`` (the
epoch's true prefix sum after block b), ``noise/<epoch>/<b>`` (the BLT's noise buffers
after block b), ``offset/<epoch>`` (the released prefix an epoch starts from). The cold
records change when a block closes; the older ones are retired.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from pydantic import Field, model_validator

from dpstream.learners.dp_ftrl import (CLIP, DPFTRL, DPFTRLParameters, dp_ftrl_parameters,
                                       featurised_row, mechanism_name, row_dimension)
from dpstream.mechanisms.factorization import BLT, BUFFERS, TREE
from dpstream.mechanisms.errors import DPStreamError
from dpstream.schemas.config import KindParams

from .base import BlockReleaseKind, max_contributions

MAX_DIMENSION = 10_000   # the noise buffers of one block, (buffers + 1) x (d + 1) floats, in one record


class DPFTRLParams(KindParams):
    """DP-FTRL: the budget and the expected examples per epoch fix the noise; ``block``,
    ``eta`` and ``clip`` default to the measured rules (learners/dp_ftrl.py)."""
    kind: Literal["dp_ftrl"] = "dp_ftrl"
    horizon: int = Field(ge=1, le=1_000_000_000)     # expected examples per epoch
    block: int | None = Field(default=None, ge=1, le=1_000_000)
    eta: float | None = Field(default=None, gt=0, le=1e6)
    clip: float = Field(default=CLIP, gt=0, le=1)
    loss: Literal["logistic", "hinge"] = "logistic"
    mechanism: Literal["blt", "tree"] = BLT
    # the class prior P(y = +1): declared public, or (None) estimated privately from the
    # positives count released with the gradients at weight prior_weight (0: no estimate)
    prior: float | None = Field(default=None, gt=0, lt=1)
    prior_weight: float | None = Field(default=None, ge=0, le=1)
    # answer +1 iff P(y = +1 | x) >= 1/2 (fewest mistakes) or >= the prior (lowest balanced error)
    decision: Literal["error", "balanced"] = "error"
    # the logistic loss as is, or each class weighted as half the stream (learners/dp_ftrl.py)
    class_weight: Literal["none", "balanced"] = "none"
    # declared numeric fields as scaled values, one-hot bins, or both (learners/dp_ftrl.py, Rows)
    rows: Literal["values", "bins", "both"] = "values"

    @model_validator(mode="after")
    def _one_prior(self):
        if self.prior is not None and self.prior_weight:
            raise ValueError(f"prior_weight={self.prior_weight} must be 0 or absent when a public "
                             f"prior={self.prior} is declared: nothing is estimated then")
        return self

    def input_form(self) -> str:
        return "real"

    def declared_dimension(self, fields: list) -> int:
        """The declared fields' dense dimension in the chosen ``rows``."""
        from dpstream.learners.features import Featuriser
        return row_dimension(Featuriser(fields), self.rows)


def parameters(config) -> DPFTRLParameters:
    p, b = config.params, config.budget
    return dp_ftrl_parameters(epsilon=b.epsilon, delta=b.delta, d=config.dimension,
                              horizon=p.horizon, block=p.block, eta=p.eta, loss=p.loss,
                              mechanism=p.mechanism, clip=p.clip, prior=p.prior,
                              prior_weight=p.prior_weight, decision=p.decision,
                              class_weight=p.class_weight, max_contributions=max_contributions(config),
                              admission=config.privacy_unit is not None)


class DPFTRLKind(BlockReleaseKind):
    name = "dp_ftrl"
    Params = DPFTRLParams
    mechanisms = (mechanism_name(BLT), mechanism_name(TREE))
    parameters = staticmethod(parameters)          # the module's function, as the kind's
    row = "x"                                      # dense rows, not sparse indices

    # ------------------------------------------------------------ the kind
    @classmethod
    def featurise(cls, config, features: dict) -> dict:
        """The dense row in the registered ``rows`` (learners/dp_ftrl.py ``featurised_row``)."""
        return {"x": featurised_row(cls.featuriser(config), features, config.params.rows)}

    @classmethod
    def registration_notes(cls, config) -> list[str]:
        """The horizon rounded up to a multiple of the block (learners/dp_ftrl.py): before,
        horizon 1 with block 1,000 silently ran epochs of 1,000 examples."""
        try:
            p = parameters(config)
        except DPStreamError:
            return []
        notes = cls.unit_note(config, p.epsilon, p.epsilon_example)
        if p.horizon != config.params.horizon:
            notes.append(f"horizon {config.params.horizon:,} is rounded up to {p.horizon:,}, a multiple of "
                         f"its block of {p.block:,} examples: each epoch is {p.horizon:,} examples")
        return notes

    @classmethod
    def config_problem(cls, config) -> str | None:
        if config.params.rows != "values" and config.features is None:
            return (f"rows={config.params.rows!r} bins declared numeric fields: declare the features "
                    "(or leave rows at 'values' for raw x)")
        if config.dimension > MAX_DIMENSION:
            return (f"dimension {config.dimension:,} is above the {MAX_DIMENSION:,} a dp_ftrl model "
                    "keeps per record: declare fewer features or hash categories into fewer buckets")
        return cls.parameters_problem(config)

    @classmethod
    def parameter_rows(cls, config):
        q = parameters(config)
        src = "registration" if config.params.block else "rule (learners/dp_ftrl.py)"
        person, k = config.privacy_unit, q.max_contributions
        return [("mechanism", f"{q.mechanism}", "registration (mechanisms/factorization.py)"),
                ("block B, horizon T per epoch", f"{q.block}, {q.horizon}", src),
                ("clip, sensitivity", f"{q.clip:g}, {q.sensitivity:.4g}",
                 "replace-one: sqrt((2 clip)^2 + prior_weight^2)"),
                ("class prior", "declared public" if q.prior is not None else
                 f"private: positives count released at weight {q.prior_weight:g}"
                 + (", beside the count of examples that reached the learner" if q.count_weight else "")
                 if q.prior_weight else "none (intercept 0)",
                 "registration" if config.params.prior is not None
                 or config.params.prior_weight is not None else "rule (learners/dp_ftrl.py)"),
                ("max ||C e_j||^2", f"{q.strategy_norm2:.4g}", f"{q.mechanism} factorization of {q.blocks} blocks"),
                ("noise sigma per coordinate", f"{q.sigma:.4g}", "sens ||C e_1|| / sqrt(2 rho)" if k == 1
                 else "sens sqrt(P_k) / sqrt(2 rho)"),
                ("rho (zCDP) per epoch", f"{q.rho:.4g}", "dp-accounting: the largest rho meeting the budget"),
                ("guaranteed eps per example", f"{q.epsilon:.4g}", "epochs on disjoint examples compose in parallel")
                if person is None else ("guaranteed eps per person and epoch", f"{q.epsilon:.4g}",
                                        "a person in several epochs composes across them"),
                ("eta", f"{q.eta:.4g}", "registration" if config.params.eta else "rule: 1 / (sigma ||C e_1||)"),
                ("decision, class weight, rows", f"{q.decision}, {q.class_weight}, {config.params.rows}",
                 "registration (post-processing, weights <= 1 after the clip, featurisation: "
                 "no privacy parameter)")] + cls._unit_rows(config, q)

    @staticmethod
    def _unit_rows(config, q) -> list[tuple[str, str, str]]:
        """A person as the privacy unit: its bound, P_k and the per-example epsilon (none
        for one example, whose rows above are the numbers they always were)."""
        if config.privacy_unit is None:
            return []
        return [("privacy unit", f"a person: at most {q.max_contributions} examples per epoch, one per block",
                 "registration (the agents admit a person's first k in log order)"),
                ("participation norm P_k", f"{q.participation_norm2:.6g}",
                 "max over k blocks S of 1_S^T C^T C 1_S (mechanisms/participation.py)"),
                ("eps per example (same noise)", f"{q.epsilon_example:.4g}", "sens^2 P_1 / (2 sigma^2) as zCDP")]

    # ------------------------------------------------------------ one model
    def on_query(self, event, source, outputs) -> None:
        """The released model's label; before anything is known (no declared prior, no
        release yet) no label, status ``learning`` (learners/dp_ftrl.py)."""
        self._begin(outputs)
        label = self.model.predict_one(event[self.row])
        self._predict("query", source, event, label, "answered" if label is not None else "learning",
                      self.model.version)

    def create(self, outputs) -> None:
        self._begin(outputs)
        params = parameters(self.config)
        self.state[self.key("params")] = asdict(params)
        self.model = DPFTRL(params=params, rng=self.rng, model_id=self.model_id, on_charge=self._charged)
        self.epoch, self._saved = 0, (0, 0)

    def load(self, head: dict) -> None:
        self._load_head(head)
        raw = dict(self.state[self.key("params")])
        raw["blt"] = None if raw["blt"] is None else tuple(map(tuple, raw["blt"]))
        params = DPFTRLParameters(**raw)
        hot = head["learner"]
        e, b = hot["epoch"], hot["b"]
        cold = {"prefix": self.state[self.key("prefix", e, b)]["v"] if b else None,
                "noise": self.state[self.key("noise", e, b)]["v"] if b and params.mechanism == BLT else None,
                "offset": self.state[self.key("offset", e)]["v"] if e else None}
        state = DPFTRL.state_from(hot, cold, params.released_dim, BUFFERS)
        self.model = DPFTRL(params=params, rng=self.rng, model_id=self.model_id, state=state,
                            on_charge=self._charged)
        self.epoch, self._saved = e, (e, b)

    def save(self) -> None:
        s = self.model.state
        if (s.epoch, s.b) != self._saved:
            cold = self.model.cold_record()
            if s.b:
                self._put(self.key("prefix", s.epoch, s.b), {"v": cold["prefix"]})
                if cold["noise"] is not None:
                    self._put(self.key("noise", s.epoch, s.b), {"v": cold["noise"]})
            if s.epoch:
                self._put(self.key("offset", s.epoch), {"v": cold["offset"]})
            self._saved = (s.epoch, s.b)
        self._write_head({"learner": self.model.hot_record()})

    def live(self) -> set[str]:
        s = self.model.state
        keys = set()
        if s.b:
            keys.add(self.key("prefix", s.epoch, s.b))
            if s.noise is not None:
                keys.add(self.key("noise", s.epoch, s.b))
        if s.epoch:
            keys.add(self.key("offset", s.epoch))
        return keys
