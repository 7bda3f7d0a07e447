"""Kaldi's convolutional components: TimeHeightConvolutionComponent, ConvolutionComponent and
MaxpoolingComponent (nnet-convolutional-component.cc, nnet-simple-component.cc).

Config options with Kaldi's defaults (ConvolutionModel::Check for the time-height
convolution), the options that build a component again, and the fields of their
model files in Kaldi's write order (the time-height convolution's nests its
`<ConvolutionModel>`: the filter counts, heights and (time, height) offsets).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.base import Component, param_name
from ...components.convolution import ConvolutionComponent, MaxpoolingComponent, TimeHeightConvolutionComponent
from ...core.frozen import FrozenArray
from ...core.initializers import Normal, Zeros
from ...core.layer import Layer, Weight
from ..models.token_kinds import BOOL, FLAG, FLOAT, INT, INTS, MATRIX, PAIRS, VECTOR
from .fields import (
    UPDATABLE_KINDS,
    Block,
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
    field_options,
    init_options,
    load_array,
    meta_options,
    normal_init,
    updatable_options,
)
from .registry import KaldiComponentType, register

__all__ = [
    "convolution_component",
    "CONVOLUTION_MODEL_KINDS",
    "maxpooling_component",
    "time_height_convolution_component",
]


def _sorted_unique(values: tuple) -> bool:
    return all(a < b for a, b in zip(values, values[1:]))


def _check_model(
    opts: ComponentOptionReader,
    num_filters_in: int,
    height_in: int,
    height_out: int,
    subsample: int,
    offsets: tuple[tuple[int, int], ...],
    required: tuple[int, ...],
) -> None:
    """Kaldi's ConvolutionModel::Check(check_heights_used=false, allow_height_padding=true)."""
    time_offsets = {t for t, _ in offsets}
    missing = [t for t in required if t not in time_offsets]
    opts.require(
        not missing,
        f"required-time-offsets {','.join(map(str, missing))} are not among the time-offsets",
        "required-time-offsets",
    )
    used = [False] * len(offsets)
    for j in range(height_out):
        h_out = j * subsample
        available = False
        for i, (t, h) in enumerate(offsets):
            if 0 <= h_out + h < height_in:
                used[i] = True
                available = available or t in required
        opts.require(
            available,
            f"output height {j} reads no input height at the required time offsets (height-in="
            f"{height_in}, height-out={height_out}, height-subsample-out={subsample})",
            "height-out",
        )
    unused = [offsets[i] for i, u in enumerate(used) if not u]
    opts.require(
        not unused,
        f"the (time, height) offset {unused[0] if unused else ''} is never used (it reads outside "
        "the input height at every output height)",
        "height-offsets",
    )


def _offset_pairs(opts: ComponentOptionReader) -> tuple[tuple[int, int], ...]:
    """Kaldi's `offsets=t1,h1;t2,h2;...` (sorted by Kaldi; a repeated pair is an error)."""
    text = opts.str("offsets")
    pairs = []
    for part in text.split(";"):
        fields = part.split(",")
        try:
            t, h = (int(v.strip(), 10) for v in fields)
        except ValueError:
            raise opts.bad("offsets", text, "a list of time,height pairs (t1,h1;t2,h2;...)") from None
        pairs.append((t, h))
    offsets = tuple(sorted(pairs))
    opts.require(_sorted_unique(offsets), f"offsets={text} repeats an offset", "offsets")
    return offsets


