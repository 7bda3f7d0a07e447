"""Affine and linear components: Kaldi's AffineComponent family.

Parameters keep Kaldi's layout, so model files map 1:1: `linear_params` is
`[output_dim, input_dim]` and `y = x W^T + b`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax.numpy as jnp

from ..core.frozen import FrozenArray
from ..core.layer import Layer, Weight, child, layer_class
from .base import (
    Component,
    FixedWeight,
    MatrixReader,
    OptionReader,
    auto_vjp,
    load_array,
    normal_init,
    param_name,
    register,
    rows_matmul_t,
    rows_sum,
    shape_of,
    updatable_options,
)


def _dims(layer: Component, field: str) -> tuple[int, ...]:
    shape = shape_of(getattr(layer, field))
    if shape is None:
        raise TypeError(f"{type(layer).__name__} {layer.name!r}: the shape of {field} is not known before running")
    return shape


@layer_class
class _AffineBase(Component):
    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()

    param_fields = ("linear_params", "bias_params")

    @property
    def input_dim(self) -> int:
        return _dims(self, "linear_params")[1]

    @property
    def output_dim(self) -> int:
        return _dims(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, inp = _dims(self, "linear_params")
        return {"linear_params": (out, inp), "bias_params": (out,)}

    def apply(self, x, w, b):
        return jnp.matmul(x, w.T) + b

    def vjp(self, delta, value, x, w, b):
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

    def vjp(self, delta, value, x, w, b):
        from .natural_gradient import active

        ng = active()
        if ng is None:
            return _AffineBase.vjp(self, delta, value, x, w, b)
        return ng.vjp(self, delta, x, w, b)


@layer_class
class FixedAffineComponent(_AffineBase):
    """`y = x W^T + b` with W and b never trained (FixedWeights; e.g. an LDA transform)."""

    kaldi_type = "FixedAffineComponent"

    def vjp(self, delta, value, x, w, b):
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
        return _dims(self, "params")[1]

    @property
    def output_dim(self) -> int:
        return _dims(self, "params")[0]

    def apply(self, x, w):
        return jnp.matmul(x, w.T)

    def vjp(self, delta, value, x, w):
        return jnp.matmul(delta, w), rows_matmul_t(delta, x)


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
        return _dims(self, "linear_params")[1] * self.num_blocks

    @property
    def output_dim(self) -> int:
        return _dims(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, in_b = _dims(self, "linear_params")
        return {"bias_params": (out,)}

    def apply(self, x, w, b):
        nb = self.num_blocks
        out_b, in_b = w.shape[0] // nb, w.shape[1]
        xs = x.reshape(x.shape[:-1] + (nb, in_b))
        y = jnp.einsum("...ki,koi->...ko", xs, w.reshape(nb, out_b, in_b))
        return y.reshape(x.shape[:-1] + (nb * out_b,)) + b

    def vjp(self, delta, value, x, w, b):
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
        return _dims(self, "linear_params")[1] * self.num_repeats

    @property
    def output_dim(self) -> int:
        return _dims(self, "linear_params")[0] * self.num_repeats

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out_b, _ = _dims(self, "linear_params")
        return {"bias_params": (out_b,)}

    def apply(self, x, w, b):
        nr = self.num_repeats
        xs = x.reshape(x.shape[:-1] + (nr, w.shape[1]))
        y = jnp.matmul(xs, w.T) + b
        return y.reshape(x.shape[:-1] + (nr * w.shape[0],))

    def vjp(self, delta, value, x, w, b):
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

    def vjp(self, delta, value, x, w, b):
        from .natural_gradient import active

        ng = active()
        if ng is None:
            return RepeatedAffineComponent.vjp(self, delta, value, x, w, b)
        return ng.vjp(self, delta, x, w, b)


# ----- builders ----------------------------------------------------------------------


def _matrix_option(opts: OptionReader, read_matrix: MatrixReader | None, with_bias: bool):
    """Kaldi's `matrix=` option: the parameters from a file, checked against input-dim/output-dim."""
    mat = load_array(opts, "matrix", read_matrix, 2)
    if with_bias:
        opts.require(mat.shape[1] >= 2, f"matrix={opts.raw['matrix']} needs at least 2 columns (the last is the bias)",
                     "matrix")
        linear, bias = mat[:, :-1], mat[:, -1]
    else:
        linear, bias = mat, None
    for key, want in (("input-dim", linear.shape[1]), ("output-dim", linear.shape[0])):
        if opts.has(key):
            got = opts.int(key)
            opts.require(got == want, f"{key}={got} does not match the matrix ({linear.shape[0]} x {linear.shape[1]})",
                         key)
    return linear, bias


