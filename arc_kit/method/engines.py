"""Choosing a decode engine: ``make_engine(model, kind)``, and ``as_engine`` for callers that hold a model.

``kind`` "fast" (the default) is ``fast.static_engine.StaticEngine`` where the model is one it runs
(``fast.decode_weights.unsupported_reason`` is None), else the reference engine, with one logged line
saying why; "reference" is ``reference.engine.ReferenceEngine``. ``compile``: "auto" compiles the
fast engine's step on a GPU (CUDA graphs) and keeps it eager on the CPU, where compiling costs
more than it saves in a short run; "on" and "off" force it. The two kinds give the same answers
and NLLs up to float rounding (the tests hold them to 1e-4).

The searches (``dfs``, ``batched_dfs``, ``samplers``) and the scorer (``scoring``) take an engine;
given a model instead, they make one with ``as_engine`` for that call (the fast kind: its weights
are copied each time, so callers that search more than once keep an engine, as ``Solver`` does).
Knows which engines exist; knows nothing of how either decodes.
"""

from __future__ import annotations

import logging

from arc_kit.method.engine import DecodeEngine
from arc_kit.method.fast.decode_weights import unsupported_reason
from arc_kit.method.fast.static_engine import StaticEngine
from arc_kit.method.reference.engine import ReferenceEngine
from arc_kit.settings import ENGINE_COMPILE_MODES, ENGINE_KINDS

logger = logging.getLogger(__name__)

__all__ = ["DecodeEngine", "ENGINE_KINDS", "as_engine", "make_engine"]


def compiles(compile: str, model) -> bool:
    """Whether the fast engine compiles its step: ``compile`` "on", or "auto" on a CUDA device."""
    if compile not in ENGINE_COMPILE_MODES:
        raise ValueError(f"unknown engine compile mode {compile!r}; expected one of {ENGINE_COMPILE_MODES}")
    if compile == "auto":
        return next(model.parameters()).device.type == "cuda"
    return compile == "on"


def make_engine(model, kind: str = "fast", *, compile: str = "auto") -> DecodeEngine:
    """The decode engine of ``kind`` for ``model``; "fast" on a model it cannot run gives the reference (logged)."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}; expected one of {ENGINE_KINDS}")
    if kind == "fast":
        reason = unsupported_reason(model)
        if reason is None:
            return StaticEngine(model, compile=compiles(compile, model))
        logger.warning("the fast decode engine cannot run this model (%s); using the reference engine", reason)
    return ReferenceEngine(model)


def as_engine(source, kind: str = "fast") -> DecodeEngine:
    """``source`` itself when it is an engine, else ``make_engine(source, kind)``."""
    return source if isinstance(source, DecodeEngine) else make_engine(source, kind)
