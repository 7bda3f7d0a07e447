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

Each descriptor class carries its own semantics, as Kaldi's descriptor classes
do (`GetDependencies`, `IsComputable`, `Modulus`): the engine asks it and never
switches on its type. The questions, with their defaults (operands read at the
same Index, all needed, their rows summed):

- `map_keys(keys)`: the Index each output Index reads in its operands (Offset,
  Round, ReplaceIndex move it);
- `selects(keys, count)`: which rows read which operand at all (Switch);
- `rule`: when a row is computable and which operands it then reads
  (`Rule.ALL`, `Rule.OPTIONAL` for IfDefined and Const, `Rule.FIRST` for Failover);
- `combine`: how the rows read make the output row (`Combine`), and
  `constant(shape, dtype)` for `Combine.CONST`;
- `time_reach()`, `time_modulus()`, `time_offset()`, `fixed_time()`: how far and
  how it moves in time (planning windows, contexts, padding);
- `column_range()`: the columns a DimRange takes (fused backward passes), and
  `scale_factor()`: the factor a Scale multiplies by (Kaldi's per-node scales);
- `kaldi_name` and `kaldi_args()`: its name and arguments in Kaldi's descriptor
  grammar (None: not part of it), and `label()`: a short name for displays.

`IndexedLayer` (components that read many rows per output row) answers other
questions (`requirements`, `computable_from`, `apply_rows`); the engine asks
which of the two protocols a layer speaks with `isinstance(layer, IndexedLayer)`,
and whether a layer is a network input with `isinstance(layer, Input)`:
category questions, not switches on the concrete kind. A user-defined
descriptor subclasses `Descriptor` and overrides what differs
(docs/extending.md).
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
import numpy as np

from ..base.errors import DescriptorError, ShapeError, at
from .formatting import Formatter, number_text
from .index import decode, encode, shift
from .layer import Layer, child, children_field, layer_class
from .source import user_line

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = [
    "Append",
    "Combine",
    "Const",
    "Descriptor",
    "DimRange",
    "Failover",
    "IfDefined",
    "IndexedLayer",
    "Input",
    "Node",
    "node_name",
    "Offset",
    "Ref",
    "ReplaceIndex",
    "Round",
    "Rule",
    "Scale",
    "Sum",
    "Switch",
]

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


class Rule(enum.Enum):
    """When a descriptor's row is computable, and which operand rows it then reads."""

    #: Computable where every operand it selects is; reads them all (Offset, Append, Sum, Switch, ...).
    ALL = "all"
    #: Always computable; reads each operand where that is computable, zeros elsewhere (IfDefined, Const).
    OPTIONAL = "optional"
    #: Computable where some operand is; reads the first that is (Failover). With sequence ends, every one
    #: that is (each sequence masks its reads).
    FIRST = "first"


class Combine(enum.Enum):
    """How a descriptor makes an output row from the operand rows it reads (rows not read are zeros)."""

    FORWARD = "forward"  # its one operand's row
    APPEND = "append"  # the operands' rows side by side
    SUM = "sum"  # the sum of the operands' rows (of equal dims)
    CONST = "const"  # no operand: `constant(shape, dtype)`


@layer_class
class Descriptor(Layer):
    """Base class of layers that read rows other than their own; subclasses say how (see the module doc)."""

    rowwise: ClassVar[bool] = False
    rule: ClassVar[Rule] = Rule.ALL
    combine: ClassVar[Combine] = Combine.SUM

    def map_keys(self, keys: np.ndarray) -> np.ndarray:
        """The Index (int64 key) every output Index reads in the operands; raises PlanError (from
        `symnet._src.core.index`) for one outside the Index range."""
        return keys

    def selects(self, keys: np.ndarray, count: int) -> Sequence[np.ndarray] | None:
        """Per operand, which of `keys` read it at all (None: every row reads every operand)."""
        return None

    def constant(self, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        """The value of a `Combine.CONST` descriptor, `shape[:-1]` rows of its dim (`shape[-1]`)."""
        raise NotImplementedError(type(self).__name__)

    def time_reach(self) -> int:
        """The most frames between an output Index and an operand Index it reads (bounds planning)."""
        return 0

    def time_modulus(self) -> int:
        """A period in t of what it reads, relative to t (Round's modulus, Switch's size; 1: none)."""
        return 1

    def time_offset(self) -> int | None:
        """The constant number of frames it reads away from t, if it is one (an Offset's t offset)."""
        return 0 if type(self).map_keys is Descriptor.map_keys else None

    def fixed_time(self) -> int | None:
        """The frame it reads at whatever t is (ReplaceIndex of t), or None."""
        return None

    def shifts_time(self) -> bool:
        """Whether it may read its operands at another frame than its own."""
        return self.time_offset() != 0

    def column_range(self) -> tuple[int, int] | None:
        """`(offset, dim)` if its value is those columns of its operand (DimRange), else None."""
        return None

    def scale_factor(self) -> float | None:
        """The factor it multiplies its one operand by, if that is all it does (Scale), else None."""
        return None

    #: Its name in Kaldi's descriptor grammar, whose arguments are `kaldi_args()`; None: Kaldi has no such descriptor.
    kaldi_name: ClassVar[str | None] = None

    def kaldi_args(self) -> tuple[Any, ...]:
        """Its arguments as Kaldi writes them: its fields in order, operands as layers, the others as values."""
        args: list[Any] = []
        for f in attrs.fields(type(self)):
            if not f.init or f.kw_only:
                continue
            value = getattr(self, f.name)
            args.extend(value if f.metadata.get("children") else (value,))
        return tuple(args)

    def label(self) -> str:
        """A short one-line name for displays: its kind and what distinguishes it."""
        return type(self).__name__

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

    def time_reach(self) -> int:
        return self.reach()

    def time_offset(self) -> int | None:
        return None

    def shifts_time(self) -> bool:
        return False  # a cycle through it with no Offset is refused, as one with no time offset

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

    def label(self) -> str:
        return f"Input {self.name!r} dim {self.dim}"


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

    def label(self) -> str:
        return f"Ref {self.name!r}"


def node_name(layer: Layer) -> str | None:
    """The network node `layer` stands for by name (an `Input`, a `Node`, or a `Ref` to one), else None: what a
    Kaldi descriptor refers to as a node-name leaf."""
    return layer.name if isinstance(layer, (Input, Node, Ref)) else None


@layer_class
class Offset(Descriptor):
    """`arg` at `(n, t + t_offset, x + x_offset)`."""

    arg: Layer = child()
    t_offset: int = attrs.field(converter=_int("Offset t_offset"))
    x_offset: int = attrs.field(default=0, converter=_int("Offset x_offset"))

    combine: ClassVar[Combine] = Combine.FORWARD
    kaldi_name: ClassVar[str | None] = "Offset"

    def map_keys(self, keys: np.ndarray) -> np.ndarray:
        return shift(keys, self.t_offset, self.x_offset)

    def label(self) -> str:
        t = f"t{self.t_offset:+d}" if self.t_offset else "t"
        x = f", x{self.x_offset:+d}" if self.x_offset else ""
        return f"Offset {t}{x}"

    def time_reach(self) -> int:
        return abs(self.t_offset)

    def time_offset(self) -> int | None:
        return self.t_offset


@_variadic
@layer_class
class Append(Descriptor):
    """Column-wise concatenation of the parts at the same Index."""

    parts: tuple[Layer, ...] = children_field()

    combine: ClassVar[Combine] = Combine.APPEND
    kaldi_name: ClassVar[str | None] = "Append"

    if TYPE_CHECKING:  # what `_variadic` makes of attrs' __init__

        def __init__(self, *parts: Any, where: str | None = None) -> None: ...


@_variadic
@layer_class
class Sum(Descriptor):
    """Elementwise sum of the parts at the same Index; computable where all are."""

    parts: tuple[Layer, ...] = children_field()

    kaldi_name: ClassVar[str | None] = "Sum"

    if TYPE_CHECKING:  # what `_variadic` makes of attrs' __init__

        def __init__(self, *parts: Any, where: str | None = None) -> None: ...


@layer_class
class IfDefined(Descriptor):
    """`arg` where it is computable, zeros elsewhere; always computable."""

    arg: Layer = child()

    rule: ClassVar[Rule] = Rule.OPTIONAL
    combine: ClassVar[Combine] = Combine.FORWARD
    kaldi_name: ClassVar[str | None] = "IfDefined"


@layer_class
class Failover(Descriptor):
    """`first` where it is computable, else `second`."""

    first: Layer = child()
    second: Layer = child()

    rule: ClassVar[Rule] = Rule.FIRST
    kaldi_name: ClassVar[str | None] = "Failover"


@_variadic
@layer_class
class Switch(Descriptor):
    """At frame t, the part number `t mod k` (floor modulus, so t = -1 picks the last)."""

    parts: tuple[Layer, ...] = children_field()

    kaldi_name: ClassVar[str | None] = "Switch"

    def selects(self, keys: np.ndarray, count: int) -> Sequence[np.ndarray]:
        which = decode(keys)[1] % count
        return [which == i for i in range(count)]

    def time_modulus(self) -> int:
        return len(self.parts)

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

    combine: ClassVar[Combine] = Combine.FORWARD
    kaldi_name: ClassVar[str | None] = "Round"

    def map_keys(self, keys: np.ndarray) -> np.ndarray:
        n, t, x = decode(keys)
        return encode(n, (t // self.t_modulus) * self.t_modulus, x)

    def label(self) -> str:
        return f"Round {self.t_modulus}"

    def time_reach(self) -> int:
        return self.t_modulus

    def time_modulus(self) -> int:
        return self.t_modulus

    def time_offset(self) -> int | None:
        return 0 if self.t_modulus == 1 else None


@layer_class
class ReplaceIndex(Descriptor):
    """`arg` with the variable `t` or `x` of the Index replaced by `value`."""

    arg: Layer = child()
    variable: str
    value: int = attrs.field(converter=_int("ReplaceIndex value"))

    def __attrs_post_init__(self) -> None:
        if self.variable not in ("t", "x"):
            raise DescriptorError(f"ReplaceIndex replaces 't' or 'x', not {self.variable!r}{at(self.where)}")

    combine: ClassVar[Combine] = Combine.FORWARD
    kaldi_name: ClassVar[str | None] = "ReplaceIndex"

    def label(self) -> str:
        return f"ReplaceIndex {self.variable}={self.value}"

    def map_keys(self, keys: np.ndarray) -> np.ndarray:
        n, t, x = decode(keys)
        if self.variable == "t":
            t = np.full_like(t, self.value)
        else:
            x = np.full_like(x, self.value)
        return encode(n, t, x)

    def time_offset(self) -> int | None:
        return None if self.variable == "t" else 0

    def fixed_time(self) -> int | None:
        return self.value if self.variable == "t" else None


@layer_class
class Const(Descriptor):
    """A constant row of `dim` copies of `value` at every Index."""

    value: float = attrs.field(converter=_float("Const value"))
    dim: int = attrs.field(converter=_int("Const dim"))

    def __attrs_post_init__(self) -> None:
        if self.dim <= 0:
            raise DescriptorError(f"Const: dim must be positive, got {self.dim}{at(self.where)}")

    rule: ClassVar[Rule] = Rule.OPTIONAL
    combine: ClassVar[Combine] = Combine.CONST
    kaldi_name: ClassVar[str | None] = "Const"

    def label(self) -> str:
        return f"Const {number_text(self.value)} dim {self.dim}"

    @property
    def output_dim(self) -> int | None:
        return self.dim

    def constant(self, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        return jnp.full(shape, self.value, dtype=dtype)


@layer_class
class Scale(Descriptor):
    """`scale` times `arg` (Kaldi's `Scale(scale, descriptor)`; the scale comes first)."""

    scale: float = attrs.field(converter=_float("Scale scale"))
    arg: Layer = child()

    rowwise: ClassVar[bool] = True
    kaldi_name: ClassVar[str | None] = "Scale"

    def scale_factor(self) -> float | None:
        return self.scale

    def label(self) -> str:
        return f"Scale {number_text(self.scale)}"

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

    @property
    def output_dim(self) -> int | None:
        return self.dim

    def column_range(self) -> tuple[int, int] | None:
        return self.offset, self.dim

    def label(self) -> str:
        return f"DimRange {self.offset}:{self.offset + self.dim}"

    def check(self, a: tuple[int, ...]) -> None:
        if not a or self.offset + self.dim > a[-1]:
            raise ShapeError(f"DimRange(offset={self.offset}, dim={self.dim}) of a value of shape {a}{at(self.where)}")

    def apply(self, a: jax.Array) -> jax.Array:
        return a[..., self.offset : self.offset + self.dim]

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        pad = [(0, 0)] * (a.ndim - 1) + [(self.offset, a.shape[-1] - self.offset - self.dim)]
        return (jnp.pad(d, pad),)
