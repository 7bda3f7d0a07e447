"""The implementation behind `symnet.engine` (private: import its names from `symnet.engine`)."""

from .computation import Computation, Rows, compile
from .request import ComputationRequest
from .streaming import Stream

__all__ = ["Computation", "ComputationRequest", "Rows", "Stream", "compile"]
