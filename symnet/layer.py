"""Layers: immutable, hashable expression trees built with Python operators.

A layer is a value. `(1.0 + x) * Weight(2.0)` builds
`Times(Plus(Literal(1.0), Identity()), Weight(2.0))`; nothing is computed
until `forward`. Layers compare and hash structurally (they key caches and are
static arguments of `jax.jit`), record the file and line where the user built
them, and never overload `==` as a graph operation.

Each layer class says how to compute its value from its operands' values
(`apply`) and how to pull a delta back to its operands (`vjp`): the Tape
(`symnet.tape`) calls these. Apply and vjp work on plain arrays and on the
engine's `[rows, batch, dim]` arrays alike, so row-wise layers keep row labels.
"""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any, ClassVar, Iterator

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from .errors import LayerTypeError, ShapeError, at
from .frozen import FrozenArray
from .initializers import Initializer

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_line() -> str | None:
    """The `file:line` of the innermost caller outside symnet (and attrs' generated code)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_PACKAGE_DIR) or filename.startswith("<attrs")):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def child(**kwargs: Any) -> Any:
    """An attrs field holding an operand layer (numbers and arrays become `Literal`)."""
    return attrs.field(converter=as_layer, metadata={"child": True}, **kwargs)


def children_field(**kwargs: Any) -> Any:
    """An attrs field holding a tuple of operand layers."""
    return attrs.field(converter=_as_layers, metadata={"children": True}, **kwargs)


def layer_class(cls: type | None = None, **options: Any) -> Any:
    """The decorator of every layer class: frozen, slotted, structural eq/hash (cached).

    `==` is attrs' structural equality, except that it compares a DAG once per
    pair of nodes (see `_layer_eq`), not once per path.
    """
    options = {"slots": True, "cache_hash": True, "repr": False, **options}

    def make(c: type) -> type:
        c = attrs.frozen(c, **options)
        if options.get("eq", True) is not False:
            c.__eq__ = _layer_eq
        return c

    if cls is None:
        return make
    return make(cls)


def _layer_eq(self: Layer, other: Any) -> Any:
    """attrs' structural `==`, walking shared sub-trees once.

    attrs' generated `__eq__` recurses into both operands of every node, so two
    separately built trees with shared sub-expressions (`h = h + h`, 60 times)
    took time exponential in the depth; `jax.jit` compares the static part of
    its arguments this way on every cache hit of a rebuilt Network. Here every
    pair of nodes is compared once, and cached hashes reject most inequalities
    at once.
    """
    if self is other:
        return True
    if other.__class__ is not self.__class__:
        return NotImplemented
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Any, Any]] = [(self, other)]
    while stack:
        a, b = stack.pop()
        if a is b:
            continue
        key = (id(a), id(b))
        if key in seen:
            continue
        seen.add(key)
        if a.__class__ is not b.__class__ or hash(a) != hash(b):
            return False
        for field in attrs.fields(a.__class__):
            if not field.eq:
                continue
            u, v = getattr(a, field.name), getattr(b, field.name)
            if field.metadata.get("child"):
                stack.append((u, v))
            elif field.metadata.get("children"):
                if len(u) != len(v):
                    return False
                stack.extend(zip(u, v))
            else:
                if field.eq_key is not None:
                    u, v = field.eq_key(u), field.eq_key(v)
                if not (u == v):
                    return False
    return True

# Operator precedences for repr, as in Python's grammar.
_ATOM, _POWER, _UNARY, _PRODUCT, _SUM = 9, 7, 6, 5, 4


@layer_class
class Layer:
    """Base class of every node in a symnet expression tree."""

    where: str | None = attrs.field(kw_only=True, eq=False, factory=_user_line)

    # ----- structure -------------------------------------------------------

    @property
    def children(self) -> tuple[Layer, ...]:
        """The operand layers, in field order."""
        out: list[Layer] = []
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if field.metadata.get("child"):
                out.append(value)
            elif field.metadata.get("children"):
                out.extend(value)
        return tuple(out)

    def named_children(self) -> Iterator[tuple[str, Layer]]:
        """`(path_component, layer)` pairs: field names, with `[i]` for tuple fields."""
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if field.metadata.get("child"):
                yield field.name, value
            elif field.metadata.get("children"):
                for i, item in enumerate(value):
                    yield f"{field.name}{i}", item

    def with_children(self, new_children: tuple[Layer, ...]) -> Layer:
        """A copy with the operands replaced (same order as `children`), keeping `where`."""
        changes: dict[str, Any] = {}
        it = iter(new_children)
        for field in attrs.fields(type(self)):
            if field.metadata.get("child"):
                changes[field.name] = next(it)
            elif field.metadata.get("children"):
                changes[field.name] = tuple(next(it) for _ in getattr(self, field.name))
        if all(a is b for a, b in zip(new_children, self.children)):
            return self
        return attrs.evolve(self, **changes)

    # ----- evaluation --------------------------------------------------------

    #: Whether the layer computes each row from the same row of its operands
    #: (so it keeps the engine's row labels). Descriptors override this.
    rowwise: ClassVar[bool] = True

    def apply(self, *args: jax.Array) -> jax.Array:
        """The value from the operands' values."""
        raise NotImplementedError(type(self).__name__)

    def vjp(self, delta: jax.Array, value: jax.Array, *args: jax.Array) -> tuple[jax.Array | None, ...]:
        """The deltas of the operands, given this layer's delta, value and operand values."""
        raise NotImplementedError(type(self).__name__)

    def check(self, *shapes: tuple[int, ...]) -> None:
        """Raise ShapeError if operands of these shapes cannot be combined."""

    def forward(self, input: Any = None, params: Any = None) -> Any:
        """Evaluate on `input` (a Tape, a Literal, a number or an array) and return the Tape.

        Weights take their initial values unless `params` (name -> array) is given.
        Equivalent to `Network(self).forward(input, params)`.
        """
        from .network import Network

        return Network(self).forward(input, params)

    # ----- operators ---------------------------------------------------------

    def __add__(self, other: Any) -> Layer:
        return Plus(self, other, where=_user_line())

    def __radd__(self, other: Any) -> Layer:
        return Plus(other, self, where=_user_line())

    def __sub__(self, other: Any) -> Layer:
        return Minus(self, other, where=_user_line())

    def __rsub__(self, other: Any) -> Layer:
        return Minus(other, self, where=_user_line())

    def __mul__(self, other: Any) -> Layer:
        return Times(self, other, where=_user_line())

    def __rmul__(self, other: Any) -> Layer:
        return Times(other, self, where=_user_line())

    def __truediv__(self, other: Any) -> Layer:
        return Divide(self, other, where=_user_line())

    def __rtruediv__(self, other: Any) -> Layer:
        return Divide(other, self, where=_user_line())

    def __matmul__(self, other: Any) -> Layer:
        return Dot(self, other, where=_user_line())

    def __rmatmul__(self, other: Any) -> Layer:
        return Dot(other, self, where=_user_line())

    def __neg__(self) -> Layer:
        return Negate(self, where=_user_line())

    def __pos__(self) -> Layer:
        return self

    def __pow__(self, exponent: Any) -> Layer:
        return Power(self, exponent, where=_user_line())

    def __rpow__(self, base: Any) -> Layer:
        raise LayerTypeError(
            f"cannot raise {base!r} to the power of a layer; only `layer ** constant` is supported{at(_user_line())}"
        )

    __array_priority__ = 1000  # numpy arrays on the left defer to our operators

    # ----- display -----------------------------------------------------------

    def __repr__(self) -> str:
        return _Formatter().top(self)

    def _repr_html_(self) -> str:
        """The expression tree, foldable, for notebooks (see `symnet.display`)."""
        from .display import layer_html

        return layer_html(self)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        """The expression text and its precedence; the default is a call `Name(args)`."""
        args = [fmt.arg(getattr(self, f.name), f) for f in attrs.fields(type(self)) if f.init and not f.kw_only]
        return f"{type(self).__name__}({', '.join(a for a in args if a is not None)})", _ATOM


