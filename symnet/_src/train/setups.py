"""Compiled training setups kept between `fit` calls: a notebook's second `fit` compiles nothing new.

A `Trainer` holds the jitted step and evaluation of one setup (network
structure, optimiser, batch, chunk widths, objective, mesh, rules, lowering,
precision); JAX keeps each compiled program on the jitted function, so reusing
the Trainer reuses them. `trainer_for` keeps the last few Trainers by a key of
everything that shapes the step. An optimiser is keyed by what it computes: an
optax `GradientTransformation` is a pair of closures, and two made by the same
code from equal numbers (re-running `opt = optax.adam(1e-3)`) have equal
fingerprints (`fingerprint`), and so do attrs classes of equal fields; anything
it cannot read by value (an object of another kind, a large array) is keyed by
identity, and the kept Trainer holds
it, so an identity is never reused for another object.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Hashable
from typing import Any

import attrs
import jax
import numpy as np

from ..core.layer import Layer
from ..core.structure import Structure
from ..engine.memo import Cache

__all__ = ["fingerprint", "trainer_for", "KEPT"]

#: How many training setups `trainer_for` keeps (each with its compiled programs).
KEPT = 4

#: Cleared with every other compiled program by `symnet.clear_caches()`.
_kept: Cache[Any] = Cache(KEPT)

_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_SMALL_ARRAY = 4096  # elements: a learning-rate table is read by value, a large array by identity


def fingerprint(value: Any) -> Hashable:
    """A hashable value equal for two objects that compute the same (functions: their code, defaults and
    closures, by value; numbers, strings, tuples, lists, dicts, small arrays: by value; anything else: by
    identity)."""
    return _fingerprint(value, set())


def _fingerprint(value: Any, seen: set[int]) -> Hashable:
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    if id(value) in seen:  # a cycle (a recursive closure): by identity
        return ("id", id(value))
    seen = seen | {id(value)}
    if isinstance(value, (Structure, Layer)):  # compared by value (case classes), hashed once
        return ("value", value)
    if isinstance(value, (tuple, list)):
        items = tuple(_fingerprint(v, seen) for v in value)
        extra = _fingerprint(vars(value), seen) if hasattr(value, "__dict__") else None  # a NamedTuple's attributes
        return (type(value).__qualname__, items, extra)
    if isinstance(value, dict):
        pairs = sorted(((repr(k), _fingerprint(v, seen)) for k, v in value.items()), key=lambda kv: kv[0])
        return ("dict", tuple(pairs))
    if isinstance(value, types.FunctionType):
        cells = tuple(_cell(c, seen) for c in value.__closure__ or ())
        return (
            "function",
            value.__code__,
            _fingerprint(value.__defaults__, seen),
            _fingerprint(value.__kwdefaults__, seen),
            cells,
        )
    if isinstance(value, functools.partial):
        return (
            "partial",
            _fingerprint(value.func, seen),
            _fingerprint(value.args, seen),
            _fingerprint(value.keywords, seen),
        )
    if attrs.has(type(value)):
        fields = tuple(_fingerprint(getattr(value, f.name), seen) for f in attrs.fields(type(value)))
        return ("attrs", type(value).__qualname__, fields)
    if isinstance(value, (np.ndarray, np.generic, jax.Array)) and np.size(value) <= _SMALL_ARRAY:
        try:
            array = np.asarray(value)
        except Exception:  # a tracer or an array that cannot be read: by identity
            return ("id", id(value))
        return ("array", str(array.dtype), array.shape, array.tobytes())
    return ("id", id(value))


def _safe_fingerprint(value: Any) -> Hashable:
    """`fingerprint(value)`, or its identity where reading it fails (an object of a kind not foreseen): a setup
    then not reused, never a wrong one."""
    try:
        found = fingerprint(value)
        hash(found)
        return found
    except Exception:
        return ("id", id(value))


def _cell(cell: Any, seen: set[int]) -> Hashable:
    try:
        return _fingerprint(cell.cell_contents, seen)
    except ValueError:  # an empty cell
        return ("empty",)


def trainer_for(values: tuple[Hashable, ...], objects: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The kept Trainer of the setup `values` (hashable as they are: a Structure, numbers, a Precision) and
    `objects` (fingerprinted: the optimiser, the objective, the rules, the mesh), or a new one from `make()`,
    kept in its place (the least recently used of `KEPT` dropped). The Trainer holds `objects`, which keeps
    alive whatever the key holds by identity."""
    key = (values, tuple(_safe_fingerprint(o) for o in objects))
    trainer = _kept.get(key)
    return _kept.put(key, make()) if trainer is None else trainer
