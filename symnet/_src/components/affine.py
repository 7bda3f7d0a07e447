"""Affine and linear components: Kaldi's AffineComponent family.

Parameters keep Kaldi's layout, so model files map 1:1: `linear_params` is
`[output_dim, input_dim]` and `y = x W^T + b`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.layer import Layer, Product, child, layer_class
from . import natural_gradient
from .base import Component, auto_vjp, known_shape, rows_matmul_t, rows_sum

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "AffineComponent",
    "BlockAffineComponent",
    "FixedAffineComponent",
    "LinearComponent",
    "NaturalGradientAffineComponent",
    "NaturalGradientRepeatedAffineComponent",
    "RepeatedAffineComponent",
]


def kaldi_preconditioners(
    c: Component, input_dim: int, output_dim: int, *, bias: bool
) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """The natural-gradient preconditioners Kaldi gives a product `[output_dim, input_dim]` (plus a bias
    column where `bias`), from the component's options as NaturalGradientAffineComponent, LinearComponent and
    TdnnComponent read them: `in` over `input_dim` (+ 1) with rank-in (default `min(20, (input_dim + 1) // 2)`)
    and alpha-in (else alpha, 4), `out` over `output_dim` with rank-out (`min(80, (output_dim + 1) // 2)`) and
    alpha-out (else alpha), both with update-period (4) and num-samples-history (2000)."""
    shared = {
        "update_period": int(c.option("update-period", 4)),
        "num_samples_history": float(c.option("num-samples-history", 2000.0)),
    }
    alpha = float(c.option("alpha", 4.0))
    rank_in = int(c.option("rank-in", -1))
    rank_out = int(c.option("rank-out", -1))
    rank_in = rank_in if rank_in >= 0 else min(20, (input_dim + 1) // 2)
    rank_out = rank_out if rank_out >= 0 else min(80, (output_dim + 1) // 2)
    return {
        "in": (input_dim + int(bias), max(rank_in, 1), {**shared, "alpha": float(c.option("alpha-in", alpha))}),
        "out": (output_dim, max(rank_out, 1), {**shared, "alpha": float(c.option("alpha-out", alpha))}),
    }


@layer_class
class _AffineBase(Component):
    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()

    param_fields = ("linear_params", "bias_params")

    @property
    def input_dim(self) -> int:
        return known_shape(self, "linear_params")[1]

    @property
    def output_dim(self) -> int:
        return known_shape(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, inp = known_shape(self, "linear_params")
        return {"linear_params": (out, inp), "bias_params": (out,)}

    def product(self) -> Product:
        return Product(input=0, weight=1, transposed=True, bias=2)

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(x, w.T) + b

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return jnp.matmul(delta, w), rows_matmul_t(delta, x), rows_sum(delta)


@layer_class
class AffineComponent(_AffineBase):
    """`y = x W^T + b` (Kaldi's AffineComponent)."""

    kaldi_type = "AffineComponent"


@layer_class
class NaturalGradientAffineComponent(AffineComponent):
    """AffineComponent trained by Kaldi with natural gradient; the forward pass is the same.

    The natural-gradient options (rank-in, rank-out, update-period,
    num-samples-history, alpha) are kept in `options`. Inside an enabled
    `symnet.natural_gradient.Preconditioning` the weight gradients are Kaldi's
    natural-gradient ones; elsewhere the backward is the exact gradient.
    """

    kaldi_type = "NaturalGradientAffineComponent"

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]:
        """Kaldi's SetNaturalGradientConfigs: `in` over `input_dim + 1` (the ones column) with rank-in,
        `out` over `output_dim` with rank-out (`kaldi_preconditioners`)."""
        return kaldi_preconditioners(self, self.input_dim, self.output_dim, bias=True)

    def product(self) -> Product:
        """As AffineComponent's, but its backward is natural gradient inside a `Preconditioning`."""
        return Product(input=0, weight=1, transposed=True, bias=2, vjp_is_gradient=natural_gradient.active() is None)

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        ng = natural_gradient.active()
        if ng is None:
            return _AffineBase.vjp(self, delta, value, x, w, b)
        dw, db, new = natural_gradient.affine_gradients(
            self.natural_gradient_settings(), ng.state(self), x, delta, ng.preconditioner
        )
        ng.update(self, new)
        return jnp.matmul(delta, w), dw.astype(w.dtype), db.astype(b.dtype)


@layer_class
class FixedAffineComponent(_AffineBase):
    """`y = x W^T + b` with W and b never trained (FixedWeights; e.g. an LDA transform)."""

    kaldi_type = "FixedAffineComponent"

    def product(self) -> Product:
        """As AffineComponent's, but its backward gives its parameters no deltas."""
        return Product(input=0, weight=1, transposed=True, bias=2, vjp_is_gradient=False)

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return jnp.matmul(delta, w), None, None


