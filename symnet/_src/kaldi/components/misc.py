"""Kaldi's small components: NoOp, ElementwiseProduct, SumGroup, SumBlock, Permute, Dropout,
GeneralDropout, DropoutMask, ClipGradient and BackpropTruncation (nnet-simple-component.cc,
nnet-general-component.cc).

Config options with Kaldi's defaults, the options that build a component
again, the fields of its model files in Kaldi's write order and the kinds of
their tokens, one record per type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.base import Component
from ...components.misc import (
    BackpropTruncationComponent,
    ClipGradientComponent,
    DropoutComponent,
    DropoutMaskComponent,
    ElementwiseProductComponent,
    GeneralDropoutComponent,
    NoOpComponent,
    PermuteComponent,
    SumBlockComponent,
    SumGroupComponent,
)
from ...core.layer import Layer
from ..models.token_kinds import BOOL, DOUBLE, FLAG, FLOAT, INT, INTS
from .fields import (
    IN_OUT_KINDS,
    NONLINEAR_KINDS,
    ModelFields,
    ParamValues,
    dim_token,
    f32,
    option_or,
    read_in_out,
    write_in_out,
)
from .options import ComponentOptionReader, MatrixReader, field_options, in_out_options, meta_options, positive_dim
from .registry import KaldiComponentType, register

__all__ = [
    "backprop_truncation_component",
    "clip_gradient_component",
    "dropout_component",
    "dropout_mask_component",
    "elementwise_product_component",
    "general_dropout_component",
    "no_op_component",
    "permute_component",
    "sum_block_component",
    "sum_group_component",
]


def no_op_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), backprop-scale (1.0)."""
    opts = ComponentOptionReader("NoOpComponent", name, options)
    backprop_scale = opts.float("backprop-scale", 1.0)
    dim = positive_dim(opts)
    opts.finish()
    return NoOpComponent(name, input, dim, backprop_scale)


def _in_out(opts: ComponentOptionReader) -> tuple[int, int]:
    output_dim = opts.int("output-dim")
    input_dim = opts.int("input-dim")
    opts.positive("output-dim", output_dim)
    opts.positive("input-dim", input_dim)
    opts.require(
        input_dim % output_dim == 0, f"output-dim={output_dim} must divide input-dim={input_dim}", "output-dim"
    )
    return input_dim, output_dim


