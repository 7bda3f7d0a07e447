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

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from ..core.layer import Layer, Weight, child, layer_class
from .base import Component, OptionReader, auto_vjp, normal_init, param_name, register, shape_of, updatable_options


def _param_shape(layer: Component, field: str) -> tuple[int, ...]:
    shape = shape_of(getattr(layer, field))
    if shape is None:
        raise TypeError(f"{type(layer).__name__} {layer.name!r}: the shape of {field} is not known before running")
    return shape


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
        return _param_shape(self, "params")[1]

    @property
    def input_dim(self) -> int:
        return 5 * self.cell_dim + (3 if self.use_dropout else 0)

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"params": (3, self.cell_dim)}

    def apply(self, x, params):
        c = params.shape[1]
        i_part, f_part, c_part, o_part, c_prev = (x[..., k * c : (k + 1) * c] for k in range(5))
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

    def vjp(self, delta, value, x, params):
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
        return _param_shape(self, "w_h")[0]

    @property
    def recurrent_dim(self) -> int:
        return _param_shape(self, "w_h")[1]

    @property
    def input_dim(self) -> int:
        c, r = self.cell_dim, self.recurrent_dim
        return 4 * c if r == c else 3 * c + 2 * r

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def apply(self, x, w_h):
        c, r = w_h.shape
        z_t = x[..., :c]
        r_t = x[..., c : c + r]
        hpart_t = x[..., c + r : 2 * c + r]
        c_prev = x[..., 2 * c + r : 3 * c + r]
        s_prev = x[..., x.shape[-1] - r :]
        h_t = jnp.tanh(hpart_t + jnp.matmul(r_t * s_prev, w_h.T))
        c_t = (1.0 - z_t) * h_t + z_t * c_prev
        return jnp.concatenate([h_t, c_t], axis=-1)

    def vjp(self, delta, value, x, w_h):
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
        return _param_shape(self, "w_h")[0]

    @property
    def input_dim(self) -> int:
        return 3 * self.cell_dim

    @property
    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def apply(self, x, w_h):
        c = w_h.shape[0]
        z_t, hpart_t, c_prev = x[..., :c], x[..., c : 2 * c], x[..., 2 * c : 3 * c]
        h_t = jnp.tanh(hpart_t + w_h * c_prev)
        c_t = (1.0 - z_t) * h_t + z_t * c_prev
        return jnp.concatenate([h_t, c_t], axis=-1)

    def vjp(self, delta, value, x, w_h):
        return auto_vjp(self, delta, x, w_h)


# ----- builders ----------------------------------------------------------------------