class _Formatter:
    """Prints a layer as the Python expression that builds it, within a length budget.

    The budget keeps repr finite on DAGs whose tree expansion is exponential.
    """

    def __init__(self, budget: int = 4000):
        self.budget = budget

    def top(self, layer: Layer) -> str:
        return self.sub(layer, 0)

    def sub(self, layer: Layer, min_prec: int) -> str:
        if self.budget <= 0:
            return "…"
        text, prec = layer._format(self)
        self.budget -= len(text)
        return f"({text})" if prec < min_prec else text

    def arg(self, value: Any, field: attrs.Attribute) -> str | None:
        if isinstance(value, Layer):
            return self.sub(value, 0)
        if isinstance(value, tuple) and field.metadata.get("children"):
            return ", ".join(self.sub(v, 0) for v in value)
        if field.default is not attrs.NOTHING and value == field.default:
            return None
        return f"{field.name}={value!r}" if field.default is not attrs.NOTHING else repr(value)


def _as_layers(values: Any) -> tuple[Layer, ...]:
    return tuple(as_layer(v) for v in values)


def as_layer(value: Any) -> Layer:
    """A layer as it is; a number or numeric array as a `Literal`; anything else is an error."""
    if isinstance(value, Layer):
        return value
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, jax.Array)) and not isinstance(value, bool):
        return Literal(value, where=_user_line())
    raise LayerTypeError(
        f"cannot use {value!r} (a {type(value).__name__}) as a layer operand; "
        f"expected a Layer, a number or a numeric array{at(_user_line())}"
    )