def elementwise_product_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (required); output-dim divides input-dim and is smaller."""
    opts = ComponentOptionReader("ElementwiseProductComponent", name, options)
    input_dim, output_dim = _in_out(opts)
    opts.require(
        input_dim > output_dim, f"input-dim={input_dim} must be larger than output-dim={output_dim}", "input-dim"
    )
    opts.finish()
    return ElementwiseProductComponent(name, input, input_dim, output_dim)


def sum_group_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: sizes=S1,S2,... (positive; nothing else), or input-dim and output-dim (equal groups)."""
    opts = ComponentOptionReader("SumGroupComponent", name, options)
    if opts.has("sizes"):
        sizes = opts.int_list("sizes")
        opts.require(
            len(sizes) > 0 and all(s > 0 for s in sizes), f"sizes={opts.raw['sizes']} must be positive", "sizes"
        )
    else:
        input_dim = opts.int("input-dim")
        output_dim = opts.int("output-dim")
        opts.positive("input-dim", input_dim)
        opts.positive("output-dim", output_dim)
        opts.require(
            input_dim % output_dim == 0, f"output-dim={output_dim} must divide input-dim={input_dim}", "output-dim"
        )
        sizes = (input_dim // output_dim,) * output_dim
    opts.finish()
    return SumGroupComponent(name, input, sizes)


def sum_block_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: input-dim, output-dim (required; output-dim divides input-dim), scale (1.0)."""
    opts = ComponentOptionReader("SumBlockComponent", name, options)
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.positive("output-dim", output_dim)
    opts.require(
        input_dim > 0 and input_dim % output_dim == 0,
        f"invalid input-dim={input_dim} for output-dim={output_dim}",
        "input-dim",
    )
    scale = opts.float("scale", 1.0)
    opts.finish()
    return SumBlockComponent(name, input, input_dim, output_dim, scale)


def permute_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: column-map=C0,C1,... (required): a permutation of 0 .. dim-1."""
    opts = ComponentOptionReader("PermuteComponent", name, options)
    column_map = opts.int_list("column-map")
    opts.require(
        len(column_map) > 0 and sorted(column_map) == list(range(len(column_map))),
        f"column-map={opts.raw['column-map']} is not a permutation of 0..{len(column_map) - 1}",
        "column-map",
    )
    opts.finish()
    return PermuteComponent(name, input, column_map)


def dropout_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim, dropout-proportion (required, in [0, 1]), dropout-per-frame (false), test-mode (false)."""
    opts = ComponentOptionReader("DropoutComponent", name, options)
    dim = positive_dim(opts)
    proportion = opts.float("dropout-proportion")
    per_frame = opts.bool("dropout-per-frame", False)
    test_mode = opts.bool("test-mode", False)
    opts.require(0.0 <= proportion <= 1.0, f"dropout-proportion={proportion} must be in [0, 1]", "dropout-proportion")
    opts.finish()
    return DropoutComponent(name, input, dim, proportion, per_frame, test_mode)


def general_dropout_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), block-dim (dim), time-period (0), dropout-proportion (0.5), continuous (false),
    test-mode (false), specaugment-max-proportion (0.0: no SpecAugment; else in (0, 1], with block-dim = dim and
    not continuous), specaugment-max-regions (1, at least 1)."""
    opts = ComponentOptionReader("GeneralDropoutComponent", name, options)
    dim = positive_dim(opts)
    block_dim = opts.int("block-dim", dim)
    opts.require(
        block_dim > 0 and dim % block_dim == 0,
        f"block-dim={block_dim} must be positive and divide dim={dim}",
        "block-dim",
    )
    time_period = opts.int("time-period", 0)
    proportion = opts.float("dropout-proportion", 0.5)
    specaugment = opts.float("specaugment-max-proportion", 0.0)
    regions = opts.int("specaugment-max-regions", 1)
    continuous = opts.bool("continuous", False)
    test_mode = opts.bool("test-mode", False)
    opts.finish()
    if specaugment != 0.0:
        opts.require(
            0.0 < specaugment <= 1.0,
            f"specaugment-max-proportion={specaugment} must be in (0, 1]",
            "specaugment-max-proportion",
        )
        opts.require(not continuous, "specaugment-max-proportion cannot be combined with continuous=true", "continuous")
        opts.require(
            block_dim == dim,
            f"specaugment-max-proportion needs block-dim = dim (got {block_dim} and {dim})",
            "block-dim",
        )
        opts.require(regions >= 1, f"specaugment-max-regions={regions} must be at least 1", "specaugment-max-regions")
    return GeneralDropoutComponent(
        name, input, dim, block_dim, time_period, proportion, continuous, test_mode, specaugment, regions
    )


def dropout_mask_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's DropoutMaskComponent::InitFromConfig): output-dim (required), dropout-proportion (0.5, in
    [0, 1]), continuous (false), test-mode (false). It reads no input."""
    opts = ComponentOptionReader("DropoutMaskComponent", name, options)
    dim = positive_dim(opts, "output-dim")
    proportion = opts.float("dropout-proportion", 0.5)
    continuous = opts.bool("continuous", False)
    test_mode = opts.bool("test-mode", False)
    opts.finish()
    opts.require(0.0 <= proportion <= 1.0, f"dropout-proportion={proportion} must be in [0, 1]", "dropout-proportion")
    return DropoutMaskComponent(name, input, dim, proportion, continuous, test_mode)


def clip_gradient_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), clipping-threshold (15.0), norm-based-clipping (false),
    self-repair-clipped-proportion-threshold (0.01), self-repair-target (0.0), self-repair-scale (1.0)."""
    opts = ComponentOptionReader("ClipGradientComponent", name, options)
    dim = opts.int("dim")
    clipping_threshold = opts.float("clipping-threshold", 15.0)
    norm_based = opts.bool("norm-based-clipping", False)
    meta = [
        ("self-repair-clipped-proportion-threshold", opts.float("self-repair-clipped-proportion-threshold", 0.01)),
        ("self-repair-target", opts.float("self-repair-target", 0.0)),
        ("self-repair-scale", opts.float("self-repair-scale", 1.0)),
    ]
    opts.positive("dim", dim)
    opts.nonnegative("clipping-threshold", clipping_threshold)
    for key, value in meta:
        opts.nonnegative(key, value)
    opts.finish()
    return ClipGradientComponent(name, input, dim, clipping_threshold, norm_based, options=tuple(meta))


