"""Kaldi's scaling components: ScaleAndOffset, PerElementScale, NaturalGradientPerElementScale,
PerElementOffset, FixedScale, FixedBias, ConstantFunction (nnet-simple-component.cc) and Constant
(nnet-general-component.cc).

Config options with Kaldi's defaults (including the `vector=`, `scales=` and
`bias=` files), the options that build a component again, the fields of its
model files in Kaldi's write order and the kinds of their tokens, one record
per type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...components.base import Component, FixedWeight, param_name
from ...components.scaling import (
    ConstantComponent,
    ConstantFunctionComponent,
    FixedBiasComponent,
    FixedScaleComponent,
    NaturalGradientPerElementScaleComponent,
    PerElementOffsetComponent,
    PerElementScaleComponent,
    ScaleAndOffsetComponent,
)
from ...core.frozen import FrozenArray
from ...core.initializers import Full, Initializer, Zeros
from ...core.layer import Layer, Weight
from ..models.token_kinds import BOOL, FLOAT, INT, VECTOR
from .fields import (
    UPDATABLE_KINDS,
    ModelFields,
    ParamValues,
    dim_token,
    f32,
    option_or,
    updatable_field_options,
    updatable_fields,
    vector_dim,
)
from .options import (
    LEARNING,
    ComponentOptionReader,
    MatrixReader,
    init_options,
    load_array,
    meta_options,
    normal_init,
    param_shape,
    positive_dim,
    updatable_options,
)
from .registry import KaldiComponentType, register

__all__ = [
    "constant_component",
    "constant_function_component",
    "fixed_bias_component",
    "fixed_scale_component",
    "natural_gradient_per_element_scale_component",
    "per_element_offset_component",
    "per_element_scale_component",
    "scale_and_offset_component",
]


def _only(opts: ComponentOptionReader, key: str) -> None:
    """Kaldi's "file=... and nothing else" forms."""
    others = [k for k in opts.raw if k != key and k not in opts.used]
    opts.require(
        not others, f"with {key}= no other option is allowed (got {', '.join(others)})", others[0] if others else None
    )


def scale_and_offset_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), block-dim (dim), use-natural-gradient (true), rank (20), learning rates.
    Scales start at 1, offsets at 0."""
    opts = ComponentOptionReader("ScaleAndOffsetComponent", name, options)
    meta = updatable_options(opts)
    dim = positive_dim(opts)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    block_dim = opts.int("block-dim", dim)
    opts.require(
        block_dim > 0 and dim % block_dim == 0,
        f"block-dim={block_dim} must be positive and divide dim={dim}",
        "block-dim",
    )
    meta.append(("rank", opts.int("rank", 20)))
    opts.finish()
    return ScaleAndOffsetComponent(
        name,
        input,
        Weight(normal_init((block_dim,), 0.0, 1.0), param_name(name, "scales")),
        Weight(normal_init((block_dim,), 0.0, 0.0), param_name(name, "offsets")),
        dim,
        options=tuple(meta),
    )


def _vector_or(
    opts: ComponentOptionReader, read_matrix: MatrixReader | None, key: str, default: Callable[[], Initializer]
) -> FrozenArray | Initializer:
    """The vector of Kaldi's `KEY=FILE and nothing else` form, else the initialiser `default()` reads from the
    other options."""
    if opts.has(key):
        _only(opts, key)
        return FrozenArray(load_array(opts, key, read_matrix, 1))
    return default()


def _scale_init(opts: ComponentOptionReader) -> Initializer:
    """Scales of `dim` elements from param-mean (1.0) and param-stddev (0.0)."""
    dim = positive_dim(opts)
    param_mean = opts.float("param-mean", 1.0)
    param_stddev = opts.float("param-stddev", 0.0)
    opts.nonnegative("param-stddev", param_stddev)
    return normal_init((dim,), param_stddev, param_mean)


def per_element_scale_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: vector=FILE (optional dim must match), or dim with param-mean (1.0), param-stddev (0.0);
    learning rates."""
    opts = ComponentOptionReader("PerElementScaleComponent", name, options)
    meta = updatable_options(opts)
    init: FrozenArray | Initializer
    if opts.has("vector"):
        vec = load_array(opts, "vector", read_matrix, 1)
        if opts.has("dim"):
            dim = opts.int("dim")
            opts.require(dim == vec.shape[0], f"dim={dim} does not match vector (dimension {vec.shape[0]})", "dim")
        init = FrozenArray(vec)
    else:
        init = _scale_init(opts)
    opts.finish()
    return PerElementScaleComponent(name, input, Weight(init, param_name(name, "params")), options=tuple(meta))


