"""Counting XLA compilations (jax.monitoring's backend-compile events) while a block runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import jax.monitoring

#: The event jax records once per XLA backend compilation (jax/_src/dispatch.py).
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextmanager
def count_compilations() -> Iterator[list[str]]:
    """Yields a list that gets one entry per XLA compilation made inside the block."""
    seen: list[str] = []

    def listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == BACKEND_COMPILE:
            seen.append(str(kwargs.get("fun_name", "")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