def time_height_convolution_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's TimeHeightConvolutionComponent::InitFromConfig): num-filters-in, num-filters-out,
    height-in, height-out (required); the offsets, either `offsets=t1,h1;t2,h2;...` or height-offsets and
    time-offsets (sorted and unique; the offsets are then every (time, height) pair);
    required-time-offsets (all time offsets), height-subsample-out (1), max-memory-mb (200),
    param-stddev (1/sqrt(num-filters-in * num-offsets); negative means the default), bias-stddev (0),
    init-unit (false: with true, linear_params is zero but for the unit matrix at offset (0, 0)),
    use-natural-gradient (true), rank-in (min(80, (num-offsets * num-filters-in + 2) / 2)),
    rank-out (min(80, (num-filters-out + 1) / 2)), alpha-in (4), alpha-out (4), num-minibatches-history (4);
    learning rates."""
    opts = ComponentOptionReader("TimeHeightConvolutionComponent", name, options)
    meta = updatable_options(opts)
    nfi = opts.int("num-filters-in")
    nfo = opts.int("num-filters-out")
    height_in = opts.int("height-in")
    height_out = opts.int("height-out")
    if opts.has("offsets"):
        offsets = _offset_pairs(opts)
    else:
        height_offsets = opts.int_list("height-offsets")
        time_offsets = opts.int_list("time-offsets")
        for key, values in (("height-offsets", height_offsets), ("time-offsets", time_offsets)):
            opts.require(
                len(values) > 0 and _sorted_unique(values),
                f"{key}={','.join(map(str, values))} must be nonempty, sorted and unique",
                key,
            )
        offsets = tuple((t, h) for t in time_offsets for h in height_offsets)
    all_time_offsets = tuple(sorted({t for t, _ in offsets}))
    required = opts.int_list("required-time-offsets", all_time_offsets)
    opts.require(
        len(required) > 0 and _sorted_unique(required),
        f"required-time-offsets={','.join(map(str, required))} must be nonempty, sorted and unique",
        "required-time-offsets",
    )
    subsample = opts.int("height-subsample-out", 1)
    max_memory_mb = opts.float("max-memory-mb", 200.0)
    for key, value in (
        ("num-filters-in", nfi),
        ("num-filters-out", nfo),
        ("height-in", height_in),
        ("height-out", height_out),
        ("height-subsample-out", subsample),
        ("max-memory-mb", max_memory_mb),
    ):
        opts.positive(key, value)
    _check_model(opts, nfi, height_in, height_out, subsample, offsets, required)
    param_stddev = opts.float("param-stddev", -1.0)
    bias_stddev = opts.float("bias-stddev", 0.0)
    init_unit = opts.bool("init-unit", False)
    if param_stddev < 0.0:
        param_stddev = 1.0 / math.sqrt(nfi * len(offsets))
    cols = nfi * len(offsets)
    if init_unit:
        opts.require(
            nfi == nfo, f"init-unit needs num-filters-in == num-filters-out (got {nfi} and {nfo})", "init-unit"
        )
        opts.require(
            (0, 0) in offsets, "init-unit needs the offset (0, 0) (time-offset 0 and height-offset 0)", "init-unit"
        )
        unit = np.zeros((nfo, cols))
        start = offsets.index((0, 0)) * nfi
        unit[:, start : start + nfi] = np.eye(nfi)
        linear_init: Any = FrozenArray(unit)
    else:
        linear_init = normal_init((nfo, cols), param_stddev)
    rank_in = opts.int("rank-in", -1)
    rank_out = opts.int("rank-out", -1)
    meta += [
        ("max-memory-mb", max_memory_mb),
        ("use-natural-gradient", opts.bool("use-natural-gradient", True)),
        ("rank-in", rank_in if rank_in >= 0 else min(80, (cols + 2) // 2)),
        ("rank-out", rank_out if rank_out >= 0 else min(80, (nfo + 1) // 2)),
        ("alpha-in", opts.float("alpha-in", 4.0)),
        ("alpha-out", opts.float("alpha-out", 4.0)),
        ("num-minibatches-history", opts.float("num-minibatches-history", 4.0)),
    ]
    opts.finish()
    return TimeHeightConvolutionComponent(
        name,
        input,
        Weight(linear_init, param_name(name, "linear_params")),
        Weight(normal_init((nfo,), bias_stddev), param_name(name, "bias_params")),
        nfi,
        height_in,
        height_out,
        subsample,
        offsets,
        required,
        options=tuple(meta),
    )


def convolution_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's ConvolutionComponent::InitFromConfig): input-x-dim, input-y-dim, input-z-dim, filt-x-dim,
    filt-y-dim, filt-x-step, filt-y-step (required; (input - filt) divisible by the step),
    input-vectorization-order (zyx, or yzx); then matrix=FILE (`[filters bias]`, num-filters x
    (filt-x-dim * filt-y-dim * input-z-dim + 1)) or num-filters (required), param-stddev
    (1/sqrt(filt-x-dim * filt-y-dim * input-z-dim)), bias-stddev (1.0); learning rates."""
    opts = ComponentOptionReader("ConvolutionComponent", name, options)
    meta = updatable_options(opts)
    dims = {}
    for key in ("input-x-dim", "input-y-dim", "input-z-dim", "filt-x-dim", "filt-y-dim", "filt-x-step", "filt-y-step"):
        dims[key] = opts.int(key)
        opts.positive(key, dims[key])
    order = opts.str("input-vectorization-order", "zyx")
    opts.require(
        order in ("zyx", "yzx"), f"input-vectorization-order={order} is not zyx or yzx", "input-vectorization-order"
    )
    for axis in ("x", "y"):
        size, filt, step = dims[f"input-{axis}-dim"], dims[f"filt-{axis}-dim"], dims[f"filt-{axis}-step"]
        opts.require(
            filt <= size and (size - filt) % step == 0,
            f"filt-{axis}-dim={filt} and filt-{axis}-step={step} do not tile input-{axis}-dim={size}",
            f"filt-{axis}-dim",
        )
    filter_dim = dims["filt-x-dim"] * dims["filt-y-dim"] * dims["input-z-dim"]
    if opts.has("matrix"):
        mat = load_array(opts, "matrix", read_matrix, 2)
        opts.require(
            mat.shape[1] == filter_dim + 1,
            f"matrix={opts.raw['matrix']} has {mat.shape[1]} columns, expected {filter_dim + 1} (filters and the bias)",
            "matrix",
        )
        w_init: Any = FrozenArray(mat[:, :filter_dim])
        b_init: Any = FrozenArray(mat[:, filter_dim])
    else:
        num_filters = opts.int("num-filters")
        opts.positive("num-filters", num_filters)
        param_stddev = opts.float("param-stddev", 1.0 / math.sqrt(filter_dim))
        bias_stddev = opts.float("bias-stddev", 1.0)
        opts.nonnegative("param-stddev", param_stddev)
        opts.nonnegative("bias-stddev", bias_stddev)
        w_init = normal_init((num_filters, filter_dim), param_stddev)
        b_init = normal_init((num_filters,), bias_stddev)
    opts.finish()
    return ConvolutionComponent(
        name,
        input,
        Weight(w_init, param_name(name, "filter_params")),
        Weight(b_init, param_name(name, "bias_params")),
        dims["input-x-dim"],
        dims["input-y-dim"],
        dims["input-z-dim"],
        dims["filt-x-dim"],
        dims["filt-y-dim"],
        dims["filt-x-step"],
        dims["filt-y-step"],
        order,
        options=tuple(meta),
    )


