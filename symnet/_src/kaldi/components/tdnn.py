"""Kaldi's TdnnComponent (nnet-tdnn-component.cc): config options with Kaldi's defaults, the options
that build it again, the fields of its model files in Kaldi's write order and the kinds of their tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.base import Component, param_name
from ...components.tdnn import TdnnComponent
from ...core.initializers import Zeros
from ...core.layer import Layer, Weight
from ..models.token_kinds import BOOL, FLOAT, INT, INTS, MATRIX, VECTOR
from .fields import (
    UPDATABLE_KINDS,
    ModelFields,
    ParamValues,
    f32,
    option_or,
    stored_float,
    updatable_field_options,
    updatable_fields,
)
from .options import (
    LEARNING,
    ComponentOptionReader,
    MatrixReader,
    init_options,
    meta_options,
    normal_init,
    updatable_options,
)
from .registry import KaldiComponentType, register

__all__ = ["tdnn_component"]


def tdnn_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's TdnnComponent::InitFromConfig): time-offsets (required, e.g. -1,0,1; distinct),
    input-dim, output-dim (required), use-bias (true), param-stddev (1/sqrt(input-dim * num-offsets); a
    negative value means the default), bias-stddev (1.0), bias-mean (0.0), orthonormal-constraint (0.0),
    use-natural-gradient (true), rank-in (min(20, (spliced-dim + 1) / 2)), rank-out (min(80, (output-dim + 1) / 2)),
    alpha-in (4.0), alpha-out (4.0), num-samples-history (2000); learning rates.
    """
    opts = ComponentOptionReader("TdnnComponent", name, options)
    meta = updatable_options(opts)
    time_offsets = opts.int_list("time-offsets")
    opts.require(len(time_offsets) > 0, "time-offsets must not be empty", "time-offsets")
    opts.require(
        len(set(time_offsets)) == len(time_offsets),
        f"repeated time-offsets: {','.join(map(str, time_offsets))}",
        "time-offsets",
    )
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.positive("input-dim", input_dim)
    opts.positive("output-dim", output_dim)
    spliced = input_dim * len(time_offsets)
    param_stddev = opts.float("param-stddev", -1.0)
    if param_stddev < 0.0:
        param_stddev = 1.0 / math.sqrt(spliced)
    bias_stddev = opts.float("bias-stddev", 1.0)
    bias_mean = opts.float("bias-mean", 0.0)
    use_bias = opts.bool("use-bias", True)
    meta.append(("orthonormal-constraint", opts.float("orthonormal-constraint", 0.0)))
    rank_in = opts.int("rank-in", -1)
    rank_out = opts.int("rank-out", -1)
    meta += [
        ("use-natural-gradient", opts.bool("use-natural-gradient", True)),
        ("rank-in", rank_in if rank_in >= 0 else min(20, (spliced + 1) // 2)),
        ("rank-out", rank_out if rank_out >= 0 else min(80, (output_dim + 1) // 2)),
        ("alpha-in", opts.float("alpha-in", 4.0)),
        ("alpha-out", opts.float("alpha-out", 4.0)),
        ("num-samples-history", opts.float("num-samples-history", 2000.0)),
    ]
    opts.finish()
    bias_init = normal_init((output_dim,), bias_stddev, bias_mean) if use_bias else Zeros((0,))
    return TdnnComponent(
        name,
        input,
        Weight(normal_init((output_dim, spliced), param_stddev), param_name(name, "linear_params")),
        Weight(bias_init, param_name(name, "bias_params")),
        time_offsets,
        options=tuple(meta),
    )


def _tdnn_options(c: Any) -> list[tuple[str, Any]]:
    out = [
        ("input-dim", c.input_dim),
        ("output-dim", c.output_dim),
        ("time-offsets", c.time_offsets),
        ("use-bias", c.use_bias),
    ]
    out += init_options(c.linear_params, "param-stddev", None)
    if c.use_bias:
        out += init_options(c.bias_params, "bias-stddev", "bias-mean")
    return out + meta_options(
        c,
        LEARNING
        + (
            "orthonormal-constraint",
            "use-natural-gradient",
            "rank-in",
            "rank-out",
            "alpha-in",
            "alpha-out",
            "num-samples-history",
        ),
    )


def _read_tdnn(f: ModelFields) -> dict[str, Any]:
    offsets = f.ints("TimeOffsets")
    if not offsets:
        raise f.error("no time offsets", "TimeOffsets")
    m = f.array("LinearParams", 2)
    if m.shape[1] % len(offsets) or m.shape[0] == 0 or m.shape[1] == 0:
        raise f.error(
            f"shape {m.shape} does not fit {len(offsets)} time offsets (its columns must be a multiple)", "LinearParams"
        )
    f.dims_from("input", "LinearParams", f"has {m.shape[1]} columns for {len(offsets)} time offsets")
    f.dims_from("output", "LinearParams", f"has {m.shape[0]} rows")
    bias = f.array("BiasParams", 1)
    out = {
        "time-offsets": offsets,
        "input-dim": m.shape[1] // len(offsets),
        "output-dim": m.shape[0],
        "use-bias": len(bias) > 0,
        **updatable_field_options(f),
    }
    if f.has("OrthonormalConstraint"):
        out["orthonormal-constraint"] = f.float("OrthonormalConstraint")
    if f.has("UseNaturalGradient"):
        out["use-natural-gradient"] = f.bool("UseNaturalGradient")
    if f.has("NumSamplesHistory"):
        out["num-samples-history"] = f.float("NumSamplesHistory")
    if f.has("AlphaInOut"):
        out["alpha-in"], out["alpha-out"] = (stored_float(v) for v in f.pair("AlphaInOut"))
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    return out


def _write_tdnn(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("TimeOffsets", np.array(c.time_offsets, dtype=np.int32)),
        ("LinearParams", p("linear_params")),
        ("BiasParams", p("bias_params")),
        ("OrthonormalConstraint", f32(option_or(c, "orthonormal-constraint", 0.0))),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
        ("NumSamplesHistory", f32(option_or(c, "num-samples-history", 2000.0))),
        ("AlphaInOut", (f32(option_or(c, "alpha-in", 4.0)), f32(option_or(c, "alpha-out", 4.0)))),
        ("RankInOut", (int(option_or(c, "rank-in", 20)), int(option_or(c, "rank-out", 80)))),
    ]


register(
    KaldiComponentType(
        "TdnnComponent",
        TdnnComponent,
        tdnn_component,
        _tdnn_options,
        {
            **UPDATABLE_KINDS,
            "TimeOffsets": INTS,
            "LinearParams": MATRIX,
            "BiasParams": VECTOR,
            "OrthonormalConstraint": FLOAT,
            "JointL2RegularizeProportion": FLOAT,
            "UseNaturalGradient": BOOL,
            "NumSamplesHistory": FLOAT,
            "AlphaInOut": (FLOAT, FLOAT),
            "RankInOut": (INT, INT),
        },
        _read_tdnn,
        _write_tdnn,
    )
)