def _dims_option(opts: OptionReader) -> tuple[int, int]:
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.positive("input-dim", input_dim)
    opts.positive("output-dim", output_dim)
    return input_dim, output_dim


def _natural_gradient_options(opts: OptionReader, input_dim: int, output_dim: int) -> list[tuple[str, Any]]:
    num_samples_history = opts.float("num-samples-history", 2000.0)
    alpha = opts.float("alpha", 4.0)
    rank_in = opts.int("rank-in", -1)
    rank_out = opts.int("rank-out", -1)
    update_period = opts.int("update-period", 4)
    if rank_in < 0:
        rank_in = min(20, (input_dim + 1) // 2)
    if rank_out < 0:
        rank_out = min(80, (output_dim + 1) // 2)
    return [("num-samples-history", num_samples_history), ("alpha", alpha), ("rank-in", rank_in),
            ("rank-out", rank_out), ("update-period", update_period)]


def _affine(cls: type, name: str, options: Mapping[str, Any], input: Layer, read_matrix: MatrixReader | None,
            natural_gradient: bool) -> Layer:
    opts = OptionReader(cls.kaldi_type, name, options)
    meta = updatable_options(opts)
    if opts.has("matrix"):
        linear, bias = _matrix_option(opts, read_matrix, with_bias=True)
        output_dim, input_dim = linear.shape
        w_init, b_init = FrozenArray(linear), FrozenArray(bias)
    else:
        input_dim, output_dim = _dims_option(opts)
        param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(input_dim))
        bias_stddev = opts.float("bias-stddev", 1.0)
        bias_mean = opts.float("bias-mean", 0.0) if natural_gradient else 0.0
        opts.nonnegative("param-stddev", param_stddev)
        if natural_gradient:
            opts.nonnegative("bias-stddev", bias_stddev)
        w_init = normal_init((output_dim, input_dim), param_stddev)
        b_init = normal_init((output_dim,), bias_stddev, bias_mean)
    meta.append(("orthonormal-constraint", opts.float("orthonormal-constraint", 0.0)))
    if natural_gradient:
        meta += _natural_gradient_options(opts, input_dim, output_dim)
    opts.finish()
    return cls(
        name,
        input,
        Weight(w_init, param_name(name, "linear_params")),
        Weight(b_init, param_name(name, "bias_params")),
        options=meta,
    )


@register("AffineComponent")
def affine_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: input-dim, output-dim (or matrix=FILE, `[W b]`), param-stddev (1/sqrt(input-dim)),
    bias-stddev (1.0), orthonormal-constraint, and the learning-rate options."""
    return _affine(AffineComponent, name, options, input, read_matrix, natural_gradient=False)


@register("NaturalGradientAffineComponent")
def natural_gradient_affine_component(name: str, options: Mapping[str, Any], input: Layer, *,
                                      read_matrix=None) -> Layer:
    """As AffineComponent, plus bias-mean (0.0) and the natural-gradient options."""
    return _affine(NaturalGradientAffineComponent, name, options, input, read_matrix, natural_gradient=True)


@register("LinearComponent")
def linear_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: input-dim, output-dim (or matrix=FILE), param-stddev (1/sqrt(input-dim)),
    use-natural-gradient and the natural-gradient options, orthonormal-constraint, learning rates."""
    opts = OptionReader("LinearComponent", name, options)
    meta = updatable_options(opts)
    if opts.has("matrix"):
        linear, _ = _matrix_option(opts, read_matrix, with_bias=False)
        output_dim, input_dim = linear.shape
        init = FrozenArray(linear)
    else:
        input_dim, output_dim = _dims_option(opts)
        param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(input_dim))
        opts.nonnegative("param-stddev", param_stddev)
        init = normal_init((output_dim, input_dim), param_stddev)
    meta += _natural_gradient_options(opts, input_dim, output_dim)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    meta.append(("orthonormal-constraint", opts.float("orthonormal-constraint", 0.0)))
    opts.finish()
    return LinearComponent(name, input, Weight(init, param_name(name, "params")), options=meta)


