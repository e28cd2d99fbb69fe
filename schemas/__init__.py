"""Pydantic v2 models of dpstream's events, configs and state records.

Each model kind's ``params`` schema lives with the kind (agents/kinds/) and registers
itself here (``config.register_params``); ``ModelConfig`` validates ``params`` by the
schema its ``kind`` names."""
from .config import Budget, KindParams, ModelConfig, model_config_json_schema, params_schemas
from .events import (Features, LabeledExample, LedgerEntryEvent, Prediction, Query, Rejected,
                     Release)

__all__ = ["Budget", "Features", "KindParams", "LabeledExample", "LedgerEntryEvent", "ModelConfig",
           "Prediction", "Query", "Rejected", "Release", "json_schemas", "params_schemas"]


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every event and config model (``dpstream schemas``)."""
    models = [LabeledExample, Query, Prediction, LedgerEntryEvent, Release, Rejected]
    return {"ModelConfig": model_config_json_schema(), **{m.__name__: m.model_json_schema() for m in models}}