def _literal_value(value: Any) -> float | FrozenArray:
    if isinstance(value, FrozenArray):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.ndarray)):
        return float(value)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        try:
            return FrozenArray(np.asarray(value))
        except TypeError as e:
            raise LayerTypeError(f"cannot make a Literal of {value!r}: {e}{at(_user_line())}") from None
    raise LayerTypeError(f"cannot make a Literal of {value!r} (a {type(value).__name__}){at(_user_line())}")


def constant_array(value: float | FrozenArray) -> jax.Array:
    """A stored constant as a JAX array of the default float type (float64 under x64)."""
    dtype = jnp.result_type(float)
    if isinstance(value, FrozenArray):
        return jnp.asarray(value.array, dtype=dtype)
    return jnp.asarray(value, dtype=dtype)


def unbroadcast(delta: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Sum `delta` down to `shape`: the transpose of broadcasting to delta's shape."""
    if delta.shape == tuple(shape):
        return delta
    extra = delta.ndim - len(shape)
    delta = delta.sum(axis=tuple(range(extra))) if extra > 0 else delta
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and delta.shape[i] != 1)
    if axes:
        delta = delta.sum(axis=axes, keepdims=True)
    return delta.reshape(shape)


# ----- leaves -------------------------------------------------------------------


@layer_class
class Identity(Layer):
    """The input placeholder: its value is whatever the network is given."""

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        return "x", _ATOM


@layer_class
class Literal(Layer):
    """A constant: a number or an array (stored frozen, so the tree stays hashable)."""

    value: float | FrozenArray = attrs.field(converter=_literal_value)

    @property
    def array(self) -> jax.Array:
        return constant_array(self.value)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        return f"Literal({self.value!r})", _ATOM


