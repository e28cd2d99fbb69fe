"""The model kinds: one module each, and this registry of them.

A kind is a :class:`base.Handler` subclass in its own module: its params schema
(``Params``), its registration checks, its input domain, whether its batches are heavy,
its handler, its status and report rows. Nothing outside these modules branches on a
kind's name: the rest of the code asks ``kind(name)``.

Adding a kind: one module here (its ``Params`` and its ``Handler`` subclass), one line in
``KINDS`` below, and its tests.

``KINDS`` is the one list of kinds, written out rather than filled by imports: the
registration schema (``schemas.config.params_schemas``) reads it on first use, so every
entry point that validates or exports a registration sees every kind listed here
(schemas/config.py says why it is read then and not at import).
"""
from __future__ import annotations

from .base import BINARY, REAL, Handler, Outputs
from .continual_winnow import ContinualWinnowKind
from .decision_list import DecisionListKind
from .dp_ftrl import DPFTRLKind
from .predictor import PredictorKind
from .winnow import WinnowKind

KINDS: dict[str, type[Handler]] = {k.name: k for k in (
    WinnowKind, ContinualWinnowKind, PredictorKind, DecisionListKind, DPFTRLKind)}


def kind(name: str) -> type[Handler]:
    """The kind registered under ``name`` (KeyError if none)."""
    return KINDS[name]


__all__ = ["BINARY", "KINDS", "REAL", "Handler", "Outputs", "kind"]