def backprop_truncation_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options: dim (required), scale (1.0), clipping-threshold (30.0), zeroing-threshold (15.0),
    zeroing-interval (20), recurrence-interval (1)."""
    opts = ComponentOptionReader("BackpropTruncationComponent", name, options)
    dim = opts.int("dim")
    scale = opts.float("scale", 1.0)
    clipping_threshold = opts.float("clipping-threshold", 30.0)
    zeroing_threshold = opts.float("zeroing-threshold", 15.0)
    zeroing_interval = opts.int("zeroing-interval", 20)
    recurrence_interval = opts.int("recurrence-interval", 1)
    opts.positive("dim", dim)
    opts.positive("scale", scale)
    opts.nonnegative("clipping-threshold", clipping_threshold)
    opts.nonnegative("zeroing-threshold", zeroing_threshold)
    opts.positive("zeroing-interval", zeroing_interval)
    opts.positive("recurrence-interval", recurrence_interval)
    opts.finish()
    return BackpropTruncationComponent(
        name, input, dim, scale, clipping_threshold, zeroing_threshold, zeroing_interval, recurrence_interval
    )


# ----- config options ----------------------------------------------------------------------------


def _noop_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(c, "dim", "backprop_scale")


def _sum_group_options(c: Any) -> list[tuple[str, Any]]:
    return [("sizes", c.sizes)]


def _sum_block_options(c: Any) -> list[tuple[str, Any]]:
    return [("input-dim", c.in_dim), ("output-dim", c.out_dim), ("scale", c.scale)]


def _permute_options(c: Any) -> list[tuple[str, Any]]:
    return [("column-map", c.column_map)]


def _dropout_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(c, "dim", "dropout_proportion", "dropout_per_frame", "test_mode")


def _general_dropout_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(
        c,
        "dim",
        "block_dim",
        "time_period",
        "dropout_proportion",
        "continuous",
        "test_mode",
        "specaugment_max_proportion",
        "specaugment_max_regions",
    )


def _dropout_mask_options(c: Any) -> list[tuple[str, Any]]:
    return [("output-dim", c.dim)] + field_options(c, "dropout_proportion", "continuous", "test_mode")


def _clip_gradient_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(c, "dim", "clipping_threshold", "norm_based_clipping") + meta_options(
        c, ("self-repair-clipped-proportion-threshold", "self-repair-target", "self-repair-scale")
    )


def _backprop_truncation_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(
        c, "dim", "scale", "clipping_threshold", "zeroing_threshold", "zeroing_interval", "recurrence_interval"
    )


# ----- reading model-file fields ---------------------------------------------------------------


def _read_sum_block(f: ModelFields) -> dict[str, Any]:
    return {**read_in_out(f), "scale": f.float("Scale", 1.0)}


def _read_noop(f: ModelFields) -> dict[str, Any]:
    return {"dim": dim_token(f), "backprop-scale": f.float("BackpropScale", 1.0)}


def _read_sum_group(f: ModelFields) -> dict[str, Any]:
    sizes = f.ints("Sizes")
    f.dims_from("input", "Sizes", f"sum to {sum(sizes)}")
    f.dims_from("output", "Sizes", f"has {len(sizes)} groups")
    return {"sizes": sizes}


def _read_permute(f: ModelFields) -> dict[str, Any]:
    column_map = f.ints("ColumnMap")
    f.dims_from("input", "ColumnMap", f"has {len(column_map)} columns")
    f.dims_from("output", "ColumnMap", f"has {len(column_map)} columns")
    return {"column-map": column_map}


def _read_dropout(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "dropout-proportion": f.float("DropoutProportion"),
        "dropout-per-frame": f.bool("DropoutPerFrame", False),
        "test-mode": f.bool("TestMode", False),
    }


def _read_general_dropout(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "block-dim": f.int("BlockDim"),
        "time-period": f.int("TimePeriod", 0),
        "dropout-proportion": f.float("DropoutProportion"),
        "continuous": f.has("Continuous"),
        "test-mode": f.has("TestMode"),
        "specaugment-max-proportion": f.float("SpecAugmentMaxProportion", 0.0),
        "specaugment-max-regions": f.int("SpecAugmentMaxRegions", 1),
    }


def _read_dropout_mask(f: ModelFields) -> dict[str, Any]:
    return {
        "output-dim": dim_token(f, "OutputDim"),
        "dropout-proportion": f.float("DropoutProportion"),
        "continuous": f.has("Continuous"),
        "test-mode": f.bool("TestMode", False),
    }


def _read_clip_gradient(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "clipping-threshold": f.float("ClippingThreshold"),
        "norm-based-clipping": f.bool("NormBasedClipping"),
        "self-repair-clipped-proportion-threshold": f.float("SelfRepairClippedProportionThreshold", 0.01),
        "self-repair-target": f.float("SelfRepairTarget", 0.0),
        "self-repair-scale": f.float("SelfRepairScale", 1.0),
    }


def _read_backprop_truncation(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "scale": f.float("Scale", 1.0),
        "clipping-threshold": f.float("ClippingThreshold"),
        "zeroing-threshold": f.float("ZeroingThreshold"),
        "zeroing-interval": f.int("ZeroingInterval"),
        "recurrence-interval": f.int("RecurrenceInterval"),
    }


# ----- writing model-file fields ---------------------------------------------------------------


def _write_noop(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [("Dim", c.dim), ("BackpropScale", f32(c.backprop_scale))]


def _write_sum_block(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [("InputDim", c.in_dim), ("OutputDim", c.out_dim), ("Scale", f32(c.scale))]


def _write_sum_group(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [("Sizes", np.array(c.sizes, dtype=np.int32))]


def _write_permute(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [("ColumnMap", np.array(c.column_map, dtype=np.int32))]


def _write_dropout(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        ("Dim", c.dim),
        ("DropoutProportion", f32(c.dropout_proportion)),
        ("DropoutPerFrame", bool(c.dropout_per_frame)),
        ("TestMode", bool(c.test_mode)),
    ]


def _write_general_dropout(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [
        ("Dim", c.dim),
        ("BlockDim", c.block_dim),
        ("TimePeriod", c.time_period),
        ("DropoutProportion", f32(c.dropout_proportion)),
    ]
    if c.specaugment_max_proportion != 0.0:
        out.append(("SpecAugmentMaxProportion", f32(c.specaugment_max_proportion)))
        if c.specaugment_max_regions != 1:
            out.append(("SpecAugmentMaxRegions", int(c.specaugment_max_regions)))
    if c.continuous:
        out.append(("Continuous", None))
    if c.test_mode:
        out.append(("TestMode", None))
    return out


def _write_dropout_mask(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [
        ("OutputDim", c.dim),
        ("DropoutProportion", f32(c.dropout_proportion)),
        ("TestMode", bool(c.test_mode)),
    ]
    if c.continuous:
        out.append(("Continuous", None))
    return out


def _write_clip_gradient(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        ("Dim", c.dim),
        ("ClippingThreshold", f32(c.clipping_threshold)),
        ("NormBasedClipping", bool(c.norm_based_clipping)),
        ("SelfRepairClippedProportionThreshold", f32(option_or(c, "self-repair-clipped-proportion-threshold", 0.01))),
        ("SelfRepairTarget", f32(option_or(c, "self-repair-target", 0.0))),
        ("SelfRepairScale", f32(option_or(c, "self-repair-scale", 1.0))),
        ("NumElementsClipped", 0),
        ("NumElementsProcessed", 0),
        ("NumSelfRepaired", 0),
        ("NumBackpropped", 0),
    ]


def _write_backprop_truncation(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        ("Dim", c.dim),
        ("Scale", f32(c.scale)),
        ("ClippingThreshold", f32(c.clipping_threshold)),
        ("ZeroingThreshold", f32(c.zeroing_threshold)),
        ("ZeroingInterval", int(c.zeroing_interval)),
        ("RecurrenceInterval", int(c.recurrence_interval)),
        ("NumElementsClipped", np.float64(0.0)),
        ("NumElementsZeroed", np.float64(0.0)),
        ("NumElementsProcessed", np.float64(0.0)),
        ("NumZeroingBoundaries", np.float64(0.0)),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "NoOpComponent",
        NoOpComponent,
        no_op_component,
        _noop_options,
        {**NONLINEAR_KINDS, "BackpropScale": FLOAT},  # the Nonlinear tokens: its old format
        _read_noop,
        _write_noop,
    )
)
register(
    KaldiComponentType(
        "ElementwiseProductComponent",
        ElementwiseProductComponent,
        elementwise_product_component,
        in_out_options,
        IN_OUT_KINDS,
        read_in_out,
        write_in_out,
    )
)
register(
    KaldiComponentType(
        "SumGroupComponent",
        SumGroupComponent,
        sum_group_component,
        _sum_group_options,
        {"Sizes": INTS},
        _read_sum_group,
        _write_sum_group,
    )
)
register(
    KaldiComponentType(
        "SumBlockComponent",
        SumBlockComponent,
        sum_block_component,
        _sum_block_options,
        {**IN_OUT_KINDS, "Scale": FLOAT},
        _read_sum_block,
        _write_sum_block,
    )
)
register(
    KaldiComponentType(
        "PermuteComponent",
        PermuteComponent,
        permute_component,
        _permute_options,
        {"ColumnMap": INTS},
        _read_permute,
        _write_permute,
    )
)
register(
    KaldiComponentType(
        "DropoutComponent",
        DropoutComponent,
        dropout_component,
        _dropout_options,
        {"Dim": INT, "DropoutProportion": FLOAT, "DropoutPerFrame": BOOL, "TestMode": BOOL},
        _read_dropout,
        _write_dropout,
    )
)
register(
    KaldiComponentType(
        "GeneralDropoutComponent",
        GeneralDropoutComponent,
        general_dropout_component,
        _general_dropout_options,
        {
            "Dim": INT,
            "BlockDim": INT,
            "TimePeriod": INT,
            "DropoutProportion": FLOAT,
            "SpecAugmentMaxProportion": FLOAT,
            "SpecAugmentMaxRegions": INT,
            "TestMode": FLAG,
            "Continuous": FLAG,
        },
        _read_general_dropout,
        _write_general_dropout,
    )
)
# Write order from Kaldi's DropoutMaskComponent::Write (nnet-general-component.cc).
register(
    KaldiComponentType(
        "DropoutMaskComponent",
        DropoutMaskComponent,
        dropout_mask_component,
        _dropout_mask_options,
        {"OutputDim": INT, "DropoutProportion": FLOAT, "TestMode": BOOL, "Continuous": FLAG},
        _read_dropout_mask,
        _write_dropout_mask,
    )
)
register(
    KaldiComponentType(
        "ClipGradientComponent",
        ClipGradientComponent,
        clip_gradient_component,
        _clip_gradient_options,
        {
            "Dim": INT,
            "ClippingThreshold": FLOAT,
            "NormBasedClipping": BOOL,
            "SelfRepairClippedProportionThreshold": FLOAT,
            "SelfRepairTarget": FLOAT,
            "SelfRepairScale": FLOAT,
            "NumElementsClipped": INT,
            "NumElementsProcessed": INT,
            "NumSelfRepaired": INT,
            "NumBackpropped": INT,
        },
        _read_clip_gradient,
        _write_clip_gradient,
    )
)
register(
    KaldiComponentType(
        "BackpropTruncationComponent",
        BackpropTruncationComponent,
        backprop_truncation_component,
        _backprop_truncation_options,
        {
            "Dim": INT,
            "Scale": FLOAT,
            "ClippingThreshold": FLOAT,
            "ZeroingThreshold": FLOAT,
            "ZeroingInterval": INT,
            "RecurrenceInterval": INT,
            "NumElementsClipped": DOUBLE,
            "NumElementsZeroed": DOUBLE,
            "NumElementsProcessed": DOUBLE,
            "NumZeroingBoundaries": DOUBLE,
        },
        _read_backprop_truncation,
        _write_backprop_truncation,
    )
)
