"""The Index engine: requests, planning and lowering, from Indexes to one jitted JAX program."""

from .computation import Computation, Rows, compile
from .request import ComputationRequest

__all__ = ["Computation", "ComputationRequest", "Rows", "compile"]
