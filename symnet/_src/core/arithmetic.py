"""The arithmetic layers: what `Layer`'s operators build (`a + b` is `Plus(a, b)`, `a @ b` is `Dot(a, b)`).

They live apart from `Layer` (`symnet._src.core.layer`), which cannot import them (they subclass it):
each registers with `symnet._src.core.operators`, where the operators find it by name.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from ..base.errors import LayerTypeError, ShapeError, at
from .broadcast import check_broadcast, unbroadcast
from .formatting import Formatter
from .layer import Layer, Literal, Product, Weight, child, layer_class
from .operators import register_operator
from .source import user_line

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = ["BinaryLayer", "Divide", "Dot", "Minus", "Negate", "Plus", "Power", "Times"]


@layer_class
class BinaryLayer(Layer):
    """Base of the binary operators: operands `lhs` and `rhs`, printed infix with `symbol`."""

    lhs: Layer = child()
    rhs: Layer = child()

    symbol: ClassVar[str] = "?"
    precedence: ClassVar[int] = Formatter.SUM

    def check(self, a: tuple[int, ...], b: tuple[int, ...]) -> None:
        check_broadcast(self, a, b)

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...] | None:
        """Elementwise: the operands' broadcast shape."""
        return tuple(np.broadcast_shapes(*shapes))

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        p = self.precedence
        lhs, rhs = self.lhs, self.rhs
        left = (
            f"Literal({fmt.value(lhs.value)})"
            if isinstance(lhs, Literal) and isinstance(rhs, Literal)
            else fmt.sub(lhs, p)
            if not isinstance(lhs, Literal)
            else fmt.value(lhs.value)
        )
        right = fmt.value(rhs.value) if isinstance(rhs, Literal) else fmt.sub(rhs, p + 1)
        return f"{left} {self.symbol} {right}", p


@register_operator
@layer_class
class Plus(BinaryLayer):
    """Elementwise sum, broadcasting (`a + b`)."""

    weight_role = "bias"
    symbol = "+"

    @property
    def role(self) -> str | None:
        """`affine` where an operand is a Weight (a bias), else `sum`."""
        return "affine" if isinstance(self.lhs, Weight) or isinstance(self.rhs, Weight) else "sum"

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a + b

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array | None, ...]:
        return unbroadcast(d, a.shape), unbroadcast(d, b.shape)


@register_operator
@layer_class
class Minus(BinaryLayer):
    """Elementwise difference, broadcasting (`a - b`)."""

    weight_role = "bias"
    symbol = "-"
    role = "difference"

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a - b

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array | None, ...]:
        return unbroadcast(d, a.shape), unbroadcast(-d, b.shape)


@register_operator
@layer_class
class Times(BinaryLayer):
    """Elementwise product, broadcasting (`a * b`)."""

    weight_role = "scale"
    symbol = "*"
    role = "product"
    precedence = Formatter.PRODUCT

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a * b

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array | None, ...]:
        return unbroadcast(d * b, a.shape), unbroadcast(d * a, b.shape)


@register_operator
@layer_class
class Divide(BinaryLayer):
    """Elementwise quotient, broadcasting (`a / b`)."""

    weight_role = "scale"
    symbol = "/"
    role = "quotient"
    precedence = Formatter.PRODUCT

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a / b

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array | None, ...]:
        return unbroadcast(d / b, a.shape), unbroadcast(-d * value / b, b.shape)


@register_operator
@layer_class
class Dot(BinaryLayer):
    """Matrix product (`a @ b`), with numpy's `matmul` rules."""

    weight_role = "weight"
    symbol = "@"
    role = "linear"
    precedence = Formatter.PRODUCT

    def check(self, a: tuple[int, ...], b: tuple[int, ...]) -> None:
        if not a or not b:
            raise ShapeError(f"Dot: operands must not be scalars, got shapes {a} and {b}{at(self.where)}")
        inner_b = b[-2] if len(b) >= 2 else b[0]
        if a[-1] != inner_b:
            raise ShapeError(
                f"Dot: shapes {a} @ {b} do not fit: the left operand's rows have dim {a[-1]}, the matrix has "
                f"{inner_b} rows; they must be equal{at(self.where)}"
            )
        if len(a) > 2 and len(b) > 2:
            try:
                np.broadcast_shapes(a[:-2], b[:-2])
            except ValueError:
                raise ShapeError(f"Dot: batch dimensions of {a} and {b} do not broadcast{at(self.where)}") from None

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...] | None:
        """numpy's `matmul` rule: a vector operand is promoted to a matrix and its axis dropped again."""
        a, b = shapes
        rows = () if len(a) == 1 else (a[-2],)
        columns = () if len(b) == 1 else (b[-1],)
        return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + rows + columns

    def product(self) -> Product:
        return Product(input=0, weight=1)

    def apply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(a, b)

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array, b: jax.Array) -> tuple[jax.Array | None, ...]:
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


@register_operator
@layer_class
class Negate(Layer):
    """Elementwise negation (`-a`)."""

    arg: Layer = child()

    def apply(self, a: jax.Array) -> jax.Array:
        return -a

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (-d,)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"-{fmt.sub(self.arg, Formatter.UNARY)}", Formatter.UNARY


def _exponent(value: Any) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise LayerTypeError(f"Power needs a constant number as exponent, got {value!r}{at(user_line())}")


@register_operator
@layer_class
class Power(Layer):
    """Elementwise power by a constant exponent (`a ** 2.0`)."""

    arg: Layer = child()
    exponent: float = attrs.field(converter=_exponent)

    def apply(self, a: jax.Array) -> jax.Array:
        return a**self.exponent

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d * self.exponent * a ** (self.exponent - 1.0),)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"{fmt.sub(self.arg, Formatter.POWER + 1)} ** {fmt.value(self.exponent)}", Formatter.POWER
