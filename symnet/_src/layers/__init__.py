"""The implementation behind `symnet.layers` (private: import its names from `symnet.layers`)."""

from .attention import MultiHeadAttention
from .base import Typed
from .conv import Conv2d
from .dense import Affine, TimeConv
from .dropout import Dropout
from .image import Flatten, Reshape
from .normalization import BatchNorm, LayerNorm
from .pool import AvgPool2d, MaxPool2d
from .recurrent import GRU, LSTM, Bidirectional

__all__ = [
    "GRU",
    "LSTM",
    "Affine",
    "AvgPool2d",
    "BatchNorm",
    "Bidirectional",
    "Conv2d",
    "Dropout",
    "Flatten",
    "LayerNorm",
    "MaxPool2d",
    "MultiHeadAttention",
    "Reshape",
    "TimeConv",
    "Typed",
]
