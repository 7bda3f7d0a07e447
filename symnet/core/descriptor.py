"""Kaldi nnet3's descriptors as layers: they move data between rows labelled by Indexes.

A value inside the Index engine is a matrix whose rows are labelled by
Indexes `(n, t, x)`. Row-wise layers (Plus, Dot with a Weight, ReLU, ...) keep
the labels; descriptors read other rows. Their meaning at an output Index
`(n, t, x)`, exactly as in Kaldi (`nnet-descriptor.h`):

=====================  ==========================================  =======================================
descriptor             value at (n, t, x)                          computable when
=====================  ==========================================  =======================================
Offset(d, o, xo)       d at (n, t+o, x+xo)                         d is, there
Append(d1, ..., dk)    the columns of every di at (n, t, x)        every di is
Sum(d1, ..., dk)       the sum of every di at (n, t, x)            every di is
IfDefined(d)           d if d is computable there, else zeros      always
Failover(a, b)         a if a is computable there, else b          a or b is
Switch(d0, ..., dk-1)  d[t mod k] at (n, t, x)  (floor modulus)    that di is
Round(d, m)            d at (n, floor(t/m)*m, x)                   d is, there
ReplaceIndex(d, v, c)  d with t (or x) replaced by c               d is, there
Const(c, dim)          the vector of `dim` copies of c             always
Scale(s, d)            s times d                                   d is
DimRange(d, o, dim)    columns o .. o+dim-1 of d                   d is
=====================  ==========================================  =======================================

Any composition means what evaluating it Index by Index means; Python allows
more compositions than Kaldi's config grammar does.

`Input(name, dim)` is a named network input; `Node(name, d)` names a
sub-expression so that `Ref(name)` can refer to it from anywhere, including
from inside itself through a time offset (a recurrence).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import DescriptorError, ShapeError, at
from .formatting import Formatter
from .layer import Layer, child, children_field, layer_class
from .source import user_line

L = TypeVar("L", bound=Layer)


def _int(name: str) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise DescriptorError(f"{name} must be an integer, got {value!r}{at(user_line())}")
        return int(value)

    return convert


def _float(name: str) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise DescriptorError(f"{name} must be a number, got {value!r}{at(user_line())}")
        return float(value)

    return convert


def _variadic(cls: type[L]) -> type[L]:
    """Let `cls(a, b, c)` build the tuple field `parts` (attrs' own init takes one tuple)."""
    attrs_init: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009

    def __init__(self: L, *parts: Any, where: str | None = None, **fields: Any) -> None:
        parts = fields.pop("parts", parts)
        if not parts:
            raise DescriptorError(f"{cls.__name__} needs at least one part{at(where or user_line())}")
        attrs_init(self, parts, where=where or user_line(), **fields)

    __init__.__doc__ = cls.__doc__
    setattr(cls, "__init__", __init__)  # noqa: B010
    return cls


@layer_class
class Descriptor(Layer):
    """Base class of layers that read rows other than their own."""

    rowwise: ClassVar[bool] = False

    @property
    def role(self) -> str | None:
        """None: a descriptor is named by its expression (`Offset(h, -1)`), which says more than its kind."""
        return None


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise DescriptorError(f"a node name must be a non-empty string, got {value!r}{at(user_line())}")
    return value


@layer_class
class IndexedLayer(Descriptor):
    """Base of layers that read a set of operand rows for each output row (Kaldi's non-simple components).

    The first operand is the indexed input; further operands are weights.
    Subclasses say which input Indexes each output Index reads
    (`requirements`), when an output row is computable from which of those are
    (`computable_from`; by default when all are), and how the rows read make an
    output row (`apply_rows`). The engine plans, gathers and differentiates.
    """

    def requirements(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(input_keys, owner)`: every input Index (int64 key) an output row may read, and its row in `keys`."""
        raise NotImplementedError(type(self).__name__)

    def computable_from(self, available: np.ndarray, owner: np.ndarray, num_rows: int) -> np.ndarray:
        """Which output rows are computable, given which required input Indexes are."""
        needed = np.bincount(owner, minlength=num_rows)
        have = np.bincount(owner, weights=available, minlength=num_rows)
        computable: np.ndarray = have == needed
        return computable

    def reach(self) -> int:
        """The most frames between an output Index and an input Index it reads (bounds planning)."""
        raise NotImplementedError(type(self).__name__)

    def apply_rows(self, values: jnp.ndarray, owner: np.ndarray, num_rows: int, *weights: jnp.ndarray) -> jnp.ndarray:
        """Output rows `[num_rows, batch, dim]` from the available input rows read, `values [M, batch, dim]`,
        where `owner[i]` (a numpy constant) is the output row that `values[i]` belongs to."""
        raise NotImplementedError(type(self).__name__)


@layer_class
class Input(Descriptor):
    """A named network input of `dim` columns (Kaldi's `input-node`)."""

    name: str = attrs.field(converter=_name)
    dim: int = attrs.field(converter=_int("Input dim"))

    def __attrs_post_init__(self) -> None:
        if self.dim <= 0:
            raise DescriptorError(f"Input {self.name!r}: dim must be positive, got {self.dim}{at(self.where)}")

    @property
    def input_name(self) -> str | None:
        return self.name

    @property
    def output_dim(self) -> int | None:
        return self.dim

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"Input({self.name!r}, {self.dim})", Formatter.ATOM


@layer_class
class Node(Layer):
    """Names its operand as a network node, so `Ref(name)` can refer to it.

    A Node is row-wise and its value is its operand's: it only gives the
    sub-expression a name (for recurrences, configs, reading values off the Tape,
    and parameter names, which start with the enclosing node's name).
    """

    name: str = attrs.field(converter=_name)
    arg: Layer = child()

    @property
    def scope(self) -> str:  # type: ignore[override]
        """Parameter paths below a Node start from its name."""
        return self.name

    def apply(self, a: jax.Array) -> jax.Array:
        return a

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d,)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"Node({self.name!r}, {fmt.sub(self.arg, 0)})", Formatter.ATOM


@layer_class
class Ref(Descriptor):
    """A reference to the Node named `name`, resolved by the Network (may be a forward reference)."""

    name: str = attrs.field(converter=_name)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"Ref({self.name!r})", Formatter.ATOM


@layer_class
class Offset(Descriptor):
    """`arg` at `(n, t + t_offset, x + x_offset)`."""

    arg: Layer = child()
    t_offset: int = attrs.field(converter=_int("Offset t_offset"))
    x_offset: int = attrs.field(default=0, converter=_int("Offset x_offset"))


@_variadic
@layer_class
class Append(Descriptor):
    """Column-wise concatenation of the parts at the same Index."""

    parts: tuple[Layer, ...] = children_field()

    if TYPE_CHECKING:  # what `_variadic` makes of attrs' __init__

        def __init__(self, *parts: Any, where: str | None = None) -> None: ...


@_variadic
@layer_class
class Sum(Descriptor):
    """Elementwise sum of the parts at the same Index; computable where all are."""

    parts: tuple[Layer, ...] = children_field()

    if TYPE_CHECKING:  # what `_variadic` makes of attrs' __init__

        def __init__(self, *parts: Any, where: str | None = None) -> None: ...


@layer_class
class IfDefined(Descriptor):
    """`arg` where it is computable, zeros elsewhere; always computable."""

    arg: Layer = child()


@layer_class
class Failover(Descriptor):
    """`first` where it is computable, else `second`."""

    first: Layer = child()
    second: Layer = child()


@_variadic
@layer_class
class Switch(Descriptor):
    """At frame t, the part number `t mod k` (floor modulus, so t = -1 picks the last)."""

    parts: tuple[Layer, ...] = children_field()

    if TYPE_CHECKING:  # what `_variadic` makes of attrs' __init__

        def __init__(self, *parts: Any, where: str | None = None) -> None: ...


@layer_class
class Round(Descriptor):
    """`arg` at the frame `floor(t / t_modulus) * t_modulus` (also for negative t)."""

    arg: Layer = child()
    t_modulus: int = attrs.field(converter=_int("Round t_modulus"))

    def __attrs_post_init__(self) -> None:
        if self.t_modulus <= 0:
            raise DescriptorError(f"Round: t_modulus must be positive, got {self.t_modulus}{at(self.where)}")


@layer_class
class ReplaceIndex(Descriptor):
    """`arg` with the variable `t` or `x` of the Index replaced by `value`."""

    arg: Layer = child()
    variable: str
    value: int = attrs.field(converter=_int("ReplaceIndex value"))

    def __attrs_post_init__(self) -> None:
        if self.variable not in ("t", "x"):
            raise DescriptorError(f"ReplaceIndex replaces 't' or 'x', not {self.variable!r}{at(self.where)}")


@layer_class
class Const(Descriptor):
    """A constant row of `dim` copies of `value` at every Index."""

    value: float = attrs.field(converter=_float("Const value"))
    dim: int = attrs.field(converter=_int("Const dim"))

    def __attrs_post_init__(self) -> None:
        if self.dim <= 0:
            raise DescriptorError(f"Const: dim must be positive, got {self.dim}{at(self.where)}")


@layer_class
class Scale(Descriptor):
    """`scale` times `arg` (Kaldi's `Scale(scale, descriptor)`; the scale comes first)."""

    scale: float = attrs.field(converter=_float("Scale scale"))
    arg: Layer = child()

    rowwise: ClassVar[bool] = True

    def apply(self, a: jax.Array) -> jax.Array:
        return self.scale * a

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (self.scale * d,)


@layer_class
class DimRange(Descriptor):
    """Columns `offset .. offset + dim - 1` of `arg` (Kaldi's `dim-range-node`)."""

    arg: Layer = child()
    offset: int = attrs.field(converter=_int("DimRange offset"))
    dim: int = attrs.field(converter=_int("DimRange dim"))

    rowwise: ClassVar[bool] = True

    @property
    def role(self) -> str | None:
        """The column range, `[offset:offset + dim]`: a slice is named after what it slices (`gates[0:4]`)."""
        return f"[{self.offset}:{self.offset + self.dim}]"

    def __attrs_post_init__(self) -> None:
        if self.offset < 0 or self.dim <= 0:
            raise DescriptorError(
                f"DimRange: need offset >= 0 and dim > 0, got offset={self.offset}, dim={self.dim}{at(self.where)}"
            )

    def check(self, a: tuple[int, ...]) -> None:
        if not a or self.offset + self.dim > a[-1]:
            raise ShapeError(f"DimRange(offset={self.offset}, dim={self.dim}) of a value of shape {a}{at(self.where)}")

    def apply(self, a: jax.Array) -> jax.Array:
        return a[..., self.offset : self.offset + self.dim]

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        pad = [(0, 0)] * (a.ndim - 1) + [(self.offset, a.shape[-1] - self.offset - self.dim)]
        return (jnp.pad(d, pad),)
