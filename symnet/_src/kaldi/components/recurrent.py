"""Kaldi's recurrent cells: LstmNonlinearityComponent, GruNonlinearityComponent and
OutputGruNonlinearityComponent (nnet-combined-component.cc).

Config options with Kaldi's defaults, the options that build a component
again, the fields of its model files in Kaldi's write order and the kinds of
their tokens, one record per type. The cells' statistics (`<ValueAvg>`,
`<DerivAvg>`, `<Count>`, ...) are written empty for a fresh component.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.base import Component, param_name
from ...components.recurrent import GruNonlinearityComponent, LstmNonlinearityComponent, OutputGruNonlinearityComponent
from ...core.layer import Layer, Weight
from ..models.token_kinds import BOOL, DOUBLE, FLOAT, INT, MATRIX, VECTOR
from .fields import (
    UPDATABLE_KINDS,
    ModelFields,
    ParamValues,
    dim_token,
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

__all__ = ["gru_nonlinearity_component", "lstm_nonlinearity_component", "output_gru_nonlinearity_component"]


def lstm_nonlinearity_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: cell-dim (required), param-stddev (1.0), tanh-self-repair-threshold (0.2),
    sigmoid-self-repair-threshold (0.05), self-repair-scale (1e-5), use-dropout (false); learning rates.

    `options` gets Kaldi's `self-repair-config` vector (thresholds of the five
    nonlinearities i, f, c, o, m, then their five scales).
    """
    opts = ComponentOptionReader("LstmNonlinearityComponent", name, options)
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
    opts.require(
        0.0 <= tanh_threshold <= 1.0,
        f"tanh-self-repair-threshold={tanh_threshold} must be in [0, 1]",
        "tanh-self-repair-threshold",
    )
    opts.require(
        0.0 <= sigmoid_threshold <= 0.25,
        f"sigmoid-self-repair-threshold={sigmoid_threshold} must be in [0, 0.25]",
        "sigmoid-self-repair-threshold",
    )
    opts.require(
        0.0 <= self_repair_scale <= 0.1,
        f"self-repair-scale={self_repair_scale} must be in [0, 0.1]",
        "self-repair-scale",
    )
    thresholds = (sigmoid_threshold, sigmoid_threshold, tanh_threshold, sigmoid_threshold, tanh_threshold)
    meta.append(("self-repair-config", thresholds + (self_repair_scale,) * 5))
    return LstmNonlinearityComponent(
        name,
        input,
        Weight(normal_init((3, cell_dim), param_stddev), param_name(name, "params")),
        use_dropout,
        options=tuple(meta),
    )


def gru_nonlinearity_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: cell-dim (required), recurrent-dim (cell-dim; 0 < recurrent-dim <= cell-dim),
    param-stddev (1/sqrt(cell-dim)), self-repair-threshold (0.2), self-repair-scale (1e-5), alpha (4),
    rank-in (20), rank-out (80), update-period (4); learning rates."""
    opts = ComponentOptionReader("GruNonlinearityComponent", name, options)
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
    opts.require(
        0 < recurrent_dim <= cell_dim,
        f"recurrent-dim={recurrent_dim} must be in 1..cell-dim ({cell_dim})",
        "recurrent-dim",
    )
    opts.nonnegative("self-repair-threshold", threshold)
    opts.nonnegative("self-repair-scale", scale)
    opts.finish()
    return GruNonlinearityComponent(
        name,
        input,
        Weight(normal_init((cell_dim, recurrent_dim), param_stddev), param_name(name, "w_h")),
        options=tuple(meta),
    )


def output_gru_nonlinearity_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: cell-dim (required), param-mean (0.0), param-stddev (1.0), self-repair-threshold (0.2),
    self-repair-scale (1e-5), alpha (4), rank (8), update-period (10); learning rates."""
    opts = ComponentOptionReader("OutputGruNonlinearityComponent", name, options)
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
        name,
        input,
        Weight(normal_init((cell_dim,), param_stddev, param_mean), param_name(name, "w_h")),
        options=tuple(meta),
    )


# ----- config options ----------------------------------------------------------------------------