@layer_class
class LinearComponent(Component):
    """`y = x W^T` with W `[output_dim, input_dim]` (Kaldi's `<Params>`)."""

    input: Layer = child()
    params: Layer = child()

    kaldi_type = "LinearComponent"
    param_fields = ("params",)

    @property
    def input_dim(self) -> int:
        return known_shape(self, "params")[1]

    @property
    def output_dim(self) -> int:
        return known_shape(self, "params")[0]

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]:
        """`in` over `input_dim` (no ones column), `out` over `output_dim` (`kaldi_preconditioners`): Kaldi's
        LinearComponent::Backprop preconditions its update whatever its use-natural-gradient says."""
        return kaldi_preconditioners(self, self.input_dim, self.output_dim, bias=False)

    def product(self) -> Product:
        """Its backward is natural gradient inside a `Preconditioning`, the product's gradient elsewhere."""
        return Product(input=0, weight=1, transposed=True, vjp_is_gradient=natural_gradient.active() is None)

    def apply(self, x: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.matmul(x, w.T)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array) -> tuple[jax.Array | None, ...]:
        ng = natural_gradient.active()
        settings = self.natural_gradient_settings()
        if ng is None or not settings:
            return jnp.matmul(delta, w), rows_matmul_t(delta, x)
        dw, new = natural_gradient.linear_gradients(settings, ng.state(self), x, delta, ng.preconditioner)
        ng.update(self, new)
        return jnp.matmul(delta, w), dw.astype(w.dtype)


@layer_class
class BlockAffineComponent(Component):
    """Block-diagonal affine map: `num_blocks` independent affine maps over consecutive column blocks.

    `linear_params` is `[output_dim, input_dim / num_blocks]`: rows
    `k*out_b .. (k+1)*out_b - 1` map input columns `k*in_b .. (k+1)*in_b - 1`.
    """

    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()
    num_blocks: int = 1

    kaldi_type = "BlockAffineComponent"
    param_fields = ("linear_params", "bias_params")

    @property
    def input_dim(self) -> int:
        return known_shape(self, "linear_params")[1] * self.num_blocks

    @property
    def output_dim(self) -> int:
        return known_shape(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, in_b = known_shape(self, "linear_params")
        return {"bias_params": (out,)}

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        nb = self.num_blocks
        out_b, in_b = w.shape[0] // nb, w.shape[1]
        xs = x.reshape(x.shape[:-1] + (nb, in_b))
        y = jnp.einsum("...ki,koi->...ko", xs, w.reshape(nb, out_b, in_b))
        return y.reshape(x.shape[:-1] + (nb * out_b,)) + b

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w, b)


@layer_class
class RepeatedAffineComponent(Component):
    """One small affine map applied to each of `num_repeats` consecutive column blocks.

    `linear_params` is `[output_dim / num_repeats, input_dim / num_repeats]`
    and `bias_params` `[output_dim / num_repeats]`.
    """

    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()
    num_repeats: int = 1

    kaldi_type = "RepeatedAffineComponent"
    param_fields = ("linear_params", "bias_params")

    @property
    def input_dim(self) -> int:
        return known_shape(self, "linear_params")[1] * self.num_repeats

    @property
    def output_dim(self) -> int:
        return known_shape(self, "linear_params")[0] * self.num_repeats

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out_b, _ = known_shape(self, "linear_params")
        return {"bias_params": (out_b,)}

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        nr = self.num_repeats
        xs = x.reshape(x.shape[:-1] + (nr, w.shape[1]))
        y = jnp.matmul(xs, w.T) + b
        return y.reshape(x.shape[:-1] + (nr * w.shape[0],))

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        nr = self.num_repeats
        ds = delta.reshape(delta.shape[:-1] + (nr, w.shape[0]))
        xs = x.reshape(x.shape[:-1] + (nr, w.shape[1]))
        dx = jnp.matmul(ds, w).reshape(x.shape)
        return dx, rows_matmul_t(ds, xs), rows_sum(ds)


@layer_class
class NaturalGradientRepeatedAffineComponent(RepeatedAffineComponent):
    """RepeatedAffineComponent trained by Kaldi with natural gradient; the forward pass is the same.

    Inside an enabled `symnet.natural_gradient.Preconditioning` the weight gradients are Kaldi's
    natural-gradient ones; elsewhere the backward is the exact gradient.
    """

    kaldi_type = "NaturalGradientRepeatedAffineComponent"

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]:
        """Kaldi's settings: one preconditioner, `in`, over the block's `input_dim + 1`, of rank
        `min(40, block input dim // 2)` (at least 1), update period 4, Kaldi's default history and alpha."""
        out_b, in_b = known_shape(self, "linear_params")
        rank_in = max(1, min(40, in_b // 2))
        return {"in": (in_b + 1, rank_in, {"update_period": 4, "num_samples_history": 2000.0, "alpha": 4.0})}

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        ng = natural_gradient.active()
        if ng is None:
            return RepeatedAffineComponent.vjp(self, delta, value, x, w, b)
        nr = self.num_repeats
        dx = jnp.matmul(delta.reshape(delta.shape[:-1] + (nr, w.shape[0])), w).reshape(x.shape)
        dw, db, new = natural_gradient.repeated_affine_gradients(
            self.natural_gradient_settings(), ng.state(self), x, delta, nr, ng.preconditioner
        )
        ng.update(self, new)
        return dx, dw.astype(w.dtype), db.astype(b.dtype)