@register("LstmNonlinearityComponent")
def lstm_nonlinearity_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: cell-dim (required), param-stddev (1.0), tanh-self-repair-threshold (0.2),
    sigmoid-self-repair-threshold (0.05), self-repair-scale (1e-5), use-dropout (false); learning rates.

    `options` gets Kaldi's `self-repair-config` vector (thresholds of the five
    nonlinearities i, f, c, o, m, then their five scales).
    """
    opts = OptionReader("LstmNonlinearityComponent", name, options)
    meta = updatable_options(opts)
    cell_dim = opts.int("cell-dim")
    param_stddev = opts.float("param-stddev", 1.0)
    tanh_threshold = opts.float("tanh-self-repair-threshold", 0.2)
    sigmoid_threshold = opts.float("sigmoid-self-repair-threshold", 0.05)
    self_repair_scale = opts.float("self-repair-scale", 1.0e-5)
    use_dropout = opts.bool("use-dropout", False)
    opts.finish()
    opts.positive("cell-dim", cell_dim)
    opts.nonnegative("param-stddev", param_stddev)
    opts.require(0.0 <= tanh_threshold <= 1.0, f"tanh-self-repair-threshold={tanh_threshold} must be in [0, 1]",
                 "tanh-self-repair-threshold")
    opts.require(0.0 <= sigmoid_threshold <= 0.25,
                 f"sigmoid-self-repair-threshold={sigmoid_threshold} must be in [0, 0.25]",
                 "sigmoid-self-repair-threshold")
    opts.require(0.0 <= self_repair_scale <= 0.1, f"self-repair-scale={self_repair_scale} must be in [0, 0.1]",
                 "self-repair-scale")
    thresholds = (sigmoid_threshold, sigmoid_threshold, tanh_threshold, sigmoid_threshold, tanh_threshold)
    meta.append(("self-repair-config", thresholds + (self_repair_scale,) * 5))
    return LstmNonlinearityComponent(
        name, input, Weight(normal_init((3, cell_dim), param_stddev), param_name(name, "params")), use_dropout,
        options=meta,
    )


@register("GruNonlinearityComponent")
def gru_nonlinearity_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: cell-dim (required), recurrent-dim (cell-dim; 0 < recurrent-dim <= cell-dim),
    param-stddev (1/sqrt(cell-dim)), self-repair-threshold (0.2), self-repair-scale (1e-5), alpha (4),
    rank-in (20), rank-out (80), update-period (4); learning rates."""
    opts = OptionReader("GruNonlinearityComponent", name, options)
    meta = updatable_options(opts)
    cell_dim = opts.int("cell-dim")
    opts.positive("cell-dim", cell_dim)
    param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(cell_dim))
    recurrent_dim = opts.int("recurrent-dim", -1)
    threshold = opts.float("self-repair-threshold", 0.2)
    scale = opts.float("self-repair-scale", 1.0e-5)
    meta += [
        ("self-repair-threshold", threshold),
        ("self-repair-scale", scale),
        ("alpha", opts.float("alpha", 4.0)),
        ("rank-in", opts.int("rank-in", 20)),
        ("rank-out", opts.int("rank-out", 80)),
        ("update-period", opts.int("update-period", 4)),
    ]
    if recurrent_dim < 0:
        recurrent_dim = cell_dim
    opts.require(0 < recurrent_dim <= cell_dim,
                 f"recurrent-dim={recurrent_dim} must be in 1..cell-dim ({cell_dim})", "recurrent-dim")
    opts.nonnegative("self-repair-threshold", threshold)
    opts.nonnegative("self-repair-scale", scale)
    opts.finish()
    return GruNonlinearityComponent(
        name, input, Weight(normal_init((cell_dim, recurrent_dim), param_stddev), param_name(name, "w_h")),
        options=meta,
    )


@register("OutputGruNonlinearityComponent")
def output_gru_nonlinearity_component(name: str, options: Mapping[str, Any], input: Layer, *,
                                      read_matrix=None) -> Layer:
    """Options: cell-dim (required), param-mean (0.0), param-stddev (1.0), self-repair-threshold (0.2),
    self-repair-scale (1e-5), alpha (4), rank (8), update-period (10); learning rates."""
    opts = OptionReader("OutputGruNonlinearityComponent", name, options)
    meta = updatable_options(opts)
    cell_dim = opts.int("cell-dim")
    opts.positive("cell-dim", cell_dim)
    threshold = opts.float("self-repair-threshold", 0.2)
    scale = opts.float("self-repair-scale", 1.0e-5)
    param_mean = opts.float("param-mean", 0.0)
    param_stddev = opts.float("param-stddev", 1.0)
    meta += [
        ("self-repair-threshold", threshold),
        ("self-repair-scale", scale),
        ("alpha", opts.float("alpha", 4.0)),
        ("rank", opts.int("rank", 8)),
        ("update-period", opts.int("update-period", 10)),
    ]
    opts.nonnegative("self-repair-threshold", threshold)
    opts.nonnegative("self-repair-scale", scale)
    opts.finish()
    return OutputGruNonlinearityComponent(
        name, input, Weight(normal_init((cell_dim,), param_stddev, param_mean), param_name(name, "w_h")),
        options=meta,
    )
