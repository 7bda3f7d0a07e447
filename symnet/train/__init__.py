"""Training: examples with context, Kaldi's objectives, the fit loop (data-parallel over a mesh), checkpoints."""

from .checkpoint import CheckpointError, Position
from .examples import Chunks, make_chunks
from .kaldi_data import KaldiData, KaldiDataError, read_kaldi_data
from .loop import EpochStats, FitResult, TrainingError, fit
from .objectives import OBJECTIVES, objective

__all__ = [
    "CheckpointError",
    "Chunks",
    "EpochStats",
    "FitResult",
    "KaldiData",
    "KaldiDataError",
    "OBJECTIVES",
    "Position",
    "TrainingError",
    "fit",
    "make_chunks",
    "objective",
    "read_kaldi_data",
]