def natural_gradient_per_element_scale_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: scales=FILE, or dim with param-mean (1.0), param-stddev (0.0); rank (8), update-period (10),
    num-samples-history (2000), alpha (4); learning rates."""
    opts = ComponentOptionReader("NaturalGradientPerElementScaleComponent", name, options)
    meta = [
        ("rank", opts.int("rank", 8)),
        ("update-period", opts.int("update-period", 10)),
        ("num-samples-history", opts.float("num-samples-history", 2000.0)),
        ("alpha", opts.float("alpha", 4.0)),
    ]
    meta = updatable_options(opts) + meta
    init = _vector_or(opts, read_matrix, "scales", lambda: _scale_init(opts))
    opts.finish()
    return NaturalGradientPerElementScaleComponent(
        name, input, Weight(init, param_name(name, "params")), options=tuple(meta)
    )


def per_element_offset_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: vector=FILE (dim defaults to its dimension), or dim with param-mean (0.0), param-stddev (0.0),
    block-dim (dim); use-natural-gradient (true); learning rates."""
    opts = ComponentOptionReader("PerElementOffsetComponent", name, options)
    meta = updatable_options(opts)
    if opts.has("vector"):
        vec = load_array(opts, "vector", read_matrix, 1)
        dim = opts.int("dim", vec.shape[0])
        opts.require(
            dim > 0 and dim % vec.shape[0] == 0,
            f"dim={dim} must be a positive multiple of the vector's dimension {vec.shape[0]}",
            "dim",
        )
        init: FrozenArray | Initializer = FrozenArray(vec)
    else:
        dim = positive_dim(opts)
        param_mean = opts.float("param-mean", 0.0)
        param_stddev = opts.float("param-stddev", 0.0)
        block_dim = opts.int("block-dim", dim)
        opts.require(
            block_dim > 0 and dim % block_dim == 0,
            f"block-dim={block_dim} must be positive and divide dim={dim}",
            "block-dim",
        )
        init = normal_init((block_dim,), param_stddev, param_mean)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    opts.finish()
    return PerElementOffsetComponent(name, input, Weight(init, param_name(name, "offsets")), dim, options=tuple(meta))


def fixed_scale_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: scales=FILE (nothing else), or dim with scale (every element = scale; default random N(0, 1))."""
    opts = ComponentOptionReader("FixedScaleComponent", name, options)

    def default() -> Initializer:
        scale = opts.float("scale", None)
        dim = positive_dim(opts)
        return normal_init((dim,), 1.0) if scale is None else normal_init((dim,), 0.0, scale)

    init = _vector_or(opts, read_matrix, "scales", default)
    opts.finish()
    return FixedScaleComponent(name, input, FixedWeight(init, param_name(name, "scales")))


def fixed_bias_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: bias=FILE (nothing else), or dim (random N(0, 1) bias, for tests)."""
    opts = ComponentOptionReader("FixedBiasComponent", name, options)
    init = _vector_or(opts, read_matrix, "bias", lambda: normal_init((positive_dim(opts),), 1.0))
    opts.finish()
    return FixedBiasComponent(name, input, FixedWeight(init, param_name(name, "bias")))


def constant_function_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (required), is-updatable (true), use-natural-gradient (true),
    output-mean (0.0), output-stddev (0.0); learning rates."""
    opts = ComponentOptionReader("ConstantFunctionComponent", name, options)
    meta = updatable_options(opts)
    output_dim = positive_dim(opts, "output-dim")
    input_dim = positive_dim(opts, "input-dim")
    is_updatable = opts.bool("is-updatable", True)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    output_mean = opts.float("output-mean", 0.0)
    output_stddev = opts.float("output-stddev", 0.0)
    opts.finish()
    weight_class = Weight if is_updatable else FixedWeight
    output = weight_class(normal_init((output_dim,), output_stddev, output_mean), param_name(name, "output"))
    return ConstantFunctionComponent(name, input, output, input_dim, is_updatable, options=tuple(meta))


def constant_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's ConstantComponent::InitFromConfig): output-dim (required), is-updatable (true),
    use-natural-gradient (true), output-mean (0.0), output-stddev (0.0); learning rates. It reads no input."""
    opts = ComponentOptionReader("ConstantComponent", name, options)
    meta = updatable_options(opts)
    output_dim = positive_dim(opts, "output-dim")
    is_updatable = opts.bool("is-updatable", True)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    output_mean = opts.float("output-mean", 0.0)
    output_stddev = opts.float("output-stddev", 0.0)
    opts.finish()
    weight_class = Weight if is_updatable else FixedWeight
    output = weight_class(normal_init((output_dim,), output_stddev, output_mean), param_name(name, "output"))
    return ConstantComponent(name, input, output, is_updatable, options=tuple(meta))


