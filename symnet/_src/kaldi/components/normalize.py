"""Kaldi's normalisation components: NormalizeComponent and BatchNormComponent (nnet-normalize-component.cc).

Config options with Kaldi's defaults, the options that build a component
again, the fields of its model files in Kaldi's write order and the kinds of
their tokens, one record per type. BatchNorm's statistics (`<Count>`,
`<StatsMean>`, `<StatsVar>`) are its FixedWeights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.base import Component, FixedWeight, param_name
from ...components.normalize import BatchNormComponent, NormalizeComponent
from ...core.initializers import Zeros
from ...core.layer import Layer
from ..models.token_kinds import BOOL, DOUBLE, FLOAT, INT, VECTOR
from .fields import ModelFields, ParamValues, dim_token, f32
from .options import ComponentOptionReader, MatrixReader, field_options
from .registry import KaldiComponentType, register

__all__ = ["batch_norm_component", "normalize_component"]


def normalize_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim or input-dim (required), block-dim (input-dim), target-rms (1.0), add-log-stddev (false)."""
    opts = ComponentOptionReader("NormalizeComponent", name, options)
    key = "dim" if opts.has("dim") else "input-dim"
    input_dim = opts.int(key)
    opts.positive(key, input_dim)
    block_dim = opts.int("block-dim", input_dim)
    target_rms = opts.float("target-rms", 1.0)
    add_log_stddev = opts.bool("add-log-stddev", False)
    opts.positive("target-rms", target_rms)
    opts.require(
        block_dim > 0 and input_dim % block_dim == 0,
        f"block-dim={block_dim} must be positive and divide the input dim {input_dim}",
        "block-dim",
    )
    opts.finish()
    return NormalizeComponent(name, input, input_dim, block_dim, target_rms, add_log_stddev)


def batch_norm_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), block-dim (dim), epsilon (0.001), target-rms (1.0), test-mode (false).

    The statistics start as Kaldi's fresh component's: count 0, mean 0, variance 0.
    """
    opts = ComponentOptionReader("BatchNormComponent", name, options)
    dim = opts.int("dim")
    opts.positive("dim", dim)
    block_dim = opts.int("block-dim", dim)
    epsilon = opts.float("epsilon", 1.0e-3)
    target_rms = opts.float("target-rms", 1.0)
    test_mode = opts.bool("test-mode", False)
    opts.require(
        block_dim > 0 and dim % block_dim == 0,
        f"block-dim={block_dim} must be positive and divide dim={dim}",
        "block-dim",
    )
    opts.positive("epsilon", epsilon)
    opts.positive("target-rms", target_rms)
    opts.finish()
    return BatchNormComponent(
        name,
        input,
        FixedWeight(Zeros((block_dim,)), param_name(name, "stats_mean")),
        FixedWeight(Zeros((block_dim,)), param_name(name, "stats_var")),
        FixedWeight(0.0, param_name(name, "count")),
        dim,
        block_dim,
        epsilon,
        target_rms,
        test_mode,
    )


# ----- config options and model-file fields ------------------------------------------------------


def _normalize_options(c: Any) -> list[tuple[str, Any]]:
    return [("dim", c.in_dim)] + field_options(c, "block_dim", "target_rms", "add_log_stddev")


def _batchnorm_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(c, "dim", "block_dim", "epsilon", "target_rms", "test_mode")


def _read_normalize(f: ModelFields) -> dict[str, Any]:
    out = {"input-dim": dim_token(f, "InputDim" if f.has("InputDim") else "Dim")}
    if f.has("BlockDim"):
        out["block-dim"] = f.int("BlockDim")
    out["target-rms"] = f.float("TargetRms", 1.0)
    out["add-log-stddev"] = f.bool("AddLogStddev", False)
    return out


def _read_batchnorm(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "block-dim": f.int("BlockDim"),
        "epsilon": f.float("Epsilon"),
        "target-rms": f.float("TargetRms"),
        "test-mode": f.bool("TestMode", False),
    }


def _write_normalize(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("InputDim", c.in_dim)]
    if c.block_dim != c.in_dim:
        out.append(("BlockDim", c.block_dim))
    return out + [("TargetRms", f32(c.target_rms)), ("AddLogStddev", bool(c.add_log_stddev))]


def _write_batchnorm(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    count = p("count")
    return [
        ("Dim", c.dim),
        ("BlockDim", c.block_dim),
        ("Epsilon", f32(c.epsilon)),
        ("TargetRms", f32(c.target_rms)),
        ("TestMode", bool(c.test_mode)),
        ("Count", np.float64(count.reshape(()))),
        ("StatsMean", p("stats_mean")),
        ("StatsVar", p("stats_var")),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "NormalizeComponent",
        NormalizeComponent,
        normalize_component,
        _normalize_options,
        {
            "Dim": INT,
            "InputDim": INT,
            "BlockDim": INT,
            "TargetRms": FLOAT,
            "AddLogStddev": BOOL,
            "ValueAvg": VECTOR,
            "DerivAvg": VECTOR,
            "Count": DOUBLE,
        },  # the last three: its old format
        _read_normalize,
        _write_normalize,
    )
)
register(
    KaldiComponentType(
        "BatchNormComponent",
        BatchNormComponent,
        batch_norm_component,
        _batchnorm_options,
        {
            "Dim": INT,
            "BlockDim": INT,
            "Epsilon": FLOAT,
            "TargetRms": FLOAT,
            "TestMode": BOOL,
            "Count": DOUBLE,
            "StatsMean": VECTOR,
            "StatsVar": VECTOR,
        },
        _read_batchnorm,
        _write_batchnorm,
    )
)
