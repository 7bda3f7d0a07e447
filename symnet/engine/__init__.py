"""The Index engine: requests, planning and lowering, from Indexes to one jitted JAX program."""

from .computation import Computation, Rows, compile
from .request import ComputationRequest
from .streaming import Stream

__all__ = ["Computation", "ComputationRequest", "Rows", "Stream", "compile"]
