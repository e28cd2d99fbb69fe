"""Pydantic v2 models of dpstream's events, configs and state records.

Each model kind's ``params`` schema lives with the kind (agents/kinds/); ``ModelConfig``
validates ``params`` by the schema its ``kind`` names, among every kind that
``agents.kinds.KINDS`` lists (``config.params_schemas``, read on first use)."""
from .config import Budget, KindParams, ModelConfig, PrivacyUnit, params_schemas
from .events import (Features, LabeledExample, LedgerEntryEvent, Prediction, Query, Rejected,
                     Release)

__all__ = ["Budget", "Features", "KindParams", "LabeledExample", "LedgerEntryEvent", "ModelConfig",
           "Prediction", "PrivacyUnit", "Query", "Rejected", "Release", "json_schemas", "params_schemas"]


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every event and config model (``dpstream schemas``)."""
    models = [ModelConfig, LabeledExample, Query, Prediction, LedgerEntryEvent, Release, Rejected]
    return {m.__name__: m.model_json_schema() for m in models}
