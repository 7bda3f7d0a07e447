"""Kaldi's affine family: AffineComponent, NaturalGradientAffineComponent, LinearComponent,
FixedAffineComponent, BlockAffineComponent, RepeatedAffineComponent and
NaturalGradientRepeatedAffineComponent (nnet-simple-component.cc).

Config options with Kaldi's defaults (InitFromConfig), the options that build
a component again, the fields of its model files in Kaldi's write order
(Write) and the kinds of their tokens (Read), one record per type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.affine import (
    AffineComponent,
    BlockAffineComponent,
    FixedAffineComponent,
    LinearComponent,
    NaturalGradientAffineComponent,
    NaturalGradientRepeatedAffineComponent,
    RepeatedAffineComponent,
)
from ...components.base import Component, FixedWeight, param_name
from ...core.frozen import FrozenArray
from ...core.initializers import Initializer
from ...core.layer import Layer, Weight
from ..models.token_kinds import BOOL, DOUBLE, FLOAT, INT, MATRIX, VECTOR
from .fields import (
    UPDATABLE_KINDS,
    ModelFields,
    ParamValues,
    f32,
    matrix_dims,
    option_or,
    updatable_field_options,
    updatable_fields,
)
from .options import (
    LEARNING,
    NATURAL,
    ComponentOptionReader,
    MatrixReader,
    init_options,
    load_array,
    meta_options,
    normal_init,
    updatable_options,
)
from .registry import KaldiComponentType, register

__all__ = [
    "affine_component",
    "block_affine_component",
    "fixed_affine_component",
    "linear_component",
    "natural_gradient_affine_component",
    "natural_gradient_repeated_affine_component",
    "repeated_affine_component",
]

# ----- building from config options --------------------------------------------------------


def _matrix_option(
    opts: ComponentOptionReader, read_matrix: MatrixReader | None, with_bias: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """Kaldi's `matrix=` option: the parameters from a file, checked against input-dim/output-dim."""
    mat = load_array(opts, "matrix", read_matrix, 2)
    if with_bias:
        opts.require(
            mat.shape[1] >= 2, f"matrix={opts.raw['matrix']} needs at least 2 columns (the last is the bias)", "matrix"
        )
        linear, bias = mat[:, :-1], mat[:, -1]
    else:
        linear, bias = mat, None
    for key, want in (("input-dim", linear.shape[1]), ("output-dim", linear.shape[0])):
        if opts.has(key):
            got = opts.int(key)
            opts.require(
                got == want, f"{key}={got} does not match the matrix ({linear.shape[0]} x {linear.shape[1]})", key
            )
    return linear, bias


def _dims_option(opts: ComponentOptionReader) -> tuple[int, int]:
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.positive("input-dim", input_dim)
    opts.positive("output-dim", output_dim)
    return input_dim, output_dim


def _natural_gradient_options(opts: ComponentOptionReader, input_dim: int, output_dim: int) -> list[tuple[str, Any]]:
    num_samples_history = opts.float("num-samples-history", 2000.0)
    alpha = opts.float("alpha", 4.0)
    rank_in = opts.int("rank-in", -1)
    rank_out = opts.int("rank-out", -1)
    update_period = opts.int("update-period", 4)
    if rank_in < 0:
        rank_in = min(20, (input_dim + 1) // 2)
    if rank_out < 0:
        rank_out = min(80, (output_dim + 1) // 2)
    return [
        ("num-samples-history", num_samples_history),
        ("alpha", alpha),
        ("rank-in", rank_in),
        ("rank-out", rank_out),
        ("update-period", update_period),
    ]


def _affine(
    cls: type[AffineComponent],
    name: str,
    options: Mapping[str, Any],
    input: Layer,
    read_matrix: MatrixReader | None,
    natural_gradient: bool,
) -> Component:
    opts = ComponentOptionReader(cls.kaldi_type, name, options)
    meta = updatable_options(opts)
    if opts.has("matrix"):
        linear, bias = _matrix_option(opts, read_matrix, with_bias=True)
        output_dim, input_dim = linear.shape
        w_init: FrozenArray | Initializer
        b_init: FrozenArray | Initializer
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
        options=tuple(meta),
    )


def affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (or matrix=FILE, `[W b]`), param-stddev (1/sqrt(input-dim)),
    bias-stddev (1.0), orthonormal-constraint, and the learning-rate options."""
    return _affine(AffineComponent, name, options, input, read_matrix, natural_gradient=False)


def natural_gradient_affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """As AffineComponent, plus bias-mean (0.0) and the natural-gradient options."""
    return _affine(NaturalGradientAffineComponent, name, options, input, read_matrix, natural_gradient=True)


def linear_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (or matrix=FILE), param-stddev (1/sqrt(input-dim)),
    use-natural-gradient and the natural-gradient options, orthonormal-constraint, learning rates."""
    opts = ComponentOptionReader("LinearComponent", name, options)
    meta = updatable_options(opts)
    if opts.has("matrix"):
        linear, _ = _matrix_option(opts, read_matrix, with_bias=False)
        output_dim, input_dim = linear.shape
        init: FrozenArray | Initializer = FrozenArray(linear)
    else:
        input_dim, output_dim = _dims_option(opts)
        param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(input_dim))
        opts.nonnegative("param-stddev", param_stddev)
        init = normal_init((output_dim, input_dim), param_stddev)
    meta += _natural_gradient_options(opts, input_dim, output_dim)
    meta.append(("use-natural-gradient", opts.bool("use-natural-gradient", True)))
    meta.append(("orthonormal-constraint", opts.float("orthonormal-constraint", 0.0)))
    opts.finish()
    return LinearComponent(name, input, Weight(init, param_name(name, "params")), options=tuple(meta))


