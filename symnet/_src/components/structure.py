"""Components that rearrange rows or wrap other components.

DistributeComponent (nnet-general-component.cc)
    Splits each input row into `input_dim / output_dim` blocks of `output_dim`
    columns and gives block b of the input at `(n, t, x')` to the output at
    `(n, t, x)` with `x' = floor(x / num_blocks)` (floor also for negative x) and
    `b = x - x' * num_blocks`: one input row becomes `num_blocks` output rows
    with consecutive x. An output is computable where its input Index is.
    An IndexedLayer (it maps the Index variable x) behind a macro component.

CompositeComponent (nnet-simple-component.cc)
    A sequence of simple (row-wise) components applied one after the other,
    given in a config as `num-components=N component1='type=... ...' ...
    componentN='...'`. `max-rows-process` (4096) only bounds Kaldi's memory use,
    so it is kept as metadata. The parts are built with the names
    `{name}.component{i}` (so their parameters are
    `{name}.component{i}.linear_params`, ...), each with a placeholder input;
    `expand()` chains them on the real input.

SpecAugmentTimeMaskComponent (nnet-general-component.cc)
    Zeroes random runs of frames in training; in test mode (as nnet3-compute
    runs it) it is the identity. Training mode with a nonzero
    `zeroed-proportion` is a ComponentModeError for now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..base.errors import ComponentConfigError, ShapeError, at
from ..core.descriptor import IndexedLayer, Ref
from ..core.index import decode, encode
from ..core.layer import Layer, child, children_field, evolve, layer_class
from .base import Component, ComponentModeError, InOutDims, SameDim

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["CompositeComponent", "DistributeComponent", "PART_INPUT", "SpecAugmentTimeMaskComponent"]

# ----- DistributeComponent ------------------------------------------------------------------


@layer_class
class _Distribute(IndexedLayer):
    """The Index rules of DistributeComponent (see the module doc).

    Each output row reads one input row; which block of it is told by `owner`,
    which here is `row * num_blocks + block` (the engine passes owners through
    untouched to `computable_from` and `apply_rows`).
    """

    input: Layer = child()
    input_dim: int = 2
    output_dim: int = 1

    @property
    def num_blocks(self) -> int:
        return self.input_dim // self.output_dim

    def requirements(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, t, x = decode(keys)
        nb = self.num_blocks
        x_in = x // nb
        block = x - x_in * nb
        return encode(n, t, x_in), np.arange(len(keys)) * nb + block

    def computable_from(self, available: np.ndarray, owner: np.ndarray, num_rows: int) -> np.ndarray:
        return np.bincount(owner // self.num_blocks, weights=available, minlength=num_rows) > 0

    def reach(self) -> int:
        return 0

    def apply_rows(self, values: jax.Array, owner: np.ndarray, num_rows: int, *weights: jax.Array) -> jax.Array:
        if values.shape[-1] != self.input_dim:
            raise ShapeError(
                f"DistributeComponent: input dim is {values.shape[-1]}, expected {self.input_dim}{at(self.where)}"
            )
        nb, rows, block = self.num_blocks, owner // self.num_blocks, owner % self.num_blocks
        blocks = values.reshape(values.shape[:-1] + (nb, self.output_dim))
        picked = blocks[np.arange(len(owner)), :, block, :]  # [M, batch, output_dim]
        if len(rows) == num_rows and np.array_equal(rows, np.arange(num_rows)):
            return picked
        out = jnp.zeros((num_rows,) + picked.shape[1:], picked.dtype)
        return out.at[rows].set(picked)


@layer_class
class DistributeComponent(InOutDims, Component):
    """One input row at `(n, t, x')` becomes `input_dim / output_dim` output rows at `x = x' * k + b`.

    A macro layer: the engine plans `expand()`, an IndexedLayer with Kaldi's rules.
    """

    input: Layer = child()
    in_dim: int = 2
    out_dim: int = 1

    kaldi_type: ClassVar[str] = "DistributeComponent"
    rowwise: ClassVar[bool] = False

    def expand(self) -> Layer:
        return _Distribute(self.input, self.in_dim, self.out_dim, where=self.where)


# ----- CompositeComponent ------------------------------------------------------------------------

#: The input every part of a CompositeComponent is built with; `expand()` replaces it.
PART_INPUT = Ref("_composite_part_input_", where=None)


@layer_class
class CompositeComponent(Component):
    """A sequence of simple components (`parts`, each built on `PART_INPUT`) applied to `input` in turn.

    A macro layer: `expand()` is the chain of the parts on the real input.
    """

    input: Layer = child()
    parts: tuple[Layer, ...] = children_field()
    max_rows_process: int = 4096

    kaldi_type: ClassVar[str] = "CompositeComponent"
    rowwise: ClassVar[bool] = False

    def _part(self, i: int) -> Component:
        part = self.parts[i]
        if not isinstance(part, Component):
            raise ComponentConfigError(
                f"part {i % len(self.parts)} is a {type(part).__name__}, not a component{at(self.where)}",
                component=self.name,
                type=self.kaldi_type,
            )
        return part

    @property
    def input_dim(self) -> int:
        return self._part(0).input_dim

    @property
    def output_dim(self) -> int:
        return self._part(-1).output_dim

    def expand(self) -> Layer:
        x = self.input
        for part in self.parts:
            x = evolve(part, input=x)
        return x


# ----- SpecAugmentTimeMaskComponent -----------------------------------------------------------


@layer_class
class SpecAugmentTimeMaskComponent(SameDim, Component):
    """Test mode (or zeroed-proportion 0): the identity. Training mode: not yet."""

    input: Layer = child()
    dim: int = 1
    zeroed_proportion: float = 0.25
    time_mask_max_frames: int = 10
    test_mode: bool = False

    kaldi_type: ClassVar[str] = "SpecAugmentTimeMaskComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        if self.test_mode or self.zeroed_proportion == 0.0:
            return x
        raise ComponentModeError(
            f"SpecAugmentTimeMaskComponent {self.name!r} in training mode needs random time masks, which symnet "
            "does not support yet; run it in test mode (symnet.components.set_test_mode)"
        )

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (delta,)
