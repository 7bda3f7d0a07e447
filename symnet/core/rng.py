"""Randomness for training-mode layers (dropout), carried functionally through a jitted step.

A layer that needs random numbers asks `key_for(name)` while the step is being
traced; the key is `fold_in(step_key, crc32(name))`, so every component gets
its own stream, forward and backward see the same mask (the backward asks for
the same key again), and a run is reproducible from the step's key. `fit`
enters `randomness(key)` with a key derived from its seed and the step number.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator

import jax

from ..errors import SymnetError

_STACK: list[jax.Array] = []


@contextlib.contextmanager
def randomness(key: jax.Array) -> Iterator[None]:
    """Make `key` the source of random numbers for layers evaluated (or differentiated) inside the block."""
    _STACK.append(key)
    try:
        yield
    finally:
        _STACK.pop()


def active_key() -> jax.Array | None:
    """The key of the innermost `randomness` block, or None outside any.

    A compiled computation passes it into its jitted program as an argument, so
    that a cached program never keeps the key it was first traced with.
    """
    return _STACK[-1] if _STACK else None


def key_for(name: str, what: str) -> jax.Array:
    """The key of the named layer in the active `randomness` block; an error outside one."""
    if not _STACK:
        raise SymnetError(
            f"{what} needs random numbers in training mode: train it with symnet.train.fit, run it inside "
            "`with symnet.rng.randomness(key):`, or put it in test mode (symnet.components.set_test_mode)"
        )
    return jax.random.fold_in(_STACK[-1], zlib.crc32(name.encode()))
