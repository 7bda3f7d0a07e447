"""The common machinery of Kaldi nnet3 components as symnet layers.

A component is a layer whose operands are its input and its parameters (as
`Weight` layers, named `f"{component_name}.{param}"` after Kaldi's tokens:
`<LinearParams>` -> `linear_params`), whose hyper-parameters are plain fields,
and whose Kaldi metadata (learning rates, max-change, l2-regularize,
natural-gradient ranks, self-repair settings...) sits in the frozen `options`
field so that it survives a round trip; `symnet.train.kaldi_rules` reads the
training options from there.

Values are matrices whose last axis is the feature dimension; every leading
axis is a row axis (a plain `[N, D]` batch or the engine's `[R, B, D]`).

Building components from Kaldi's config options, and reading and writing
them in model files, is `symnet._src.kaldi.components`' job (one record per Kaldi
type); this package only holds the layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from ..base.errors import ComponentConfigError, ComponentModeError, ShapeError, UnknownShapeError, at
from ..core.frozen import FrozenArray
from ..core.layer import FixedWeight, Layer, Literal, Weight, layer_class

if TYPE_CHECKING:
    import jax
else:
    from ..core.lazyjax import jax

# ----- parameters ------------------------------------------------------------------


def shape_of(layer: Layer) -> tuple[int, ...] | None:
    """The static shape of a Weight or Literal operand, else None (unknown until run)."""
    if isinstance(layer, Weight):
        return layer.shape
    if isinstance(layer, Literal):
        return tuple(np.shape(layer.value.array)) if isinstance(layer.value, FrozenArray) else ()
    return None


def known_shape(layer: Component, field: str) -> tuple[int, ...]:
    """The static shape of a component's parameter operand `field`; UnknownShapeError when it is
    not a Weight or Literal (its shape is known only when run)."""
    shape = shape_of(getattr(layer, field))
    if shape is None:
        raise UnknownShapeError(
            f"{type(layer).__name__} {layer.name!r}: the shape of {field} is not known before running"
        )
    return shape


# ----- options ---------------------------------------------------------------------


def _freeze_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze_value(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    return value


def freeze_options(value: Any) -> tuple[tuple[str, Any], ...]:
    """Options as a tuple of `(key, value)` pairs (hashable, order kept)."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), _freeze_value(v)) for k, v in items)


# ----- the component base class ----------------------------------------------------------


def auto_vjp(layer: Layer, delta: jax.Array, *args: jax.Array) -> tuple[jax.Array, ...]:
    """The deltas of all operands by JAX's own transpose of `layer.apply`."""
    _, pullback = jax.vjp(layer.apply, *args)
    return pullback(delta)


def rows_sum(delta: jax.Array) -> jax.Array:
    """Sum over every leading (row) axis, keeping the last (feature) axis."""
    return delta.reshape(-1, delta.shape[-1]).sum(axis=0)


def rows_matmul_t(a: jax.Array, b: jax.Array) -> jax.Array:
    """`sum over rows of a[row, :]^T b[row, :]`: `[A] x [B] -> [A, B]`, over all leading axes."""
    return a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])


@layer_class
class Component(Layer):
    """Base class of Kaldi components: `name` is Kaldi's component name.

    Subclasses put their input first among their operands, then their
    parameters; `options` holds Kaldi metadata symnet does not interpret.
    """

    name: str
    options: tuple[tuple[str, Any], ...] = attrs.field(factory=tuple, converter=freeze_options, kw_only=True)

    #: Kaldi's type name, e.g. "AffineComponent".
    kaldi_type: ClassVar[str] = ""
    #: The Kaldi token (lower-cased) of each parameter operand, in operand order.
    param_fields: ClassVar[tuple[str, ...]] = ()
    #: Whether the component reads its input at all. Kaldi's ConstantComponent and DropoutMaskComponent
    #: do not (their nodes are written `input=<the node itself>`): such a component's input is kept for
    #: writing the node line, and `expand()` leaves it out, so no cycle or dependency comes from it.
    reads_input: ClassVar[bool] = True

    @property
    def own_name(self) -> str | None:
        return self.name

    @property
    def input_dim(self) -> int:
        raise NotImplementedError(type(self).__name__)

    @property
    def output_dim(self) -> int:
        raise NotImplementedError(type(self).__name__)

    @property
    def matrixwise(self) -> bool:
        """Whether an output row depends on other rows (batch-norm in training mode): the engine must
        then give it exactly the rows of one minibatch (no padding rows, no chunking)."""
        return False

    @property
    def parameters(self) -> dict[str, Layer]:
        """Kaldi's parameter name (lower case) -> its operand layer (a Weight, normally)."""
        return {f: getattr(self, f) for f in self.param_fields}

    def option(self, key: str, default: Any = None) -> Any:
        """The value of a metadata option (Kaldi's config name, e.g. 'learning-rate')."""
        for k, v in self.options:
            if k == key:
                return v
        return default

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each parameter must have."""
        return {}

    def check(self, *shapes: tuple[int, ...]) -> None:
        where = at(self.where)
        label = f"{type(self).__name__} {self.name!r}"
        try:
            input_dim, expected = self.input_dim, self.param_shapes()
        except UnknownShapeError:  # a parameter operand that is not a Weight: shapes known only when run
            return
        x = shapes[0]
        if not x:
            raise ShapeError(f"{label}: the input must be a matrix (rows x {input_dim}), got a scalar{where}")
        if x[-1] != input_dim:
            raise ShapeError(f"{label}: input dim is {x[-1]}, expected {input_dim}{where}")
        for field, shape in zip(self.param_fields, shapes[1:]):
            want = expected.get(field)
            if want is not None and tuple(shape) != tuple(want):
                raise ShapeError(f"{label}: parameter {field} has shape {tuple(shape)}, expected {tuple(want)}{where}")


class SameDim:
    """Mixin of a component whose input and output dim is its `dim` field, which the component declares (after
    its operands, so that Kaldi's readers build it positionally in its own field order)."""

    __slots__ = ()
    dim: int

    @property
    def input_dim(self) -> int:
        return self.dim

    @property
    def output_dim(self) -> int:
        return self.dim


class InOutDims:
    """Mixin of a component whose input and output dims are its `in_dim` and `out_dim` fields (declared by it)."""

    __slots__ = ()
    in_dim: int
    out_dim: int

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return self.out_dim


def param_name(component: str, field: str) -> str:
    """The parameter name of a component's parameter: `affine1.linear_params`."""
    return f"{component}.{field}"


__all__ = [
    "Component",
    "ComponentConfigError",
    "ComponentModeError",
    "FixedWeight",
    "InOutDims",
    "auto_vjp",
    "freeze_options",
    "known_shape",
    "param_name",
    "rows_matmul_t",
    "rows_sum",
    "SameDim",
    "shape_of",
]
