"""One Network as a header entry and back: its layers, outputs, parameters, state and objectives.

    {"layers": [{"class": "Input", "fields": {"name": "input", "dim": 4}}, ...],
     "outputs": [["output", 3]], "params": {"weight": 0}, "state": {}, "objectives": {"output": "linear"}}

`layers` lists every distinct layer once, operands first
(`symnet._src.saving.structure`); `outputs` names the entry of each output,
`params` and `state` the array of each Weight's value, `objectives` the
outputs' objectives (a version-1 file has null for none). Version 1 of the
format is this entry at the top level of the header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..base.errors import ModelFormatError, SymnetError
from ..network import Network
from .structure import check_mapping, decode_outputs, encode_layers

__all__ = ["decode_network", "encode_network"]


def encode_network(net: Network, arrays: list[np.ndarray]) -> dict[str, Any]:
    """The entry of `net`; its arrays (FrozenArrays, then parameters and state) are appended to `arrays`."""
    names = [name for name, _ in net.structure.outputs]
    layers, roots = encode_layers([layer for _, layer in net.structure.outputs], arrays)

    def values(mapping: Mapping[str, Any]) -> dict[str, int]:
        out = {}
        for name, value in mapping.items():
            out[name] = len(arrays)
            arrays.append(np.asarray(value))
        return out

    return {
        "layers": layers,
        "outputs": [[name, k] for name, k in zip(names, roots, strict=True)],
        "params": values(net.params),
        "state": values(net.state),
        "objectives": dict(net.objectives),
    }


def decode_network(
    entry: Mapping[str, Any], arrays: Sequence[np.ndarray], fail: Callable[[str], ModelFormatError], origin: str
) -> Network:
    """The Network of an entry `encode_network` wrote (or a version-1 header); `fail` makes each error."""
    outputs, objectives = decode_outputs(entry, arrays, fail, origin)
    values = {}
    for half in ("params", "state"):
        named = check_mapping(entry.get(half), half, fail)
        for name, k in named.items():
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(arrays):
                raise fail(f"the header's {half} entry {name!r} names no array ({k!r})")
        values[half] = {name: jnp.asarray(arrays[k]) for name, k in named.items()}
    try:
        return Network(outputs, params=values["params"], state=values["state"], objectives=objectives)
    except SymnetError as e:
        raise fail(f"the stored network does not build: {e}") from None