# ----- config options ----------------------------------------------------------------------------


def _scale_and_offset_options(c: Any) -> list[tuple[str, Any]]:
    return [("dim", c.dim), ("block-dim", param_shape(c.scales)[0])] + meta_options(
        c, LEARNING + ("use-natural-gradient", "rank")
    )


def _per_element_scale_options(c: Any, keys: tuple[str, ...] = LEARNING) -> list[tuple[str, Any]]:
    return [("dim", c.input_dim)] + init_options(c.params, "param-stddev", "param-mean") + meta_options(c, keys)


def _natural_gradient_per_element_scale_options(c: Any) -> list[tuple[str, Any]]:
    return _per_element_scale_options(c, LEARNING + ("rank", "update-period", "num-samples-history", "alpha"))


def _per_element_offset_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("dim", c.dim), ("block-dim", param_shape(c.offsets)[0])]
        + init_options(c.offsets, "param-stddev", "param-mean")
        + meta_options(c, LEARNING + ("use-natural-gradient",))
    )


def _fixed_scale_options(c: Any) -> list[tuple[str, Any]]:
    init = getattr(c.scales, "init", None)
    out: list[tuple[str, Any]] = [("dim", c.input_dim)]
    if isinstance(init, Full):
        out.append(("scale", init.value))
    elif isinstance(init, Zeros):
        out.append(("scale", 0.0))
    return out


def _fixed_bias_options(c: Any) -> list[tuple[str, Any]]:
    return [("dim", c.input_dim)]


def _constant_function_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("input-dim", c.in_dim), ("output-dim", c.output_dim), ("is-updatable", c.is_updatable)]
        + init_options(c.output, "output-stddev", "output-mean")
        + meta_options(c, LEARNING + ("use-natural-gradient",))
    )


def _constant_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("output-dim", c.output_dim), ("is-updatable", c.is_updatable)]
        + init_options(c.output, "output-stddev", "output-mean")
        + meta_options(c, LEARNING + ("use-natural-gradient",))
    )


# ----- reading model-file fields ---------------------------------------------------------------


