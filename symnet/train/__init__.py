"""Training: examples with context, Kaldi's objectives, the fit loop, checkpoints."""

from .checkpoint import CheckpointError, Position
from .examples import Chunks, make_chunks
from .loop import EpochStats, FitResult, TrainingError, fit
from .objectives import OBJECTIVES, objective

__all__ = [
    "CheckpointError",
    "Chunks",
    "EpochStats",
    "FitResult",
    "OBJECTIVES",
    "Position",
    "TrainingError",
    "fit",
    "make_chunks",
    "objective",
]
