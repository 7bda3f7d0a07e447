"""Kaldi's nonlinearities: RectifiedLinear, Sigmoid, Tanh, Softmax, LogSoftmax (NonlinearComponent) and Pnorm.

Config options with Kaldi's defaults, the options that build a component
again, the fields of its model files in Kaldi's write order and the kinds of
their tokens, one record per type. The self-repair options are metadata: a
fresh component is written with empty statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...components.base import Component
from ...components.nonlinear import (
    LogSoftmaxComponent,
    PnormComponent,
    RectifiedLinearComponent,
    SigmoidComponent,
    SoftmaxComponent,
    TanhComponent,
)
from ...core.layer import Layer
from .fields import (
    IN_OUT_KINDS,
    NONLINEAR_KINDS,
    ModelFields,
    ParamValues,
    dim_token,
    empty_vector,
    f32,
    option_or,
    read_in_out,
    write_in_out,
)
from .options import ComponentOptionReader, MatrixReader, in_out_options, meta_options
from .registry import KaldiComponentType, register

__all__ = ["nonlinear_builder", "NonlinearClass", "pnorm_component", "UNSET_THRESHOLD"]

#: Kaldi's "unset" self-repair threshold (kUnsetThreshold).
UNSET_THRESHOLD = -1000.0

#: The layer classes of Kaldi's NonlinearComponent types.
NonlinearClass = type[
    RectifiedLinearComponent | SigmoidComponent | TanhComponent | SoftmaxComponent | LogSoftmaxComponent
]


def nonlinear_builder(cls: NonlinearClass) -> Callable[..., Component]:
    """The builder of a NonlinearComponent type: dim (required), block-dim (dim),
    self-repair-lower-threshold, self-repair-upper-threshold, self-repair-scale (kept as metadata)."""

    def build(
        name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
    ) -> Component:
        opts = ComponentOptionReader(cls.kaldi_type, name, options)
        dim = opts.int("dim")
        opts.positive("dim", dim)
        block_dim = opts.int("block-dim", dim)
        opts.require(
            block_dim > 0 and dim % block_dim == 0,
            f"block-dim={block_dim} must be positive and divide dim={dim}",
            "block-dim",
        )
        meta = [
            ("block-dim", block_dim),
            ("self-repair-lower-threshold", opts.float("self-repair-lower-threshold", UNSET_THRESHOLD)),
            ("self-repair-upper-threshold", opts.float("self-repair-upper-threshold", UNSET_THRESHOLD)),
            ("self-repair-scale", opts.float("self-repair-scale", 0.0)),
        ]
        opts.finish()
        return cls(name, input, dim, options=tuple(meta))

    build.__name__ = cls.kaldi_type
    build.__doc__ = (
        f"{cls.kaldi_type}: dim (required), block-dim (dim), self-repair-lower-threshold, "
        "self-repair-upper-threshold, self-repair-scale (kept as metadata)."
    )
    return build


def pnorm_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (required); output-dim must divide input-dim."""
    opts = ComponentOptionReader("PnormComponent", name, options)
    output_dim = opts.int("output-dim")
    input_dim = opts.int("input-dim")
    opts.positive("output-dim", output_dim)
    opts.positive("input-dim", input_dim)
    opts.require(
        input_dim % output_dim == 0, f"output-dim={output_dim} must divide input-dim={input_dim}", "output-dim"
    )
    opts.finish()
    return PnormComponent(name, input, input_dim, output_dim)


# ----- config options and model-file fields ------------------------------------------------------


def _nonlinear_options(c: Any) -> list[tuple[str, Any]]:
    return [("dim", c.dim)] + meta_options(
        c, ("block-dim", "self-repair-lower-threshold", "self-repair-upper-threshold", "self-repair-scale")
    )


def _read_nonlinear(f: ModelFields) -> dict[str, Any]:
    out = {"dim": dim_token(f)}
    for token, key, read in (
        ("BlockDim", "block-dim", f.int),
        ("SelfRepairLowerThreshold", "self-repair-lower-threshold", f.float),
        ("SelfRepairUpperThreshold", "self-repair-upper-threshold", f.float),
        ("SelfRepairScale", "self-repair-scale", f.float),
    ):
        if f.has(token):
            out[key] = read(token)
    return out


def _write_nonlinear(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("Dim", c.dim)]
    block_dim = int(option_or(c, "block-dim", c.dim))
    if block_dim != c.dim:
        out.append(("BlockDim", block_dim))
    out += [
        ("ValueAvg", empty_vector()),
        ("DerivAvg", empty_vector()),
        ("Count", np.float64(0.0)),
        ("OderivRms", empty_vector()),
        ("OderivCount", np.float64(0.0)),
        ("NumDimsSelfRepaired", np.float64(0.0)),
        ("NumDimsProcessed", np.float64(0.0)),
    ]
    for key, token in (
        ("self-repair-lower-threshold", "SelfRepairLowerThreshold"),
        ("self-repair-upper-threshold", "SelfRepairUpperThreshold"),
    ):
        value = option_or(c, key, UNSET_THRESHOLD)
        if value != UNSET_THRESHOLD:
            out.append((token, f32(value)))
    scale = option_or(c, "self-repair-scale", 0.0)
    if scale != 0.0:
        out.append(("SelfRepairScale", f32(scale)))
    return out


# ----- the records ---------------------------------------------------------------------------

for _cls in (RectifiedLinearComponent, SigmoidComponent, TanhComponent, SoftmaxComponent, LogSoftmaxComponent):
    register(
        KaldiComponentType(
            _cls.kaldi_type,
            _cls,
            nonlinear_builder(_cls),
            _nonlinear_options,
            NONLINEAR_KINDS,
            _read_nonlinear,
            _write_nonlinear,
        )
    )
del _cls
register(
    KaldiComponentType(
        "PnormComponent", PnormComponent, pnorm_component, in_out_options, IN_OUT_KINDS, read_in_out, write_in_out
    )
)
