"""Model registration records (the ``models`` topic and ``dpstream models register``)."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from .events import ModelId, Strict


class Budget(Strict):
    epsilon: float = Field(gt=0, le=1e6)
    delta: float = Field(ge=0, lt=1)


class WinnowParams(Strict):
    kind: Literal["winnow"] = "winnow"
    mode: Literal["theory", "practical"] = "practical"
    rho: float = Field(default=0.1, gt=0, le=1)
    T: int = Field(default=1_000_000, ge=1)
    beta: float = Field(default=0.01, gt=0, lt=1)
    c: float = Field(default=0.25, gt=0, lt=0.5)
    signed: bool = False
    eps_hat: float | None = Field(default=None, gt=0)
    eta: float | None = Field(default=None, gt=0)
    m: int | None = Field(default=None, ge=1)
    K: int | None = Field(default=None, ge=1)
    L: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _practical_complete(self):
        if self.mode == "practical" and None in (self.eps_hat, self.eta, self.m, self.K, self.L):
            raise ValueError("practical mode needs eps_hat, eta, m, K and L")
        return self


class ContinualWinnowParams(Strict):
    """Continual-release Winnow (our extension, learners/continual_winnow.py): the budget
    alone fixes the noise; these shape the learner. Rows are sparse {0,1} (``active``) or
    dense x in {-1,+1}^d (the +1 coordinates are the active ones)."""
    kind: Literal["continual_winnow"] = "continual_winnow"
    max_active: int = Field(ge=1, le=10_000)        # active features per row, bias not counted
    block: int = Field(default=100, ge=1, le=1_000_000)            # examples per release
    horizon: int = Field(default=1_000_000, ge=1, le=1_000_000_000)  # examples per epoch
    eta: float = Field(default=1.0, gt=0, le=100)   # learning rate, in noise units
    margin: float = Field(default=5.0, ge=0, le=1000)  # update below this margin (noise units)

    @model_validator(mode="after")
    def _blocks_fit(self):
        if self.horizon % self.block:
            raise ValueError("horizon must be a multiple of block")
        return self


#: Hypothesis classes a predictor can be registered with (learners/generators.py): real x for
#: halfspaces (R^d), thresholds and intervals (d = 1); x in {-1, +1}^d for the monotone
#: conjunctions and disjunctions and the decision lists; a domain index x = [i] for a finite
#: class given as its prediction table.
GENERATORS = ("halfspace", "thresholds", "intervals", "conjunctions", "disjunctions",
              "decision_lists", "finite")
BINARY_GENERATORS = ("conjunctions", "disjunctions", "decision_lists")
FINITE_TABLE_ENTRIES = 100_000   # a finite class travels inside its registration record


class PredictorParams(Strict):
    kind: Literal["predictor"] = "predictor"
    generator: Literal[GENERATORS] = "halfspace"
    adaptive: bool = False                    # halfspaces only: the seed's adaptive generator
    k: int | None = Field(default=None, ge=1, le=1_000_000)   # blocks
    m: int | None = Field(default=None, ge=1, le=100_000)     # examples per block; an epoch needs k * m
    examples: int | None = Field(default=None, ge=1, le=100_000_000)  # or: examples per epoch, and
    # k, m follow from the budget (learners.predictor.size_predictor)
    v_max: int = Field(ge=1, le=100_000)
    epochs: bool = True                       # start a new epoch on fresh data when exhausted
    accounting: Literal["epoch", "instance"] = "epoch"   # learners/predictor.py
    hard_query_weight: float = Field(default=10_000.0, gt=0, le=1e6)   # halfspaces: a hard query's
    # weight against one example's; 1 keeps coin-flip labels from overriding noisy data
    max_conjunction: int = Field(default=1, ge=1, le=3)     # decision_lists: rule size
    negations: bool = True                                  # decision_lists: negated literals
    table: list[list[Literal[-1, 1]]] | None = None         # finite: table[h][i], labels of
    # hypothesis h on domain point i (the class is public, so it may sit in the config)

    @model_validator(mode="after")
    def _shape(self):
        if (self.k is None) != (self.m is None) or (self.k is None) == (self.examples is None):
            raise ValueError("give either k and m, or examples (k and m then follow from the budget)")
        if (self.generator == "finite") != (self.table is not None):
            raise ValueError("the finite generator needs 'table' (and only it takes one)")
        if self.table is not None:
            sizes = {len(row) for row in self.table}
            if not self.table or len(sizes) != 1 or 0 in sizes:
                raise ValueError("table must be a non-empty list of equally long, non-empty rows")
            if len(self.table) * sizes.pop() > FINITE_TABLE_ENTRIES:
                raise ValueError(f"table has more than {FINITE_TABLE_ENTRIES} entries")
        if self.adaptive and self.generator != "halfspace":
            raise ValueError("adaptive applies to the halfspace generator only")
        return self

    def input_error(self, x: list[float]) -> str | None:
        """Why a dense x is outside this class's domain (None when it is inside); the
        dimension and the {-1, +1} check of the binary classes are made by the caller."""
        if self.generator == "finite":
            n = len(self.table[0])
            if not (x[0].is_integer() and 0 <= x[0] < n):
                return f"out of domain: this model needs x = [i] with i an integer in [0, {n})"
        return None


class DecisionListParams(Strict):
    kind: Literal["decision_list"] = "decision_list"
    window: int = Field(ge=1, le=10_000_000)  # examples per training window (disjoint)
    max_conjunction: int = Field(default=1, ge=1, le=3)
    negations: bool = True
    accounting: Literal["set_cover", "advanced", "basic"] = "set_cover"


Params = Annotated[Union[WinnowParams, ContinualWinnowParams, PredictorParams, DecisionListParams],
                   Field(discriminator="kind")]


class ModelConfig(Strict):
    type: Literal["model"] = "model"
    model_id: ModelId
    dimension: int = Field(ge=1, le=10_000_000)
    budget: Budget
    params: Params

    @property
    def kind(self) -> str:
        return self.params.kind

    @property
    def binary(self) -> bool:
        """Inputs in {-1, +1}^d (Winnow, decision lists, predictors of a binary class) or real
        (the other predictors)."""
        return self.params.kind != "predictor" or self.params.generator in BINARY_GENERATORS