def _lstm_options(c: Any) -> list[tuple[str, Any]]:
    out = [("cell-dim", c.cell_dim)] + init_options(c.params, "param-stddev", None) + [("use-dropout", c.use_dropout)]
    config = c.option("self-repair-config")
    if config is not None and len(config) == 10:
        out += [
            ("sigmoid-self-repair-threshold", config[0]),
            ("tanh-self-repair-threshold", config[2]),
            ("self-repair-scale", config[5]),
        ]
    return out + meta_options(c, LEARNING)


def _gru_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("cell-dim", c.cell_dim), ("recurrent-dim", c.recurrent_dim)]
        + init_options(c.w_h, "param-stddev", None)
        + meta_options(
            c,
            LEARNING + ("self-repair-threshold", "self-repair-scale", "alpha", "rank-in", "rank-out", "update-period"),
        )
    )


def _output_gru_options(c: Any) -> list[tuple[str, Any]]:
    return (
        [("cell-dim", c.cell_dim)]
        + init_options(c.w_h, "param-stddev", "param-mean")
        + meta_options(c, LEARNING + ("self-repair-threshold", "self-repair-scale", "alpha", "rank", "update-period"))
    )


# ----- model-file fields -----------------------------------------------------------------------


def _read_lstm(f: ModelFields) -> dict[str, Any]:
    params = f.array("Params", 2)
    if params.shape[0] != 3 or params.shape[1] == 0:
        raise f.error(f"expected 3 rows (w_ic, w_fc, w_oc) of cell-dim columns, got shape {params.shape}", "Params")
    cell_dim = params.shape[1]
    use_dropout = f.bool("UseDropout", False)
    f.dims_from(
        "input", "Params", f"has {cell_dim} columns (input dim 5 x cell-dim" + (" + 3)" if use_dropout else ")")
    )
    f.dims_from("output", "Params", f"has {cell_dim} columns (output dim 2 x cell-dim)")
    out = {"cell-dim": cell_dim, "use-dropout": use_dropout, **updatable_field_options(f)}
    config = f.array("SelfRepairConfig", 1, None)
    if config is not None and len(config) == 10:
        out["sigmoid-self-repair-threshold"] = stored_float(config[0])
        out["tanh-self-repair-threshold"] = stored_float(config[2])
        out["self-repair-scale"] = stored_float(config[5])
    return out


def _read_gru(f: ModelFields) -> dict[str, Any]:
    out = {"cell-dim": dim_token(f, "CellDim"), "recurrent-dim": f.int("RecurrentDim"), **updatable_field_options(f)}
    f.origin["input"] = "<CellDim> and <RecurrentDim>"
    for token, key in (
        ("SelfRepairThreshold", "self-repair-threshold"),
        ("SelfRepairScale", "self-repair-scale"),
        ("Alpha", "alpha"),
    ):
        if f.has(token):
            out[key] = f.float(token)
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = f.pair("RankInOut")
    if f.has("UpdatePeriod"):
        out["update-period"] = f.int("UpdatePeriod")
    return out


def _read_output_gru(f: ModelFields) -> dict[str, Any]:
    out = {"cell-dim": dim_token(f, "CellDim"), **updatable_field_options(f)}
    for token, key in (
        ("SelfRepairThreshold", "self-repair-threshold"),
        ("SelfRepairScale", "self-repair-scale"),
        ("Alpha", "alpha"),
    ):
        if f.has(token):
            out[key] = f.float(token)
    for token, key in (("Rank", "rank"), ("UpdatePeriod", "update-period")):
        if f.has(token):
            out[key] = f.int(token)
    return out


