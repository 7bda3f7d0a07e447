"""Randomness for training-mode layers (dropout), carried functionally through a jitted step.

A layer that needs random numbers asks `key_for(name)` while the step is being
traced; the key is `fold_in(step_key, crc32(name))`, so every component gets
its own stream, forward and backward see the same mask (the backward asks for
the same key again), and a run is reproducible from the step's key. `fit`
enters `randomness(key)` with a key derived from its seed and the step number.

The active key and proportions are context variables: a computation traced on another thread (a data loader's,
a thread pool's) sees its own blocks, not the main thread's.
"""

from __future__ import annotations

import contextlib
import contextvars
import zlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..base.errors import SymnetError

if TYPE_CHECKING:
    import jax
else:
    from .lazyjax import jax

__all__ = ["active_key", "active_proportions", "dropout_proportions", "key_for", "proportion", "randomness"]

_KEY: contextvars.ContextVar[jax.Array | None] = contextvars.ContextVar("symnet_randomness", default=None)


@contextlib.contextmanager
def randomness(key: jax.Array) -> Iterator[None]:
    """Make `key` the source of random numbers for layers evaluated (or differentiated) inside the block."""
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)


def active_key() -> jax.Array | None:
    """The key of the innermost `randomness` block, or None outside any.

    A compiled computation passes it into its jitted program as an argument, so
    that a cached program never keeps the key it was first traced with.
    """
    return _KEY.get()


def key_for(name: str, what: str) -> jax.Array:
    """The key of the named layer in the active `randomness` block; an error outside one."""
    key = _KEY.get()
    if key is None:
        raise SymnetError(
            f"{what} needs random numbers in training mode: train it with symnet.train.fit, run it inside "
            "`with symnet.rng.randomness(key):`, or put it in test mode (symnet.components.set_test_mode)"
        )
    return jax.random.fold_in(key, zlib.crc32(name.encode()))


# ----- dropout proportions that change during training ----------------------------------------------

_PROPORTIONS: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "symnet_dropout_proportions", default=None
)


@contextlib.contextmanager
def dropout_proportions(values: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, the dropout components named in `values` (component name -> proportion, a number or
    a traced scalar) use that proportion instead of their `dropout_proportion` field: a dropout schedule
    (`symnet.train.DropoutSchedule`) changes it every step without recompiling. A compiled computation
    passes the mapping into its jitted program as an argument, as it does the key."""
    token = _PROPORTIONS.set(dict(values))
    try:
        yield
    finally:
        _PROPORTIONS.reset(token)


def active_proportions() -> dict[str, Any]:
    """The proportions of the innermost `dropout_proportions` block (empty outside any)."""
    return dict(_PROPORTIONS.get() or {})


def proportion(name: str, default: float) -> Any:
    """The dropout proportion of the component `name`: the active block's, else `default` (its field)."""
    active = _PROPORTIONS.get()
    return active[name] if active is not None and name in active else default
