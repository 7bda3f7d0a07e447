"""A network's static half (`Structure`: canonical outputs and Weights, the key of compiled computations),
and what the Index engine needs of a network (`NetworkLike`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import attrs

from .layer import Layer, Weight, canonicalize

if TYPE_CHECKING:
    import jax

__all__ = ["NetworkLike", "Structure"]


@attrs.frozen(cache_hash=True)
class Structure:
    """The static half of a network: canonical outputs and the parameters' Weights in name order.

    It keys caches (compiled computations, jitted steps) and is the static part
    of the `Network` pytree.
    """

    outputs: tuple[tuple[str, Layer], ...]
    weights: tuple[Weight, ...]
    #: The names of every Weight (parameters and state), of the trainable ones (`network.params`) and of the
    #: FixedWeights (`network.state`), in name order; computed once (flattening a Network reads them).
    names: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    param_names: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    state_names: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    @classmethod
    def of(cls, outputs: Mapping[str, Layer]) -> Structure:
        """The structure of these outputs: canonical (`layer.canonicalize`), its Weights in name order."""
        canonical, weights = canonicalize(outputs)
        return cls(tuple(canonical.items()), tuple(weights.values()))

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(w.name for w in self.weights))
        object.__setattr__(self, "param_names", tuple(w.name for w in self.weights if w.trainable))
        object.__setattr__(self, "state_names", tuple(w.name for w in self.weights if not w.trainable))


class NetworkLike(Protocol):
    """What the Index engine needs of a network: its `structure` (the layer graph, and the key of compiled
    computations) and its parameter and state arrays by name. `symnet.Network` is one."""

    @property
    def structure(self) -> Structure: ...

    @property
    def params(self) -> Mapping[str, jax.Array]: ...

    @property
    def state(self) -> Mapping[str, jax.Array]: ...