def fixed_affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: matrix=FILE (`[W b]`, nothing else allowed), or input-dim and output-dim
    (random N(0, 1) parameters, for tests)."""
    opts = ComponentOptionReader("FixedAffineComponent", name, options)
    if opts.has("matrix"):
        others = [k for k in opts.raw if k != "matrix"]
        opts.require(
            not others,
            f"with matrix= no other option is allowed (got {', '.join(others)})",
            others[0] if others else None,
        )
        linear, bias = _matrix_option(opts, read_matrix, with_bias=True)
        w_init: FrozenArray | Initializer
        b_init: FrozenArray | Initializer
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


def block_affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim, num-blocks (all required), param-stddev
    (1/sqrt(input-dim/num-blocks)), bias-stddev (1.0), bias-mean (0.0), learning rates."""
    opts = ComponentOptionReader("BlockAffineComponent", name, options)
    input_dim, output_dim = _dims_option(opts)
    num_blocks = opts.int("num-blocks")
    opts.positive("num-blocks", num_blocks)
    opts.require(
        input_dim % num_blocks == 0 and output_dim % num_blocks == 0,
        f"num-blocks={num_blocks} must divide input-dim={input_dim} and output-dim={output_dim}",
        "num-blocks",
    )
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
        options=tuple(meta),
    )


def _repeated(cls: type[RepeatedAffineComponent], name: str, options: Mapping[str, Any], input: Layer) -> Component:
    opts = ComponentOptionReader(cls.kaldi_type, name, options)
    meta = updatable_options(opts)
    num_repeats = opts.int("num-repeats")
    input_dim, output_dim = _dims_option(opts)
    opts.positive("num-repeats", num_repeats)
    opts.require(
        input_dim % num_repeats == 0, f"num-repeats={num_repeats} must divide input-dim={input_dim}", "num-repeats"
    )
    opts.require(
        output_dim % num_repeats == 0, f"num-repeats={num_repeats} must divide output-dim={output_dim}", "num-repeats"
    )
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
        options=tuple(meta),
    )