def _read_scale_and_offset(f: ModelFields) -> dict[str, Any]:
    scales = f.array("Scales", 1)
    out = {"dim": dim_token(f), "block-dim": len(scales), **updatable_field_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("Rank"):
        out["rank"] = f.int("Rank")
    return out


def _read_per_element_scale(f: ModelFields) -> dict[str, Any]:
    return {"dim": vector_dim(f, "Params"), **updatable_field_options(f)}


def _read_natural_gradient_per_element_scale(f: ModelFields) -> dict[str, Any]:
    out = _read_per_element_scale(f)
    for token, key, read in (
        ("Rank", "rank", f.int),
        ("UpdatePeriod", "update-period", f.int),
        ("NumSamplesHistory", "num-samples-history", f.float),
        ("Alpha", "alpha", f.float),
    ):
        if f.has(token):
            out[key] = read(token)
    return out


def _read_per_element_offset(f: ModelFields) -> dict[str, Any]:
    offsets = f.array("Offsets", 1)
    dim = dim_token(f) if f.has("Dim") else vector_dim(f, "Offsets")
    out = {"dim": dim, "block-dim": len(offsets), **updatable_field_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    return out


def _read_constant_function(f: ModelFields) -> dict[str, Any]:
    output = f.array("Output", 1)
    f.dims_from("output", "Output", f"has {len(output)} elements")
    input_dim = f.int("InputDim")
    f.dims_from("input", "InputDim", f"is {input_dim}")
    out = {
        "input-dim": input_dim,
        "output-dim": len(output),
        "is-updatable": f.bool("IsUpdatable", True),
        **updatable_field_options(f),
    }
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    return out


def _read_constant(f: ModelFields) -> dict[str, Any]:
    output = f.array("Output", 1)
    f.dims_from("output", "Output", f"has {len(output)} elements")
    f.dims_from("input", "Output", f"has {len(output)} elements (a ConstantComponent's input dim is its output dim)")
    out = {"output-dim": len(output), "is-updatable": f.bool("IsUpdatable", True), **updatable_field_options(f)}
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    return out


def _read_vector_dim(token: str) -> Callable[[ModelFields], dict[str, Any]]:
    """The reader of a fixed component's one field, its vector `token` (FixedScale's, FixedBias's): its dim."""
    return lambda f: {"dim": vector_dim(f, token)}


# ----- writing model-file fields ---------------------------------------------------------------


def _write_scale_and_offset(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("Dim", c.dim),
        ("Scales", p("scales")),
        ("Offsets", p("offsets")),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
        ("Rank", int(option_or(c, "rank", 20))),
    ]


def _write_per_element_scale(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [("Params", p("params"))]


def _write_natural_gradient_per_element_scale(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return _write_per_element_scale(c, p) + [
        ("IsGradient", bool(option_or(c, "is-gradient", False))),
        ("Rank", int(option_or(c, "rank", 8))),
        ("UpdatePeriod", int(option_or(c, "update-period", 10))),
        ("NumSamplesHistory", f32(option_or(c, "num-samples-history", 2000.0))),
        ("Alpha", f32(option_or(c, "alpha", 4.0))),
    ]


def _write_per_element_offset(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("Offsets", p("offsets")),
        ("Dim", c.dim),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
    ]


def _write_vector(token: str, param: str) -> Callable[[Any, ParamValues], list[tuple[str, Any]]]:
    """The writer of a fixed component's one field: its parameter `param` as the vector `token`."""
    return lambda c, p: [(token, p(param))]


def _write_constant_function(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("InputDim", c.in_dim),
        ("Output", p("output")),
        ("IsUpdatable", bool(c.is_updatable)),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
    ]


def _write_constant(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("Output", p("output")),
        ("IsUpdatable", bool(c.is_updatable)),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "ScaleAndOffsetComponent",
        ScaleAndOffsetComponent,
        scale_and_offset_component,
        _scale_and_offset_options,
        {**UPDATABLE_KINDS, "Dim": INT, "Scales": VECTOR, "Offsets": VECTOR, "UseNaturalGradient": BOOL, "Rank": INT},
        _read_scale_and_offset,
        _write_scale_and_offset,
    )
)
register(
    KaldiComponentType(
        "PerElementScaleComponent",
        PerElementScaleComponent,
        per_element_scale_component,
        _per_element_scale_options,
        {**UPDATABLE_KINDS, "Params": VECTOR},
        _read_per_element_scale,
        _write_per_element_scale,
    )
)
register(
    KaldiComponentType(
        "NaturalGradientPerElementScaleComponent",
        NaturalGradientPerElementScaleComponent,
        natural_gradient_per_element_scale_component,
        _natural_gradient_per_element_scale_options,
        {
            **UPDATABLE_KINDS,
            "Params": VECTOR,
            "Rank": INT,
            "UpdatePeriod": INT,
            "NumSamplesHistory": FLOAT,
            "Alpha": FLOAT,
            "MaxChangePerMinibatch": FLOAT,
        },
        _read_natural_gradient_per_element_scale,
        _write_natural_gradient_per_element_scale,
    )
)
register(
    KaldiComponentType(
        "PerElementOffsetComponent",
        PerElementOffsetComponent,
        per_element_offset_component,
        _per_element_offset_options,
        {**UPDATABLE_KINDS, "Offsets": VECTOR, "Dim": INT, "UseNaturalGradient": BOOL},
        _read_per_element_offset,
        _write_per_element_offset,
    )
)
register(
    KaldiComponentType(
        "FixedScaleComponent",
        FixedScaleComponent,
        fixed_scale_component,
        _fixed_scale_options,
        {"Scales": VECTOR},
        _read_vector_dim("Scales"),
        _write_vector("Scales", "scales"),
    )
)
register(
    KaldiComponentType(
        "FixedBiasComponent",
        FixedBiasComponent,
        fixed_bias_component,
        _fixed_bias_options,
        {"Bias": VECTOR},
        _read_vector_dim("Bias"),
        _write_vector("Bias", "bias"),
    )
)
register(
    KaldiComponentType(
        "ConstantFunctionComponent",
        ConstantFunctionComponent,
        constant_function_component,
        _constant_function_options,
        {**UPDATABLE_KINDS, "InputDim": INT, "Output": VECTOR, "IsUpdatable": BOOL, "UseNaturalGradient": BOOL},
        _read_constant_function,
        _write_constant_function,
    )
)
register(
    KaldiComponentType(
        "ConstantComponent",
        ConstantComponent,
        constant_component,
        _constant_options,
        {**UPDATABLE_KINDS, "Output": VECTOR, "IsUpdatable": BOOL, "UseNaturalGradient": BOOL},
        _read_constant,
        _write_constant,
    )
)
