"""Kind ``continual_winnow``: continual-release Winnow (our extension,
learners/continual_winnow.py), the sparse online learner to use at small epsilon.

Records: ``params`` (the calibrated noise, written once), ``head`` (counters, this
block's increment, the epoch ledger), ``node/<epoch>/<t>/<chunk>`` (true node sums,
written when block t closes; their noise is recomputed from the key),
``offset/<epoch>/<chunk>`` (the released A^ an epoch starts from).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from pydantic import Field, model_validator

from dpstream.learners.continual_winnow import (TREE_MECHANISM, ContinualWinnow,
                                                ContinualWinnowParameters, ContinualWinnowState,
                                                continual_winnow_parameters)
from dpstream.mechanisms.continual import closed_nodes
from dpstream.mechanisms.errors import DPStreamError
from dpstream.schemas.config import KindParams

from .base import BlockReleaseKind, max_contributions
from .storage import RECORD_BYTES, VECTOR_COLUMNS, read_vector, vector_records

MAX_ROW_ENTRIES = 20_000_000     # dimension x (max_active + 1) kept per block at most: see config_problem


class ContinualWinnowParams(KindParams):
    """Continual-release Winnow: the budget alone fixes the noise; these shape the learner.
    Rows are sparse {0,1} (``active``) or dense x in {-1,+1}^d (the +1 coordinates are the
    active ones)."""
    kind: Literal["continual_winnow"] = "continual_winnow"
    max_active: int | None = Field(default=None, ge=1, le=10_000)   # active features per row,
    # bias not counted; declared features fix it (one per field)
    block: int = Field(default=100, ge=1, le=1_000_000)            # examples per release
    horizon: int = Field(default=1_000_000, ge=1, le=1_000_000_000)  # examples per epoch
    eta: float = Field(default=1.0, gt=0, le=100)   # learning rate, in noise units
    margin: float = Field(default=5.0, ge=0, le=1000)  # update below this margin (noise units)

    @model_validator(mode="after")
    def _blocks_fit(self):
        if self.horizon % self.block:
            raise ValueError("horizon must be a multiple of block")
        return self


def parameters(config) -> ContinualWinnowParameters:
    p, b = config.params, config.budget
    return continual_winnow_parameters(
        epsilon=b.epsilon, delta=b.delta, d=config.dimension,
        max_active=ContinualWinnowKind.max_active(config),
        horizon=p.horizon, block=p.block, eta=p.eta, margin=p.margin,
        max_contributions=max_contributions(config))


class ContinualWinnowKind(BlockReleaseKind):
    name = "continual_winnow"
    Params = ContinualWinnowParams
    mechanisms = (TREE_MECHANISM,)
    parameters = staticmethod(parameters)          # the module's function, as the kind's

    # ------------------------------------------------------------ the kind
    @classmethod
    def max_active(cls, config) -> int | None:
        """As registered, else one per declared field (None: neither; refused)."""
        if config.params.max_active is not None:
            return config.params.max_active
        f = cls.featuriser(config)
        return None if f is None else f.active_count

    @classmethod
    def config_problem(cls, config) -> str | None:
        p, d = config.params, config.dimension
        s = cls.max_active(config)
        if s is None:
            return "max_active is required (the most features a row has active), or declare features"
        if s > d:
            return f"max_active={s} exceeds the dimension {d}"
        pending = min(d + 1, p.block * (s + 1))   # aggregated increment entries
        if 2 * 12 * pending > RECORD_BYTES:
            return (f"continual Winnow keeps a block's aggregated increment in its head record: "
                    f"up to {pending:,} entries, above {RECORD_BYTES // 24:,}: use a smaller block")
        if (d + 1) > MAX_ROW_ENTRIES // 8:
            # the released statistic, its noise and the tree's nodes are dense vectors of
            # d + 1 entries each, recomputed at every block: at d = 10^7 a single model
            # took 54 s and 934 MB for 200 examples and stalled every other model
            return (f"dimension {d:,} is above the {MAX_ROW_ENTRIES // 8 - 1:,} a continual "
                    "Winnow model can release at every block: hash or bucket features "
                    "into fewer dimensions (declared features do this)")
        return cls.parameters_problem(config)

    @classmethod
    def registration_notes(cls, config) -> list[str]:
        """A person as the privacy unit: epsilon per person and per example, one line."""
        try:
            c = parameters(config)
        except DPStreamError:
            return []
        return cls.unit_note(config, c.epsilon, c.epsilon_example)

    @classmethod
    def parameter_rows(cls, config):
        c = parameters(config)
        src = "registration"
        if config.privacy_unit is not None:
            return cls._person_rows(c)
        return [("block B, horizon T per epoch", f"{c.block}, {c.horizon}", src),
                ("max active (bias not counted), s", f"{c.max_active}, {c.s}", src),
                ("sensitivity 2 sqrt(s)", f"{c.sensitivity:.4g}", "replace-one (learners/continual_winnow.py)"),
                ("tree levels", str(c.levels), "ceil(log2(T/B)) + 1"),
                ("noise variance sigma^2", str(c.sigma2),
                 "smallest integer meeting the budget (mechanisms.continual.calibrate_tree_sigma2)"),
                ("rho (zCDP) per epoch", f"{c.rho:.4g}", "levels * Delta^2 / (2 sigma^2)"),
                ("guaranteed eps per example", f"{c.epsilon:.4g}",
                 "dp-accounting RDP conversion; epochs on disjoint examples compose in parallel"),
                ("eta, margin (noise units)", f"{c.eta:g}, {c.margin:g}", src)]

    @staticmethod
    def _person_rows(c) -> list[tuple[str, str, str]]:
        """The rows of a registration whose privacy unit is a person (k = max_contributions)."""
        src = "registration"
        return [("block B, horizon T per epoch", f"{c.block}, {c.horizon}", src),
                ("max active (bias not counted), s", f"{c.max_active}, {c.s}", src),
                ("sensitivity 2 sqrt(s)", f"{c.sensitivity:.4g}",
                 "replace-one, per block (learners/continual_winnow.py)"),
                ("privacy unit", f"a person: at most {c.max_contributions} examples per epoch, one per block",
                 "registration (the agents admit a person's first k in log order)"),
                ("tree levels, participation norm P_k", f"{c.levels}, {c.participation or c.levels:.6g}",
                 "sum over nodes of |S cap node|^2, max over k blocks (mechanisms/participation.py)"),
                ("noise variance sigma^2", str(c.sigma2),
                 "smallest integer meeting the budget (mechanisms.continual.calibrate_tree_sigma2)"),
                ("rho (zCDP) per person and epoch", f"{c.rho:.4g}", "P_k * Delta^2 / (2 sigma^2)"),
                ("guaranteed eps per person and epoch, per example",
                 f"{c.epsilon:.4g}, {c.epsilon_example:.4g}",
                 "dp-accounting RDP conversion; a person in several epochs composes across them"),
                ("eta, margin (noise units)", f"{c.eta:g}, {c.margin:g}", src)]

    # ------------------------------------------------------------ one model
    def create(self, outputs) -> None:
        self._begin(outputs)
        params = parameters(self.config)
        self.state[self.key("params")] = asdict(params)
        self.model = ContinualWinnow(params=params, rng=self.rng, model_id=self.model_id,
                                     on_charge=self._charged)
        self.epoch = 0

    def load(self, head: dict) -> None:
        self._load_head(head)
        params = ContinualWinnowParameters(**self.state[self.key("params")])
        dim = params.d + 1
        state = ContinualWinnowState.from_hot_record(head["learner"])
        state.alpha = {t: self._read("node", state.epoch, t, dim=dim) for t in closed_nodes(state.b)}
        state.offset = self._read("offset", state.epoch, dim=dim) if state.epoch else None
        self.model = ContinualWinnow(params=params, rng=self.rng, model_id=self.model_id,
                                     state=state, on_charge=self._charged)
        self.epoch = state.epoch

    def _write(self, v, *parts) -> None:
        for c, record in enumerate(vector_records(v)):
            self._put(self.key(*parts, c), record)

    def _read(self, *parts, dim: int):
        return read_vector(self.state, lambda c: self.key(*parts, c), dim)

    def save(self) -> None:
        self._write_head({"learner": self.model.state.hot_record()})

    def live(self) -> set[str]:
        """The nodes of the prefix's decomposition and the epoch's offset (``load``)."""
        s, dim = self.model.state, self.model.params.d + 1
        keys = set().union(*(self._chunks("node", s.epoch, t, n=dim, per=VECTOR_COLUMNS)
                             for t in closed_nodes(s.b)))
        return keys | (self._chunks("offset", s.epoch, n=dim, per=VECTOR_COLUMNS) if s.epoch else set())

    def _released(self, step) -> None:
        """Cold records as blocks close; versioned keys whose content is a function of the
        log, so re-applying after a crash rewrites the same."""
        s = self.model.state
        if step.new_epoch:
            self._write(s.offset, "offset", s.epoch)
        elif step.released:
            self._write(s.alpha[s.b], "node", s.epoch, s.b)
        self.epoch = s.epoch