def maxpooling_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's MaxpoolingComponent::InitFromConfig and Check), all required: input-x-dim, input-y-dim,
    input-z-dim, pool-x-size, pool-y-size, pool-z-size, pool-x-step, pool-y-step, pool-z-step; per axis
    size <= input dim, step <= size, and (input dim - size) divisible by the step."""
    opts = ComponentOptionReader("MaxpoolingComponent", name, options)
    keys = [f"input-{a}-dim" for a in "xyz"] + [f"pool-{a}-size" for a in "xyz"] + [f"pool-{a}-step" for a in "xyz"]
    values = {key: opts.int(key) for key in keys}
    opts.finish()
    for key in keys:
        opts.positive(key, values[key])
    for a in "xyz":
        dim, size, step = values[f"input-{a}-dim"], values[f"pool-{a}-size"], values[f"pool-{a}-step"]
        opts.require(size <= dim, f"pool-{a}-size={size} exceeds input-{a}-dim={dim}", f"pool-{a}-size")
        opts.require(step <= size, f"pool-{a}-step={step} exceeds pool-{a}-size={size}", f"pool-{a}-step")
        opts.require(
            (dim - size) % step == 0,
            f"pool-{a}-size={size} and pool-{a}-step={step} do not tile input-{a}-dim={dim}",
            f"pool-{a}-step",
        )
    return MaxpoolingComponent(name, input, *(values[k] for k in keys))


def _offset_options(offsets: tuple[tuple[int, int], ...]) -> list[tuple[str, Any]]:
    """height-offsets and time-offsets when the offsets are all their pairs, else `offsets=`."""
    times = sorted({t for t, _ in offsets})
    heights = sorted({h for _, h in offsets})
    if len(offsets) == len(times) * len(heights):
        return [("height-offsets", tuple(heights)), ("time-offsets", tuple(times))]
    return [("offsets", ";".join(f"{t},{h}" for t, h in offsets))]


def _time_height_options(c: Any) -> list[tuple[str, Any]]:
    out = [
        ("num-filters-in", c.num_filters_in),
        ("num-filters-out", c.num_filters_out),
        ("height-in", c.height_in),
        ("height-out", c.height_out),
        ("height-subsample-out", c.height_subsample_out),
        *_offset_options(c.offsets),
        ("required-time-offsets", c.required_time_offsets),
    ]
    if isinstance(getattr(c.linear_params, "init", None), (Normal, Zeros)):
        out += init_options(c.linear_params, "param-stddev", None)
    else:
        out.append(("init-unit", True))
    out += init_options(c.bias_params, "bias-stddev", None)
    return out + meta_options(
        c,
        LEARNING
        + (
            "max-memory-mb",
            "use-natural-gradient",
            "rank-in",
            "rank-out",
            "alpha-in",
            "alpha-out",
            "num-minibatches-history",
        ),
    )


def _convolution_options(c: Any) -> list[tuple[str, Any]]:
    return (
        field_options(
            c,
            "input_x_dim",
            "input_y_dim",
            "input_z_dim",
            "filt_x_dim",
            "filt_y_dim",
            "filt_x_step",
            "filt_y_step",
            "input_vectorization_order",
        )
        + [("num-filters", c.num_filters)]
        + init_options(c.filter_params, "param-stddev", None)
        + init_options(c.bias_params, "bias-stddev", None)
        + meta_options(c, LEARNING)
    )


def _maxpooling_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(
        c, *(f"input_{a}_dim" for a in "xyz"), *(f"pool_{a}_size" for a in "xyz"), *(f"pool_{a}_step" for a in "xyz")
    )


def _read_time_height(f: ModelFields) -> dict[str, Any]:
    m = f.nested("ConvolutionModel")
    pairs = m.offset_pairs("Offsets")
    out: dict[str, Any] = {
        "num-filters-in": m.int("NumFiltersIn"),
        "num-filters-out": m.int("NumFiltersOut"),
        "height-in": m.int("HeightIn"),
        "height-out": m.int("HeightOut"),
        "height-subsample-out": m.int("HeightSubsampleOut"),
        **dict(_offset_options(pairs)),
        "required-time-offsets": m.ints("RequiredTimeOffsets"),
        **updatable_field_options(f),
        "max-memory-mb": f.float("MaxMemoryMb", 200.0),
        "use-natural-gradient": f.bool("UseNaturalGradient", True),
        "num-minibatches-history": f.float("NumMinibatchesHistory", 4.0),
    }
    if f.has("AlphaInOut"):
        out["alpha-in"], out["alpha-out"] = (stored_float(v) for v in f.pair("AlphaInOut"))
    if f.has("RankInOut"):
        out["rank-in"], out["rank-out"] = (int(v) for v in f.pair("RankInOut"))
    f.origin["input"] = "<ConvolutionModel>'s <NumFiltersIn> x <HeightIn>"
    return out


def _write_time_height(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    model = Block(
        "ConvolutionModel",
        [
            ("NumFiltersIn", c.num_filters_in),
            ("NumFiltersOut", c.num_filters_out),
            ("HeightIn", c.height_in),
            ("HeightOut", c.height_out),
            ("HeightSubsampleOut", c.height_subsample_out),
            ("Offsets", np.array(c.offsets, dtype=np.int32).reshape(-1, 2)),
            ("RequiredTimeOffsets", np.array(c.required_time_offsets, dtype=np.int32)),
        ],
    )
    return updatable_fields(c) + [
        ("Model", None),
        ("ConvolutionModel", model),
        ("LinearParams", p("linear_params")),
        ("BiasParams", p("bias_params")),
        ("MaxMemoryMb", f32(option_or(c, "max-memory-mb", 200.0))),
        ("UseNaturalGradient", bool(option_or(c, "use-natural-gradient", True))),
        ("NumMinibatchesHistory", f32(option_or(c, "num-minibatches-history", 4.0))),
        ("AlphaInOut", (f32(option_or(c, "alpha-in", 4.0)), f32(option_or(c, "alpha-out", 4.0)))),
        ("RankInOut", (int(option_or(c, "rank-in", 20)), int(option_or(c, "rank-out", 80)))),
    ]


#: ConvolutionComponent's dim fields, in Kaldi's write order, and their options.
_CONVOLUTION_DIMS = (
    ("InputXDim", "input-x-dim"),
    ("InputYDim", "input-y-dim"),
    ("InputZDim", "input-z-dim"),
    ("FiltXDim", "filt-x-dim"),
    ("FiltYDim", "filt-y-dim"),
    ("FiltXStep", "filt-x-step"),
    ("FiltYStep", "filt-y-step"),
)
#: Kaldi's TensorVectorizationType: kYzx = 0, kZyx = 1 (`<InputVectorization>`).
_VECTORIZATION = {0: "yzx", 1: "zyx"}


def _read_convolution(f: ModelFields) -> dict[str, Any]:
    out: dict[str, Any] = {key: f.int(token) for token, key in _CONVOLUTION_DIMS}
    code = f.int("InputVectorization")
    if code not in _VECTORIZATION:
        raise f.error(f"expected 0 (yzx) or 1 (zyx), got {code}", "InputVectorization")
    out["input-vectorization-order"] = _VECTORIZATION[code]
    filters = f.array("FilterParams", 2)
    out["num-filters"] = filters.shape[0]
    f.origin["input"] = "<InputXDim> x <InputYDim> x <InputZDim>"
    return {**out, **updatable_field_options(f)}


def _write_convolution(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    code = next(k for k, v in _VECTORIZATION.items() if v == c.input_vectorization_order)
    return (
        updatable_fields(c)
        + [(token, int(getattr(c, key.replace("-", "_")))) for token, key in _CONVOLUTION_DIMS]
        + [
            ("InputVectorization", code),
            ("FilterParams", p("filter_params")),
            ("BiasParams", p("bias_params")),
            ("IsGradient", bool(option_or(c, "is-gradient", False))),
        ]
    )


def _read_maxpooling(f: ModelFields) -> dict[str, Any]:
    out = {}
    for a in "xyz":
        out[f"input-{a}-dim"] = f.int(f"Input{a.upper()}Dim")
        out[f"pool-{a}-size"] = f.int(f"Pool{a.upper()}Size")
        out[f"pool-{a}-step"] = f.int(f"Pool{a.upper()}Step")
    f.origin["input"] = "<InputXDim> x <InputYDim> x <InputZDim>"
    return out


def _write_maxpooling(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        (f"{kind}{a.upper()}{what}", int(getattr(c, f"{attr}_{a}_{what.lower()}")))
        for kind, attr, what in (("Input", "input", "Dim"), ("Pool", "pool", "Size"), ("Pool", "pool", "Step"))
        for a in "xyz"
    ]


# ----- the records ---------------------------------------------------------------------------
# TimeHeightConvolution, Convolution and Maxpooling: token names from shared/KALDI-TEXT-FORMATS.md, not from
# their Write code (int vs float as their text values show; float vs double unverified, which only matters
# for writing a text model as binary byte-identically to Kaldi: Kaldi reads either size).

#: The kinds of the tokens of the <ConvolutionModel> block nested in a TimeHeightConvolutionComponent.
CONVOLUTION_MODEL_KINDS = {
    "NumFiltersIn": INT,
    "NumFiltersOut": INT,
    "HeightIn": INT,
    "HeightOut": INT,
    "HeightSubsampleOut": INT,
    "Offsets": PAIRS,
    "RequiredTimeOffsets": INTS,
}

register(
    KaldiComponentType(
        "TimeHeightConvolutionComponent",
        TimeHeightConvolutionComponent,
        time_height_convolution_component,
        _time_height_options,
        {
            **UPDATABLE_KINDS,
            "Model": FLAG,
            "LinearParams": MATRIX,
            "BiasParams": VECTOR,
            "MaxMemoryMb": FLOAT,
            "UseNaturalGradient": BOOL,
            "NumMinibatchesHistory": FLOAT,
            "AlphaInOut": (FLOAT, FLOAT),
            "RankInOut": (INT, INT),
        },
        _read_time_height,
        _write_time_height,
    )
)
register(
    KaldiComponentType(
        "ConvolutionComponent",
        ConvolutionComponent,
        convolution_component,
        _convolution_options,
        {
            **UPDATABLE_KINDS,
            **{
                t: INT
                for t in (
                    "InputXDim",
                    "InputYDim",
                    "InputZDim",
                    "FiltXDim",
                    "FiltYDim",
                    "FiltXStep",
                    "FiltYStep",
                    "InputVectorization",
                )
            },
            "FilterParams": MATRIX,
            "BiasParams": VECTOR,
        },
        _read_convolution,
        _write_convolution,
    )
)
register(
    KaldiComponentType(
        "MaxpoolingComponent",
        MaxpoolingComponent,
        maxpooling_component,
        _maxpooling_options,
        {
            t: INT
            for t in (
                "InputXDim",
                "InputYDim",
                "InputZDim",
                "PoolXSize",
                "PoolYSize",
                "PoolZSize",
                "PoolXStep",
                "PoolYStep",
                "PoolZStep",
            )
        },
        _read_maxpooling,
        _write_maxpooling,
    )
)
