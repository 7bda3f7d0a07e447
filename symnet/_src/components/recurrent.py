"""The row-wise cores of Kaldi's LSTM and GRU layers (nnet-combined-component.cc).

These compute one time step from an input row that already holds the
projections and the previous state; the recurrence itself is made of
descriptors (`IfDefined(Offset(c, -1))`) around them.

Kaldi's self-repair terms (added to the backward delta when a unit's average
derivative is too small; they need running statistics and random numbers) are
not applied: the backward pass is the exact derivative of the forward pass,
and the self-repair settings stay in `options`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.layer import Layer, child, layer_class
from .base import Component, auto_vjp, known_shape

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["GruNonlinearityComponent", "LstmNonlinearityComponent", "OutputGruNonlinearityComponent"]


@layer_class
class LstmNonlinearityComponent(Component):
    """One LSTM step with diagonal peepholes.

    Input row (5C columns, +3 with `use_dropout`): `[i_part, f_part, c_part,
    o_part, c_prev]` (each C columns), then optionally the dropout scales
    `i_scale, f_scale, o_scale`. `params` is `[3, C]`: rows `w_ic, w_fc, w_oc`.
    Output row (2C): `[c_t, m_t]` where

        i_t = sigmoid(i_part + w_ic * c_prev)
        f_t = sigmoid(f_part + w_fc * c_prev)
        c_t = f_t * f_scale * c_prev + i_t * i_scale * tanh(c_part)
        o_t = sigmoid(o_part + w_oc * c_t)
        m_t = o_t * o_scale * tanh(c_t)
    """

    input: Layer = child()
    params: Layer = child()
    use_dropout: bool = False

    kaldi_type = "LstmNonlinearityComponent"
    param_fields = ("params",)

    @property
    def cell_dim(self) -> int:
        return known_shape(self, "params")[1]

    @property
    def input_dim(self) -> int:
        return 5 * self.cell_dim + (3 if self.use_dropout else 0)

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"params": (3, self.cell_dim)}

    def apply(self, x: jax.Array, params: jax.Array) -> jax.Array:
        c = params.shape[1]
        i_part, f_part, c_part, o_part, c_prev = (x[..., k * c : (k + 1) * c] for k in range(5))
        i_scale: jax.Array | float
        f_scale: jax.Array | float
        o_scale: jax.Array | float
        if self.use_dropout:
            i_scale, f_scale, o_scale = (x[..., 5 * c + k : 5 * c + k + 1] for k in range(3))
        else:
            i_scale = f_scale = o_scale = 1.0
        w_ic, w_fc, w_oc = params[0], params[1], params[2]
        i_t = jax.nn.sigmoid(i_part + w_ic * c_prev)
        f_t = jax.nn.sigmoid(f_part + w_fc * c_prev)
        c_t = f_t * f_scale * c_prev + i_t * i_scale * jnp.tanh(c_part)
        o_t = jax.nn.sigmoid(o_part + w_oc * c_t)
        m_t = o_t * o_scale * jnp.tanh(c_t)
        return jnp.concatenate([c_t, m_t], axis=-1)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, params: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, params)


@layer_class
class GruNonlinearityComponent(Component):
    """One GRU step (optionally projected: `recurrent_dim < cell_dim`).

    Input row: `[z_t (C), r_t (R), hpart_t (C), c_prev (C)]` and, when
    projected, `s_prev (R)` (unprojected, `s_prev` is `c_prev`); z_t and r_t
    are already sigmoids. `w_h` is `[C, R]`. Output row `[h_t, c_t]`:

        h_t = tanh(hpart_t + (r_t * s_prev) W_h^T)
        c_t = (1 - z_t) * h_t + z_t * c_prev
    """

    input: Layer = child()
    w_h: Layer = child()

    kaldi_type = "GruNonlinearityComponent"
    param_fields = ("w_h",)

    @property
    def cell_dim(self) -> int:
        return known_shape(self, "w_h")[0]

    @property
    def recurrent_dim(self) -> int:
        return known_shape(self, "w_h")[1]

    @property
    def input_dim(self) -> int:
        c, r = self.cell_dim, self.recurrent_dim
        return 4 * c if r == c else 3 * c + 2 * r

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def apply(self, x: jax.Array, w_h: jax.Array) -> jax.Array:
        c, r = w_h.shape
        z_t = x[..., :c]
        r_t = x[..., c : c + r]
        hpart_t = x[..., c + r : 2 * c + r]
        c_prev = x[..., 2 * c + r : 3 * c + r]
        s_prev = x[..., x.shape[-1] - r :]
        h_t = jnp.tanh(hpart_t + jnp.matmul(r_t * s_prev, w_h.T))
        c_t = (1.0 - z_t) * h_t + z_t * c_prev
        return jnp.concatenate([h_t, c_t], axis=-1)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, w_h: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w_h)


@layer_class
class OutputGruNonlinearityComponent(Component):
    """The GRU step of Kaldi's "output-gate" GRU: input `[z_t, hpart_t, c_prev]` (C each), `w_h` a vector [C]:

        h_t = tanh(hpart_t + w_h * c_prev)
        c_t = (1 - z_t) * h_t + z_t * c_prev

    Output row `[h_t, c_t]`.
    """

    input: Layer = child()
    w_h: Layer = child()

    kaldi_type = "OutputGruNonlinearityComponent"
    param_fields = ("w_h",)

    @property
    def cell_dim(self) -> int:
        return known_shape(self, "w_h")[0]

    @property
    def input_dim(self) -> int:
        return 3 * self.cell_dim

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def apply(self, x: jax.Array, w_h: jax.Array) -> jax.Array:
        c = w_h.shape[0]
        z_t, hpart_t, c_prev = x[..., :c], x[..., c : 2 * c], x[..., 2 * c : 3 * c]
        h_t = jnp.tanh(hpart_t + w_h * c_prev)
        c_t = (1.0 - z_t) * h_t + z_t * c_prev
        return jnp.concatenate([h_t, c_t], axis=-1)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, w_h: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w_h)