@register("FixedAffineComponent")
def fixed_affine_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: matrix=FILE (`[W b]`, nothing else allowed), or input-dim and output-dim
    (random N(0, 1) parameters, for tests)."""
    opts = OptionReader("FixedAffineComponent", name, options)
    if opts.has("matrix"):
        others = [k for k in opts.raw if k != "matrix"]
        opts.require(not others, f"with matrix= no other option is allowed (got {', '.join(others)})",
                     others[0] if others else None)
        linear, bias = _matrix_option(opts, read_matrix, with_bias=True)
        w_init, b_init = FrozenArray(linear), FrozenArray(bias)
    else:
        input_dim, output_dim = _dims_option(opts)
        w_init = normal_init((output_dim, input_dim), 1.0)
        b_init = normal_init((output_dim,), 1.0)
    opts.finish()
    return FixedAffineComponent(
        name,
        input,
        FixedWeight(w_init, param_name(name, "linear_params")),
        FixedWeight(b_init, param_name(name, "bias_params")),
    )


@register("BlockAffineComponent")
def block_affine_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: input-dim, output-dim, num-blocks (all required), param-stddev
    (1/sqrt(input-dim/num-blocks)), bias-stddev (1.0), bias-mean (0.0), learning rates."""
    opts = OptionReader("BlockAffineComponent", name, options)
    input_dim, output_dim = _dims_option(opts)
    num_blocks = opts.int("num-blocks")
    opts.positive("num-blocks", num_blocks)
    opts.require(input_dim % num_blocks == 0 and output_dim % num_blocks == 0,
                 f"num-blocks={num_blocks} must divide input-dim={input_dim} and output-dim={output_dim}", "num-blocks")
    meta = updatable_options(opts)
    param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(input_dim // num_blocks))
    bias_stddev = opts.float("bias-stddev", 1.0)
    bias_mean = opts.float("bias-mean", 0.0)
    opts.nonnegative("param-stddev", param_stddev)
    opts.nonnegative("bias-stddev", bias_stddev)
    opts.finish()
    return BlockAffineComponent(
        name,
        input,
        Weight(normal_init((output_dim, input_dim // num_blocks), param_stddev), param_name(name, "linear_params")),
        Weight(normal_init((output_dim,), bias_stddev, bias_mean), param_name(name, "bias_params")),
        num_blocks,
        options=meta,
    )


def _repeated(cls: type, name: str, options: Mapping[str, Any], input: Layer) -> Layer:
    opts = OptionReader(cls.kaldi_type, name, options)
    meta = updatable_options(opts)
    num_repeats = opts.int("num-repeats")
    input_dim, output_dim = _dims_option(opts)
    opts.positive("num-repeats", num_repeats)
    opts.require(input_dim % num_repeats == 0, f"num-repeats={num_repeats} must divide input-dim={input_dim}",
                 "num-repeats")
    opts.require(output_dim % num_repeats == 0, f"num-repeats={num_repeats} must divide output-dim={output_dim}",
                 "num-repeats")
    in_b, out_b = input_dim // num_repeats, output_dim // num_repeats
    param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(in_b))
    bias_mean = opts.float("bias-mean", 0.0)
    bias_stddev = opts.float("bias-stddev", 0.0)
    opts.nonnegative("param-stddev", param_stddev)
    opts.finish()
    return cls(
        name,
        input,
        Weight(normal_init((out_b, in_b), param_stddev), param_name(name, "linear_params")),
        Weight(normal_init((out_b,), bias_stddev, bias_mean), param_name(name, "bias_params")),
        num_repeats,
        options=meta,
    )


@register("RepeatedAffineComponent")
def repeated_affine_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: num-repeats, input-dim, output-dim (required), param-stddev
    (1/sqrt(input-dim/num-repeats)), bias-mean (0.0), bias-stddev (0.0), learning rates."""
    return _repeated(RepeatedAffineComponent, name, options, input)


@register("NaturalGradientRepeatedAffineComponent")
def natural_gradient_repeated_affine_component(name: str, options: Mapping[str, Any], input: Layer, *,
                                               read_matrix=None) -> Layer:
    """As RepeatedAffineComponent (Kaldi fixes its natural-gradient settings)."""
    return _repeated(NaturalGradientRepeatedAffineComponent, name, options, input)