def _write_lstm(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    params = p("params")
    cell_dim = params.shape[1]
    config = c.option("self-repair-config")
    if config is None or len(config) != 10:
        config = (0.05, 0.05, 0.2, 0.05, 0.2) + (1.0e-5,) * 5
    out = updatable_fields(c) + [
        ("Params", params),
        ("ValueAvg", np.zeros((5, cell_dim), np.float32)),
        ("DerivAvg", np.zeros((5, cell_dim), np.float32)),
        ("SelfRepairConfig", np.array(config, dtype=np.float32)),
        ("SelfRepairProb", np.zeros(5, np.float32)),
    ]
    if c.use_dropout:
        out.append(("UseDropout", True))
    return out + [("Count", np.float64(0.0))]


def _write_gru(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("CellDim", c.cell_dim),
        ("RecurrentDim", c.recurrent_dim),
        ("w_h", p("w_h")),
        ("ValueAvg", np.zeros(c.cell_dim, np.float32)),
        ("DerivAvg", np.zeros(c.cell_dim, np.float32)),
        ("SelfRepairTotal", np.float64(0.0)),
        ("Count", np.float64(0.0)),
        ("SelfRepairThreshold", f32(option_or(c, "self-repair-threshold", 0.2))),
        ("SelfRepairScale", f32(option_or(c, "self-repair-scale", 1.0e-5))),
        ("Alpha", f32(option_or(c, "alpha", 4.0))),
        ("RankInOut", (int(option_or(c, "rank-in", 20)), int(option_or(c, "rank-out", 80)))),
        ("UpdatePeriod", int(option_or(c, "update-period", 4))),
    ]


def _write_output_gru(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return updatable_fields(c) + [
        ("CellDim", c.cell_dim),
        ("w_h", p("w_h")),
        ("ValueAvg", np.zeros(c.cell_dim, np.float32)),
        ("DerivAvg", np.zeros(c.cell_dim, np.float32)),
        ("SelfRepairTotal", np.float64(0.0)),
        ("Count", np.float64(0.0)),
        ("SelfRepairThreshold", f32(option_or(c, "self-repair-threshold", 0.2))),
        ("SelfRepairScale", f32(option_or(c, "self-repair-scale", 1.0e-5))),
        ("Alpha", f32(option_or(c, "alpha", 4.0))),
        ("Rank", int(option_or(c, "rank", 8))),
        ("UpdatePeriod", int(option_or(c, "update-period", 10))),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "LstmNonlinearityComponent",
        LstmNonlinearityComponent,
        lstm_nonlinearity_component,
        _lstm_options,
        {
            **UPDATABLE_KINDS,
            "Params": MATRIX,
            "ValueAvg": MATRIX,
            "DerivAvg": MATRIX,
            "SelfRepairConfig": VECTOR,
            "SelfRepairProb": VECTOR,
            "UseDropout": BOOL,
            "Count": DOUBLE,
        },
        _read_lstm,
        _write_lstm,
    )
)
register(
    KaldiComponentType(
        "GruNonlinearityComponent",
        GruNonlinearityComponent,
        gru_nonlinearity_component,
        _gru_options,
        {
            **UPDATABLE_KINDS,
            "CellDim": INT,
            "RecurrentDim": INT,
            "w_h": MATRIX,
            "ValueAvg": VECTOR,
            "DerivAvg": VECTOR,
            "SelfRepairTotal": DOUBLE,
            "Count": DOUBLE,
            "SelfRepairThreshold": FLOAT,
            "SelfRepairScale": FLOAT,
            "Alpha": FLOAT,
            "RankInOut": (INT, INT),
            "UpdatePeriod": INT,
        },
        _read_gru,
        _write_gru,
    )
)
# Token names from shared/KALDI-TEXT-FORMATS.md, not from its Write code (int vs float as their text values
# show; float vs double unverified, which only matters for writing a text model as binary byte-identically to
# Kaldi: Kaldi reads either size).
register(
    KaldiComponentType(
        "OutputGruNonlinearityComponent",
        OutputGruNonlinearityComponent,
        output_gru_nonlinearity_component,
        _output_gru_options,
        {
            **UPDATABLE_KINDS,
            "CellDim": INT,
            "w_h": VECTOR,
            "ValueAvg": VECTOR,
            "DerivAvg": VECTOR,
            "SelfRepairTotal": DOUBLE,
            "Count": DOUBLE,
            "SelfRepairThreshold": FLOAT,
            "SelfRepairScale": FLOAT,
            "Alpha": FLOAT,
            "Rank": INT,
            "UpdatePeriod": INT,
        },
        _read_output_gru,
        _write_output_gru,
    )
)