def repeated_affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: num-repeats, input-dim, output-dim (required), param-stddev
    (1/sqrt(input-dim/num-repeats)), bias-mean (0.0), bias-stddev (0.0), learning rates."""
    return _repeated(RepeatedAffineComponent, name, options, input)


def natural_gradient_repeated_affine_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """As RepeatedAffineComponent (Kaldi fixes its natural-gradient settings)."""
    return _repeated(NaturalGradientRepeatedAffineComponent, name, options, input)


# ----- writing config options ----------------------------------------------------------------


def _affine_options(c: Any, natural: bool = False) -> list[tuple[str, Any]]:
    out = [("input-dim", c.input_dim), ("output-dim", c.output_dim)]
    out += init_options(c.linear_params, "param-stddev", None)
    out += init_options(c.bias_params, "bias-stddev", "bias-mean" if natural else None)
    out += meta_options(c, LEARNING + ("orthonormal-constraint",) + (NATURAL if natural else ()))
    return out


def _natural_gradient_affine_options(c: Any) -> list[tuple[str, Any]]:
    return _affine_options(c, natural=True)


def _linear_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("input-dim", c.input_dim), ("output-dim", c.output_dim)]
        + init_options(c.params, "param-stddev", None)
        + meta_options(c, LEARNING + NATURAL + ("use-natural-gradient", "orthonormal-constraint"))
    )


def _fixed_affine_options(c: Any) -> list[tuple[str, Any]]:
    return [("input-dim", c.input_dim), ("output-dim", c.output_dim)]


def _block_affine_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("input-dim", c.input_dim), ("output-dim", c.output_dim), ("num-blocks", c.num_blocks)]
        + init_options(c.linear_params, "param-stddev", None)
        + init_options(c.bias_params, "bias-stddev", "bias-mean")
        + meta_options(c, LEARNING)
    )


def _repeated_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("num-repeats", c.num_repeats), ("input-dim", c.input_dim), ("output-dim", c.output_dim)]
        + init_options(c.linear_params, "param-stddev", None)
        + init_options(c.bias_params, "bias-stddev", "bias-mean")
        + meta_options(c, LEARNING)
    )


# ----- reading model-file fields ---------------------------------------------------------------


def _read_affine(f: ModelFields) -> dict[str, Any]:
    input_dim, output_dim = matrix_dims(f, "LinearParams")
    out = {"input-dim": input_dim, "output-dim": output_dim, **updatable_field_options(f)}
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    return out


def _read_natural_gradient_affine(f: ModelFields) -> dict[str, Any]:
    out = _read_affine(f)
    for token, key, read in (
        ("RankIn", "rank-in", f.int),
        ("RankOut", "rank-out", f.int),
        ("UpdatePeriod", "update-period", f.int),
        ("NumSamplesHistory", "num-samples-history", f.float),
        ("Alpha", "alpha", f.float),
    ):
        if f.has(token):
            out[key] = read(token)
    return out


def _read_linear(f: ModelFields) -> dict[str, Any]:
    input_dim, output_dim = matrix_dims(f, "Params")
    out = {"input-dim": input_dim, "output-dim": output_dim, **updatable_field_options(f)}
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    for token, key, read in (
        ("Alpha", "alpha", f.float),
        ("NumSamplesHistory", "num-samples-history", f.float),
        ("UpdatePeriod", "update-period", f.int),
    ):
        if f.has(token):
            out[key] = read(token)
    return out


def _read_fixed_affine(f: ModelFields) -> dict[str, Any]:
    input_dim, output_dim = matrix_dims(f, "LinearParams")
    return {"input-dim": input_dim, "output-dim": output_dim}


def _read_block_affine(f: ModelFields) -> dict[str, Any]:
    num_blocks = f.int("NumBlocks")
    if num_blocks <= 0:
        raise f.error(f"must be positive, got {num_blocks}", "NumBlocks")
    input_dim, output_dim = matrix_dims(f, "LinearParams", in_scale=num_blocks)
    return {"input-dim": input_dim, "output-dim": output_dim, "num-blocks": num_blocks, **updatable_field_options(f)}


def _read_repeated_affine(f: ModelFields) -> dict[str, Any]:
    num_repeats = f.int("NumRepeats")
    if num_repeats <= 0:
        raise f.error(f"must be positive, got {num_repeats}", "NumRepeats")
    input_dim, output_dim = matrix_dims(f, "LinearParams", in_scale=num_repeats, out_scale=num_repeats)
    return {"input-dim": input_dim, "output-dim": output_dim, "num-repeats": num_repeats, **updatable_field_options(f)}


# ----- writing model-file fields ---------------------------------------------------------------


def _write_affine(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out = updatable_fields(c) + [("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))]
    orthonormal = option_or(c, "orthonormal-constraint", 0.0)
    if orthonormal != 0.0:
        out.append(("OrthonormalConstraint", f32(orthonormal)))
    return out


def _write_natural_gradient_affine(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out = updatable_fields(c) + [("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))]
    out += [("RankIn", int(option_or(c, "rank-in", 20))), ("RankOut", int(option_or(c, "rank-out", 80)))]
    orthonormal = option_or(c, "orthonormal-constraint", 0.0)
    if orthonormal != 0.0:
        out.append(("OrthonormalConstraint", f32(orthonormal)))
    out += [
        ("UpdatePeriod", int(option_or(c, "update-period", 4))),
        ("NumSamplesHistory", f32(option_or(c, "num-samples-history", 2000.0))),
        ("Alpha", f32(option_or(c, "alpha", 4.0))),
    ]
    return out


def _write_linear(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out = updatable_fields(c) + [("Params", p("params"))]
    orthonormal = option_or(c, "orthonormal-constraint", 0.0)
    if orthonormal != 0.0:
        out.append(("OrthonormalConstraint", f32(orthonormal)))
    return out + [
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
        ("RankInOut", (int(option_or(c, "rank-in", 20)), int(option_or(c, "rank-out", 80)))),
        ("Alpha", f32(option_or(c, "alpha", 4.0))),
        ("NumSamplesHistory", f32(option_or(c, "num-samples-history", 2000.0))),
        ("UpdatePeriod", int(option_or(c, "update-period", 4))),
    ]


def _write_fixed_affine(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [("LinearParams", p("linear_params")), ("BiasParams", p("bias_params"))]


def _write_block_affine(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("NumBlocks", c.num_blocks),
        ("LinearParams", p("linear_params")),
        ("BiasParams", p("bias_params")),
    ]


def _write_repeated_affine(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("NumRepeats", c.num_repeats),
        ("LinearParams", p("linear_params")),
        ("BiasParams", p("bias_params")),
    ]


# ----- the records ---------------------------------------------------------------------------

_AFFINE_KINDS = {**UPDATABLE_KINDS, "LinearParams": MATRIX, "BiasParams": VECTOR, "OrthonormalConstraint": FLOAT}
_REPEATED_KINDS = {**UPDATABLE_KINDS, "NumRepeats": INT, "LinearParams": MATRIX, "BiasParams": VECTOR}

register(
    KaldiComponentType(
        "AffineComponent",
        AffineComponent,
        affine_component,
        _affine_options,
        _AFFINE_KINDS,
        _read_affine,
        _write_affine,
    )
)
register(
    KaldiComponentType(
        "NaturalGradientAffineComponent",
        NaturalGradientAffineComponent,
        natural_gradient_affine_component,
        _natural_gradient_affine_options,
        {
            **_AFFINE_KINDS,
            "RankIn": INT,
            "RankOut": INT,
            "UpdatePeriod": INT,
            "NumSamplesHistory": FLOAT,
            "Alpha": FLOAT,
            # read for back-compatibility only
            "MaxChangePerSample": FLOAT,
            "UpdateCount": DOUBLE,
            "ActiveScalingCount": DOUBLE,
            "MaxChangeScaleStats": DOUBLE,
        },
        _read_natural_gradient_affine,
        _write_natural_gradient_affine,
    )
)
register(
    KaldiComponentType(
        "LinearComponent",
        LinearComponent,
        linear_component,
        _linear_options,
        {
            **UPDATABLE_KINDS,
            "Params": MATRIX,
            "OrthonormalConstraint": FLOAT,
            "UseNaturalGradient": BOOL,
            "RankInOut": (INT, INT),
            "Alpha": FLOAT,
            "NumSamplesHistory": FLOAT,
            "UpdatePeriod": INT,
        },
        _read_linear,
        _write_linear,
    )
)
register(
    KaldiComponentType(
        "FixedAffineComponent",
        FixedAffineComponent,
        fixed_affine_component,
        _fixed_affine_options,
        {"LinearParams": MATRIX, "BiasParams": VECTOR},
        _read_fixed_affine,
        _write_fixed_affine,
    )
)
register(
    KaldiComponentType(
        "BlockAffineComponent",
        BlockAffineComponent,
        block_affine_component,
        _block_affine_options,
        {**UPDATABLE_KINDS, "NumBlocks": INT, "LinearParams": MATRIX, "BiasParams": VECTOR},
        _read_block_affine,
        _write_block_affine,
    )
)
register(
    KaldiComponentType(
        "RepeatedAffineComponent",
        RepeatedAffineComponent,
        repeated_affine_component,
        _repeated_options,
        _REPEATED_KINDS,
        _read_repeated_affine,
        _write_repeated_affine,
    )
)
register(
    KaldiComponentType(
        "NaturalGradientRepeatedAffineComponent",
        NaturalGradientRepeatedAffineComponent,
        natural_gradient_repeated_affine_component,
        _repeated_options,
        _REPEATED_KINDS,
        _read_repeated_affine,
        _write_repeated_affine,
    )
)
