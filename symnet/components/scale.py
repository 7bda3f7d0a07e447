"""Per-element scales and offsets, fixed scales and biases, constant functions."""

from __future__ import annotations

from typing import Any, Mapping

import jax.numpy as jnp

from ..core.frozen import FrozenArray
from ..core.layer import Layer, Weight, child, layer_class
from .base import (
    Component,
    FixedWeight,
    MatrixReader,
    OptionReader,
    load_array,
    normal_init,
    param_name,
    register,
    rows_sum,
    shape_of,
    updatable_options,
)

#: ScaleAndOffsetComponent keeps its scales at least this far from zero in the forward pass.
SCALE_EPSILON = 1.0e-4


def _vector_dim(layer: Component, field: str) -> int:
    shape = shape_of(getattr(layer, field))
    if shape is None:
        raise TypeError(f"{type(layer).__name__} {layer.name!r}: the shape of {field} is not known before running")
    return shape[0]


def _blocks(x, block_dim: int):
    return x.reshape(x.shape[:-1] + (x.shape[-1] // block_dim, block_dim))


def ensure_nonzero(v, epsilon: float):
    """Kaldi's cu::EnsureNonzero: `x` if `|x| >= epsilon`, else `epsilon` (x >= 0) or `-epsilon` (x < 0)."""
    return jnp.where(jnp.abs(v) >= epsilon, v, jnp.where(v >= 0, epsilon, -epsilon))


@layer_class
class ScaleAndOffsetComponent(Component):
    """`y = x * scales + offsets`, per block of `len(scales)` columns; scales kept >= 1e-4 from zero.

    Backward as Kaldi: the input delta uses the stored scales, and the scales'
    gradient is `sum(x * delta)` (as if the nonzero-clamp were the identity).
    """

    input: Layer = child()
    scales: Layer = child()
    offsets: Layer = child()
    dim: int = 0

    kaldi_type = "ScaleAndOffsetComponent"
    param_fields = ("scales", "offsets")

    @property
    def input_dim(self) -> int:
        return self.dim

    @property
    def output_dim(self) -> int:
        return self.dim

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        block = _vector_dim(self, "scales")
        return {"scales": (block,), "offsets": (block,)}

    def apply(self, x, scales, offsets):
        y = _blocks(x, scales.shape[0]) * ensure_nonzero(scales, SCALE_EPSILON) + offsets
        return y.reshape(x.shape)

    def vjp(self, delta, value, x, scales, offsets):
        block = scales.shape[0]
        ds, xs = _blocks(delta, block), _blocks(x, block)
        return (ds * scales).reshape(x.shape), rows_sum(xs * ds), rows_sum(ds)


@layer_class
class PerElementScaleComponent(Component):
    """`y = x * params` (one scale per column; Kaldi's `<Params>`)."""

    input: Layer = child()
    params: Layer = child()

    kaldi_type = "PerElementScaleComponent"
    param_fields = ("params",)

    @property
    def input_dim(self) -> int:
        return _vector_dim(self, "params")

    @property
    def output_dim(self) -> int:
        return self.input_dim

    def apply(self, x, scales):
        return x * scales

    def vjp(self, delta, value, x, scales):
        return delta * scales, rows_sum(x * delta)


@layer_class
class NaturalGradientPerElementScaleComponent(PerElementScaleComponent):
    """PerElementScaleComponent trained by Kaldi with natural gradient; the forward pass is the same."""

    kaldi_type = "NaturalGradientPerElementScaleComponent"


@layer_class
class PerElementOffsetComponent(Component):
    """`y = x + offsets`, per block of `len(offsets)` columns."""

    input: Layer = child()
    offsets: Layer = child()
    dim: int = 0

    kaldi_type = "PerElementOffsetComponent"
    param_fields = ("offsets",)

    @property
    def input_dim(self) -> int:
        return self.dim

    @property
    def output_dim(self) -> int:
        return self.dim

    def apply(self, x, offsets):
        return (_blocks(x, offsets.shape[0]) + offsets).reshape(x.shape)

    def vjp(self, delta, value, x, offsets):
        return delta, rows_sum(_blocks(delta, offsets.shape[0]))


@layer_class
class FixedScaleComponent(Component):
    """`y = x * scales` with fixed (never trained) scales."""

    input: Layer = child()
    scales: Layer = child()

    kaldi_type = "FixedScaleComponent"
    param_fields = ("scales",)

    @property
    def input_dim(self) -> int:
        return _vector_dim(self, "scales")

    @property
    def output_dim(self) -> int:
        return self.input_dim

    def apply(self, x, scales):
        return x * scales

    def vjp(self, delta, value, x, scales):
        return delta * scales, None


@layer_class
class FixedBiasComponent(Component):
    """`y = x + bias` with a fixed (never trained) bias."""

    input: Layer = child()
    bias: Layer = child()

    kaldi_type = "FixedBiasComponent"
    param_fields = ("bias",)

    @property
    def input_dim(self) -> int:
        return _vector_dim(self, "bias")

    @property
    def output_dim(self) -> int:
        return self.input_dim

    def apply(self, x, bias):
        return x + bias

    def vjp(self, delta, value, x, bias):
        return delta, None


@layer_class
class ConstantFunctionComponent(Component):
    """Every output row is the vector `output`, whatever the input (which only supplies the rows)."""

    input: Layer = child()
    output: Layer = child()
    in_dim: int = 0
    is_updatable: bool = True

    kaldi_type = "ConstantFunctionComponent"
    param_fields = ("output",)

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return _vector_dim(self, "output")

    def apply(self, x, output):
        return jnp.broadcast_to(output, x.shape[:-1] + output.shape).astype(jnp.result_type(x, output))

    def vjp(self, delta, value, x, output):
        return None, (rows_sum(delta) if self.is_updatable else None)


# ----- builders ----------------------------------------------------------------------


def _dim(opts: OptionReader, key: str = "dim") -> int:
    dim = opts.int(key)
    opts.positive(key, dim)
    return dim


def _only(opts: OptionReader, key: str) -> None:
    """Kaldi's "file=... and nothing else" forms."""
    others = [k for k in opts.raw if k != key and k not in opts.used]
    opts.require(not others, f"with {key}= no other option is allowed (got {', '.join(others)})",
                 others[0] if others else None)


@register("ScaleAndOffsetComponent")
def scale_and_offset_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: dim (required), block-dim (dim), use-natural-gradient (true), rank (20), learning rates.
    Scales start at 1, offsets at 0."""
    opts = OptionReader("ScaleAndOffsetComponent", name, options)
    meta = updatable_options(opts)
    dim = _dim(opts)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    block_dim = opts.int("block-dim", dim)
    opts.require(block_dim > 0 and dim % block_dim == 0,
                 f"block-dim={block_dim} must be positive and divide dim={dim}", "block-dim")
    meta.append(("rank", opts.int("rank", 20)))
    opts.finish()
    return ScaleAndOffsetComponent(
        name,
        input,
        Weight(normal_init((block_dim,), 0.0, 1.0), param_name(name, "scales")),
        Weight(normal_init((block_dim,), 0.0, 0.0), param_name(name, "offsets")),
        dim,
        options=meta,
    )


def _scale_vector(opts: OptionReader, read_matrix: MatrixReader | None, file_key: str, check_dim: bool):
    if opts.has(file_key):
        vec = load_array(opts, file_key, read_matrix, 1)
        if check_dim and opts.has("dim"):
            dim = opts.int("dim")
            opts.require(dim == vec.shape[0], f"dim={dim} does not match {file_key} (dimension {vec.shape[0]})", "dim")
        return FrozenArray(vec)
    dim = _dim(opts)
    param_mean = opts.float("param-mean", 1.0)
    param_stddev = opts.float("param-stddev", 0.0)
    opts.nonnegative("param-stddev", param_stddev)
    return normal_init((dim,), param_stddev, param_mean)


@register("PerElementScaleComponent")
def per_element_scale_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: vector=FILE (optional dim must match), or dim with param-mean (1.0), param-stddev (0.0);
    learning rates."""
    opts = OptionReader("PerElementScaleComponent", name, options)
    meta = updatable_options(opts)
    init = _scale_vector(opts, read_matrix, "vector", check_dim=True)
    opts.finish()
    return PerElementScaleComponent(name, input, Weight(init, param_name(name, "params")), options=meta)


@register("NaturalGradientPerElementScaleComponent")
def natural_gradient_per_element_scale_component(name: str, options: Mapping[str, Any], input: Layer, *,
                                                 read_matrix=None) -> Layer:
    """Options: scales=FILE, or dim with param-mean (1.0), param-stddev (0.0); rank (8), update-period (10),
    num-samples-history (2000), alpha (4); learning rates."""
    opts = OptionReader("NaturalGradientPerElementScaleComponent", name, options)
    meta = [("rank", opts.int("rank", 8)), ("update-period", opts.int("update-period", 10)),
            ("num-samples-history", opts.float("num-samples-history", 2000.0)), ("alpha", opts.float("alpha", 4.0))]
    meta = updatable_options(opts) + meta
    if opts.has("scales"):
        _only(opts, "scales")
    init = _scale_vector(opts, read_matrix, "scales", check_dim=False)
    opts.finish()
    return NaturalGradientPerElementScaleComponent(name, input, Weight(init, param_name(name, "params")),
                                                   options=meta)


@register("PerElementOffsetComponent")
def per_element_offset_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: vector=FILE (dim defaults to its dimension), or dim with param-mean (0.0), param-stddev (0.0),
    block-dim (dim); use-natural-gradient (true); learning rates."""
    opts = OptionReader("PerElementOffsetComponent", name, options)
    meta = updatable_options(opts)
    if opts.has("vector"):
        vec = load_array(opts, "vector", read_matrix, 1)
        dim = opts.int("dim", vec.shape[0])
        opts.require(dim > 0 and dim % vec.shape[0] == 0,
                     f"dim={dim} must be a positive multiple of the vector's dimension {vec.shape[0]}", "dim")
        init = FrozenArray(vec)
    else:
        dim = _dim(opts)
        param_mean = opts.float("param-mean", 0.0)
        param_stddev = opts.float("param-stddev", 0.0)
        block_dim = opts.int("block-dim", dim)
        opts.require(block_dim > 0 and dim % block_dim == 0,
                     f"block-dim={block_dim} must be positive and divide dim={dim}", "block-dim")
        init = normal_init((block_dim,), param_stddev, param_mean)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    opts.finish()
    return PerElementOffsetComponent(name, input, Weight(init, param_name(name, "offsets")), dim, options=meta)


@register("FixedScaleComponent")
def fixed_scale_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: scales=FILE (nothing else), or dim with scale (every element = scale; default random N(0, 1))."""
    opts = OptionReader("FixedScaleComponent", name, options)
    if opts.has("scales"):
        _only(opts, "scales")
        init = FrozenArray(load_array(opts, "scales", read_matrix, 1))
    else:
        scale = opts.float("scale", None)
        dim = _dim(opts)
        init = normal_init((dim,), 1.0) if scale is None else normal_init((dim,), 0.0, scale)
    opts.finish()
    return FixedScaleComponent(name, input, FixedWeight(init, param_name(name, "scales")))


@register("FixedBiasComponent")
def fixed_bias_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: bias=FILE (nothing else), or dim (random N(0, 1) bias, for tests)."""
    opts = OptionReader("FixedBiasComponent", name, options)
    if opts.has("bias"):
        _only(opts, "bias")
        init = FrozenArray(load_array(opts, "bias", read_matrix, 1))
    else:
        init = normal_init((_dim(opts),), 1.0)
    opts.finish()
    return FixedBiasComponent(name, input, FixedWeight(init, param_name(name, "bias")))


@register("ConstantFunctionComponent")
def constant_function_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: input-dim, output-dim (required), is-updatable (true), use-natural-gradient (true),
    output-mean (0.0), output-stddev (0.0); learning rates."""
    opts = OptionReader("ConstantFunctionComponent", name, options)
    meta = updatable_options(opts)
    output_dim = _dim(opts, "output-dim")
    input_dim = _dim(opts, "input-dim")
    is_updatable = opts.bool("is-updatable", True)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    output_mean = opts.float("output-mean", 0.0)
    output_stddev = opts.float("output-stddev", 0.0)
    opts.finish()
    weight_class = Weight if is_updatable else FixedWeight
    output = weight_class(normal_init((output_dim,), output_stddev, output_mean), param_name(name, "output"))
    return ConstantFunctionComponent(name, input, output, input_dim, is_updatable, options=meta)