class _Token:
    """The identity of an unnamed Weight: two `Weight(2.0)` calls are two parameters."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<token>"


def _check_name(name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise LayerTypeError(f"a Weight's name must be a non-empty string or None, got {name!r}{at(_user_line())}")


def _weight_init(value: Any) -> float | FrozenArray | Initializer:
    if isinstance(value, Initializer):
        return value
    return _literal_value(value)


@layer_class
class Weight(Layer):
    """A trainable parameter. The tree stores its initialiser, never its array.

    `init` is a number, an array, or an `Initializer` (`Normal((3, 4), 0.1)`).
    Unnamed weights are distinct parameters even with equal initialisers; a
    `Network` names them by their path. Weights with one explicit `name` are
    one shared parameter (as Kaldi shares components by name).
    """

    init: float | FrozenArray | Initializer = attrs.field(converter=_weight_init)
    name: str | None = attrs.field(default=None, validator=lambda self, attribute, value: _check_name(value))
    token: _Token | None = attrs.field(
        default=attrs.Factory(lambda self: None if self.name else _Token(), takes_self=True), kw_only=True
    )

    @property
    def shape(self) -> tuple[int, ...]:
        if isinstance(self.init, Initializer):
            return self.init.shape
        if isinstance(self.init, FrozenArray):
            return self.init.shape
        return ()

    def initial_value(self, key: jax.Array) -> jax.Array:
        """The initial array; `key` is used only by random initialisers."""
        if isinstance(self.init, Initializer):
            return self.init.init(key, jnp.result_type(float))
        return constant_array(self.init)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        name = f", name={self.name!r}" if self.name else ""
        return f"Weight({self.init!r}{name})", _ATOM


# ----- arithmetic ------------------------------------------------------------------


def _broadcast_check(layer: Layer, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        raise ShapeError(
            f"{type(layer).__name__}: operand shapes {a} and {b} do not broadcast{at(layer.where)}"
        ) from None


@layer_class
class _Binary(Layer):
    lhs: Layer = child()
    rhs: Layer = child()

    symbol: ClassVar[str] = "?"
    precedence: ClassVar[int] = _SUM

    def check(self, a: tuple[int, ...], b: tuple[int, ...]) -> None:
        _broadcast_check(self, a, b)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        p = self.precedence
        lhs, rhs = self.lhs, self.rhs
        left = (
            f"Literal({lhs.value!r})"
            if isinstance(lhs, Literal) and isinstance(rhs, Literal)
            else fmt.sub(lhs, p) if not isinstance(lhs, Literal) else repr(lhs.value)
        )
        right = repr(rhs.value) if isinstance(rhs, Literal) else fmt.sub(rhs, p + 1)
        return f"{left} {self.symbol} {right}", p


@layer_class
class Plus(_Binary):
    """Elementwise sum, broadcasting (`a + b`)."""

    symbol = "+"

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a + b

    def vjp(self, d, value, a, b):
        return unbroadcast(d, a.shape), unbroadcast(d, b.shape)


@layer_class
class Minus(_Binary):
    """Elementwise difference, broadcasting (`a - b`)."""

    symbol = "-"

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a - b

    def vjp(self, d, value, a, b):
        return unbroadcast(d, a.shape), unbroadcast(-d, b.shape)


@layer_class
class Times(_Binary):
    """Elementwise product, broadcasting (`a * b`)."""

    symbol = "*"
    precedence = _PRODUCT

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a * b

    def vjp(self, d, value, a, b):
        return unbroadcast(d * b, a.shape), unbroadcast(d * a, b.shape)


@layer_class
class Divide(_Binary):
    """Elementwise quotient, broadcasting (`a / b`)."""

    symbol = "/"
    precedence = _PRODUCT

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a / b

    def vjp(self, d, value, a, b):
        return unbroadcast(d / b, a.shape), unbroadcast(-d * value / b, b.shape)


@layer_class
class Dot(_Binary):
    """Matrix product (`a @ b`), with numpy's `matmul` rules."""

    symbol = "@"
    precedence = _PRODUCT

    def check(self, a: tuple[int, ...], b: tuple[int, ...]) -> None:
        if not a or not b:
            raise ShapeError(f"Dot: operands must not be scalars, got shapes {a} and {b}{at(self.where)}")
        inner_b = b[-2] if len(b) >= 2 else b[0]
        if a[-1] != inner_b:
            raise ShapeError(
                f"Dot: shapes {a} and {b} do not fit (inner dimensions {a[-1]} and {inner_b}){at(self.where)}"
            )
        if len(a) > 2 and len(b) > 2:
            try:
                np.broadcast_shapes(a[:-2], b[:-2])
            except ValueError:
                raise ShapeError(f"Dot: batch dimensions of {a} and {b} do not broadcast{at(self.where)}") from None

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(a, b)

    def vjp(self, d, value, a, b):
        # Promote vectors to matrices as matmul does, then transpose the product rule.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        d2 = d
        if a.ndim == 1:
            d2 = jnp.expand_dims(d2, -2)
        if b.ndim == 1:
            d2 = jnp.expand_dims(d2, -1)
        da = jnp.matmul(d2, jnp.swapaxes(b2, -1, -2))
        db = jnp.matmul(jnp.swapaxes(a2, -1, -2), d2)
        if a.ndim == 1:
            da = da.squeeze(-2)
        if b.ndim == 1:
            db = db.squeeze(-1)
        return unbroadcast(da, a.shape), unbroadcast(db, b.shape)


