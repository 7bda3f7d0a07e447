"""The Index engine: requests, planning and lowering, from Indexes to one jitted JAX program.

The names here are imported from their modules on first use (PEP 562), so the
planner (`symnet.engine.plan`, `context`) imports without the lowering
modules and jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .computation import Computation, Rows, compile
    from .request import ComputationRequest
    from .streaming import Stream

__all__ = ["Computation", "ComputationRequest", "Rows", "Stream", "compile"]

#: Public name -> its module.
_LAZY = {
    "Computation": ".computation",
    "Rows": ".computation",
    "compile": ".computation",
    "ComputationRequest": ".request",
    "Stream": ".streaming",
}


def __getattr__(name: str) -> Any:
    """A public name's object, imported from its module on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
