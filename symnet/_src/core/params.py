"""Parameter values of a network's Weights: their random keys, initial arrays and the checks on given ones.

Every Weight's key derives from the seed and its name alone, so a parameter's
initial value does not depend on the order layers were built in or on any
other parameter. Sizes are checked before anything is initialised.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base.errors import ParameterError, at

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp

    from .layer import Weight
else:
    from .lazyjax import jax, jnp

__all__ = ["check_sizes", "checked_params", "initial_values", "MAX_PARAMETER_VALUES", "parameter_key"]


def parameter_key(seed: int, name: str) -> jax.Array:
    """The random key of the parameter `name`: derived from the seed and the name, not from any counter."""
    return jax.random.PRNGKey(zlib.crc32(f"{seed}:{name}".encode()))


#: The most values the Weights of one network may have (a gigabyte of float32: far beyond any real model),
#: checked before anything is initialised, so that a config saying `output-dim=1000000000` is an error.
MAX_PARAMETER_VALUES = 1 << 28


def initial_values(weights: Mapping[str, Weight], seed: int) -> dict[str, jax.Array]:
    """Every Weight's initial array, random ones with a key derived from `seed` and the name."""
    check_sizes(weights)
    return {name: w.initial_value(parameter_key(seed, name)) for name, w in weights.items()}


def check_sizes(weights: Mapping[str, Weight]) -> None:
    """ParameterError if these Weights have more than `MAX_PARAMETER_VALUES` values together."""
    total = 0
    for name, w in weights.items():
        total += math.prod(w.shape)
        if total > MAX_PARAMETER_VALUES:
            raise ParameterError(
                f"Weight {name!r} of shape {w.shape}{at(w.where)} takes the network's parameters "
                f"beyond {MAX_PARAMETER_VALUES} values; refusing to initialise them"
            )


def checked_params(
    weights: Mapping[str, Weight], params: Mapping[str, Any], what: str = "parameter"
) -> dict[str, jax.Array]:
    """Values of these Weights as arrays, after checking names and shapes (`what` names them in errors)."""
    if not isinstance(params, Mapping):
        raise ParameterError(f"{what} values must be a mapping of name -> array, got {type(params).__name__}")
    missing = [n for n in weights if n not in params]
    if missing:
        w = weights[missing[0]]
        raise ParameterError(f"missing {what}(s) {missing}: Weight {w!r}{at(w.where)}")
    unknown = [n for n in params if n not in weights]
    if unknown:
        raise ParameterError(f"unknown {what}(s) {unknown}; the network has {list(weights)}")
    out = {}
    for name, w in weights.items():
        value = params[name]
        if not hasattr(value, "shape"):
            try:
                value = jnp.asarray(value, dtype=jnp.result_type(float))
            except (TypeError, ValueError):
                raise ParameterError(f"{what} {name!r} is {value!r}, not an array") from None
        if tuple(value.shape) != w.shape:
            raise ParameterError(
                f"{what} {name!r} has shape {tuple(value.shape)}, but its Weight has shape {w.shape}{at(w.where)}"
            )
        out[name] = value
    return out