@layer_class
class Negate(Layer):
    """Elementwise negation (`-a`)."""

    arg: Layer = child()

    def apply(self, a: jax.Array) -> jax.Array:
        return -a

    def vjp(self, d, value, a):
        return (-d,)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        return f"-{fmt.sub(self.arg, _UNARY)}", _UNARY


def _exponent(value: Any) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise LayerTypeError(f"Power needs a constant number as exponent, got {value!r}{at(_user_line())}")


@layer_class
class Power(Layer):
    """Elementwise power by a constant exponent (`a ** 2.0`)."""

    arg: Layer = child()
    exponent: float = attrs.field(converter=_exponent)

    def apply(self, a: jax.Array) -> jax.Array:
        return a**self.exponent

    def vjp(self, d, value, a):
        return (d * self.exponent * a ** (self.exponent - 1.0),)

    def _format(self, fmt: _Formatter) -> tuple[str, int]:
        return f"{fmt.sub(self.arg, _POWER + 1)} ** {self.exponent!r}", _POWER


# ----- elementwise functions -------------------------------------------------------


@layer_class
class Elementwise(Layer):
    """Base of functions applied to each element (or each row, for softmax)."""

    arg: Layer = child()


@layer_class
class Exp(Elementwise):
    """`exp(a)`."""

    def apply(self, a):
        return jnp.exp(a)

    def vjp(self, d, value, a):
        return (d * value,)


@layer_class
class Log(Elementwise):
    """Natural logarithm `log(a)`."""

    def apply(self, a):
        return jnp.log(a)

    def vjp(self, d, value, a):
        return (d / a,)


@layer_class
class Tanh(Elementwise):
    """`tanh(a)`."""

    def apply(self, a):
        return jnp.tanh(a)

    def vjp(self, d, value, a):
        return (d * (1.0 - value * value),)


@layer_class
class Sigmoid(Elementwise):
    """The logistic function `1 / (1 + exp(-a))`."""

    def apply(self, a):
        return jax.nn.sigmoid(a)

    def vjp(self, d, value, a):
        return (d * value * (1.0 - value),)


@layer_class
class ReLU(Elementwise):
    """`max(a, 0)`; the derivative at 0 is taken as 0 (as Kaldi and JAX do)."""

    def apply(self, a):
        return jnp.where(a > 0, a, jnp.zeros_like(a))

    def vjp(self, d, value, a):
        return (jnp.where(a > 0, d, jnp.zeros_like(d)),)


@layer_class
class Softmax(Elementwise):
    """Softmax over the last axis (each row of a matrix)."""

    def check(self, a: tuple[int, ...]) -> None:
        if not a:
            raise ShapeError(f"Softmax needs at least one axis, got a scalar{at(self.where)}")

    def apply(self, a):
        return jax.nn.softmax(a, axis=-1)

    def vjp(self, d, value, a):
        return (value * (d - jnp.sum(d * value, axis=-1, keepdims=True)),)


@layer_class
class LogSoftmax(Elementwise):
    """Log of the softmax over the last axis, computed stably."""

    check = Softmax.check

    def apply(self, a):
        return jax.nn.log_softmax(a, axis=-1)

    def vjp(self, d, value, a):
        return (d - jnp.exp(value) * jnp.sum(d, axis=-1, keepdims=True),)
