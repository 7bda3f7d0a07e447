"""Bounded caches of planned and compiled work (computations, contexts, training setups), all cleared by
`symnet.clear_caches()`."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Cache", "clear_caches"]

V = TypeVar("V")

_ALL: weakref.WeakSet[Cache[Any]] = weakref.WeakSet()


class Cache(Generic[V]):
    """A least-recently-used mapping of at most `size` entries."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        _ALL.add(self)

    def get(self, key: Hashable) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> V:
        self._entries[key] = value
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def values(self) -> list[V]:
        """The entries, least recently used first."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


def clear_caches() -> None:
    """Forget every planned computation, context and kept training setup (their compiled XLA programs go with
    them)."""
    for cache in list(_ALL):
        cache.clear()
