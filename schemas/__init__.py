"""Pydantic v2 models of dpstream's events, configs and state records."""
from .config import (Budget, ContinualWinnowParams, DecisionListParams, ModelConfig,
                     PredictorParams, WinnowParams)
from .events import (Features, LabeledExample, LedgerEntryEvent, Prediction, Query, Rejected,
                     Release)

__all__ = ["Budget", "ContinualWinnowParams", "DecisionListParams", "Features", "LabeledExample", "LedgerEntryEvent",
           "ModelConfig", "Prediction", "PredictorParams", "Query", "Rejected", "Release",
           "WinnowParams", "json_schemas"]


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every event and config model (``dpstream schemas``)."""
    models = [ModelConfig, LabeledExample, Query, Prediction, LedgerEntryEvent, Release, Rejected]
    return {m.__name__: m.model_json_schema() for m in models}
