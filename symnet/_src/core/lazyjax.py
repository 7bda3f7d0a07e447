"""`jax`, `jax.numpy` and `jax.lax`, imported when a computation first needs them.

Layers, components and the planner describe networks with numpy alone:
reading a Kaldi config and printing what `symnet info` prints imports no
jax (whose import costs more than the rest of symnet's). The modules that
define them take jax from here,

    if TYPE_CHECKING:
        import jax
        import jax.numpy as jnp
    else:
        from ..core.lazyjax import jax, jnp

so mypy sees the real modules. The first attribute read on a stand-in imports
the module; each attribute read is then kept on the stand-in, so later reads
cost what a module attribute costs. A stand-in must not be read at import
time (a decorator, a module-level constant): that would import jax there.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

__all__ = ["jax", "jnp", "lax"]


class _Deferred(types.ModuleType):
    """A module imported on the first read of one of its attributes."""

    def __getattr__(self, name: str) -> Any:  # only called for attributes not kept yet
        value = getattr(importlib.import_module(self.__name__), name)
        setattr(self, name, value)
        return value


jax = _Deferred("jax")
jnp = _Deferred("jax.numpy")
lax = _Deferred("jax.lax")
