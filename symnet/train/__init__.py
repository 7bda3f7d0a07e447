"""Training: examples with context, Kaldi's objectives and training rules, the fit loop (data-parallel over a
mesh), checkpoints.

The names are imported on first use (PEP 562), so a module that needs only
one part (`symnet compute` reads features with `kaldi_data`) does not pay for
the rest (the fit loop imports optax).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from symnet._src.levenshtein import edit_distance

if TYPE_CHECKING:
    from symnet._src.train.chain_egs import ChainEgs, ChainEgsData, chain_egs
    from symnet._src.train.checkpoint import CheckpointError, Position
    from symnet._src.train.examples import Chunks, make_chunks
    from symnet._src.train.kaldi_data import KaldiData, KaldiDataError, read_kaldi_data
    from symnet._src.train.loop import EpochStats, FitResult, StepStats, TrainingError, fit, steps_per_epoch
    from symnet._src.train.loss_scale import LossScaled
    from symnet._src.train.objectives import (
        CTC,
        OBJECTIVE_NAMES,
        OBJECTIVES,
        Chain,
        Objective,
        greedy_decode,
        objective,
    )
    from symnet._src.train.options import FitOptions
    from symnet._src.train.rules import DropoutSchedule, KaldiRules, KaldiRulesWarning, component_rules, kaldi_rules
    from symnet._src.train.streams import Corpus, SkippedDataWarning, stream_kaldi_data, stream_sequences

#: Public name -> the module of this package that defines it.
_MODULES = {
    "ChainEgs": "chain_egs",
    "ChainEgsData": "chain_egs",
    "chain_egs": "chain_egs",
    "CheckpointError": "checkpoint",
    "Position": "checkpoint",
    "Chunks": "examples",
    "LossScaled": "loss_scale",
    "make_chunks": "examples",
    "KaldiData": "kaldi_data",
    "KaldiDataError": "kaldi_data",
    "read_kaldi_data": "kaldi_data",
    "EpochStats": "loop",
    "FitResult": "loop",
    "FitOptions": "options",
    "StepStats": "loop",
    "TrainingError": "loop",
    "fit": "loop",
    "steps_per_epoch": "loop",
    "OBJECTIVES": "objectives",
    "OBJECTIVE_NAMES": "objectives",
    "Objective": "objectives",
    "CTC": "objectives",
    "Chain": "objectives",
    "greedy_decode": "objectives",
    "objective": "objectives",
    "DropoutSchedule": "rules",
    "KaldiRules": "rules",
    "KaldiRulesWarning": "rules",
    "component_rules": "rules",
    "kaldi_rules": "rules",
    "SkippedDataWarning": "streams",
    "Corpus": "streams",
    "stream_kaldi_data": "streams",
    "stream_sequences": "streams",
}

__all__ = [
    "CTC",
    "Chain",
    "ChainEgs",
    "ChainEgsData",
    "CheckpointError",
    "Chunks",
    "Corpus",
    "DropoutSchedule",
    "EpochStats",
    "FitOptions",
    "FitResult",
    "KaldiData",
    "KaldiDataError",
    "KaldiRules",
    "KaldiRulesWarning",
    "LossScaled",
    "OBJECTIVES",
    "OBJECTIVE_NAMES",
    "Objective",
    "Position",
    "SkippedDataWarning",
    "StepStats",
    "TrainingError",
    "chain_egs",
    "component_rules",
    "edit_distance",
    "fit",
    "greedy_decode",
    "kaldi_rules",
    "make_chunks",
    "objective",
    "read_kaldi_data",
    "steps_per_epoch",
    "stream_kaldi_data",
    "stream_sequences",
]


def __getattr__(name: str) -> Any:
    """A public name's object, imported from its module on first use (PEP 562)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"symnet._src.train.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
