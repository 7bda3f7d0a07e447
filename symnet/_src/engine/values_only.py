"""A forward whose pullbacks nobody walks: where a call is not differentiated, its Tapes need values alone.

The engine builds every Tape's pullback with `linearized` below: `jax.vjp`, except
inside `values_only()`, where it only calls the function. A Computation call
that is not differentiated (the primal of `gradient.tape_differentiated`)
traces its forward there: linearising each layer would only cost trace time
(XLA drops the unused pullbacks from the program, not the time spent tracing
them).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax

__all__ = ["linearized", "values_only"]

_VALUES_ONLY = contextvars.ContextVar("symnet_values_only", default=False)


@contextlib.contextmanager
def values_only() -> Iterator[None]:
    """Inside, `linearized` gives no pullback (None): for a forward whose Tapes are read for their values."""
    token = _VALUES_ONLY.set(True)
    try:
        yield
    finally:
        _VALUES_ONLY.reset(token)


def linearized(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Any]:
    """`jax.vjp(fn, *primals)`, or `(fn(*primals), None)` inside `values_only()`."""
    if _VALUES_ONLY.get():
        return fn(*primals), None
    return jax.vjp(fn, *primals)
