"""Kaldi's statistics components: StatisticsExtractionComponent and StatisticsPoolingComponent
(nnet-general-component.cc).

Config options with Kaldi's defaults and checks, the options that build a
component again, the fields of its model files in Kaldi's write order and the
kinds of their tokens, one record per type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...components.base import Component
from ...components.statistics import StatisticsExtractionComponent, StatisticsPoolingComponent
from ...core.layer import Layer
from ..models.token_kinds import BOOL, FLOAT, INT
from .fields import ModelFields, ParamValues, dim_token, f32
from .options import ComponentOptionReader, MatrixReader, field_options
from .registry import KaldiComponentType, register

__all__ = ["statistics_extraction_component", "statistics_pooling_component"]


def statistics_extraction_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's StatisticsExtractionComponent::InitFromConfig): input-dim (required), input-period (1),
    output-period (1; a multiple of input-period), include-variance (true)."""
    opts = ComponentOptionReader("StatisticsExtractionComponent", name, options)
    input_dim = opts.int("input-dim")
    input_period = opts.int("input-period", 1)
    output_period = opts.int("output-period", 1)
    include_variance = opts.bool("include-variance", True)
    opts.finish()
    opts.positive("input-dim", input_dim)
    opts.positive("input-period", input_period)
    opts.positive("output-period", output_period)
    opts.require(
        output_period % input_period == 0,
        f"output-period={output_period} must be a multiple of input-period={input_period}",
        "output-period",
    )
    return StatisticsExtractionComponent(name, input, input_dim, input_period, output_period, include_variance)


def statistics_pooling_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's StatisticsPoolingComponent::InitFromConfig and Check): input-dim (required),
    input-period (1), left-context and right-context (required in effect: Kaldi's default -1 fails its check;
    both >= 0, not both 0, multiples of input-period), num-log-count-features (0), output-stddevs (false; needs
    an odd input-dim), variance-floor (1e-10, in (0, 1))."""
    opts = ComponentOptionReader("StatisticsPoolingComponent", name, options)
    input_dim = opts.int("input-dim")
    input_period = opts.int("input-period", 1)
    left = opts.int("left-context", -1)
    right = opts.int("right-context", -1)
    num_log_count = opts.int("num-log-count-features", 0)
    output_stddevs = opts.bool("output-stddevs", False)
    floor = opts.float("variance-floor", 1.0e-10)
    opts.finish()
    opts.positive("input-dim", input_dim)
    opts.positive("input-period", input_period)
    for key, value in (("left-context", left), ("right-context", right)):
        opts.require(value >= 0, f"option {key} is required and must not be negative (got {value})", key)
        opts.require(value % input_period == 0, f"{key}={value} must be a multiple of input-period={input_period}", key)
    opts.require(left + right > 0, "left-context and right-context must not both be 0", "right-context")
    opts.nonnegative("num-log-count-features", num_log_count)
    opts.require(0.0 < floor < 1.0, f"variance-floor={floor} must be in (0, 1)", "variance-floor")
    opts.require(
        not output_stddevs or (input_dim - 1) % 2 == 0,
        f"output-stddevs needs input-dim = 1 + 2 * feature-dim, got input-dim={input_dim}",
        "input-dim",
    )
    return StatisticsPoolingComponent(
        name, input, input_dim, input_period, left, right, num_log_count, output_stddevs, floor
    )


# ----- config options and model-file fields ------------------------------------------------------


def _statistics_extraction_options(c: Any) -> list[tuple[str, Any]]:
    return [("input-dim", c.in_dim)] + field_options(c, "input_period", "output_period", "include_variance")


def _statistics_pooling_options(c: Any) -> list[tuple[str, Any]]:
    return [("input-dim", c.in_dim)] + field_options(
        c, "input_period", "left_context", "right_context", "num_log_count_features", "output_stddevs", "variance_floor"
    )


def _read_statistics_extraction(f: ModelFields) -> dict[str, Any]:
    return {
        "input-dim": dim_token(f, "InputDim"),
        "input-period": f.int("InputPeriod", 1),
        "output-period": f.int("OutputPeriod", 1),
        "include-variance": f.bool("IncludeVarinance", True),
    }


def _read_statistics_pooling(f: ModelFields) -> dict[str, Any]:
    return {
        "input-dim": dim_token(f, "InputDim"),
        "input-period": f.int("InputPeriod", 1),
        "left-context": f.int("LeftContext"),
        "right-context": f.int("RightContext"),
        "num-log-count-features": f.int("NumLogCountFeatures", 0),
        "output-stddevs": f.bool("OutputStddevs", False),
        "variance-floor": f.float("VarianceFloor", 1.0e-10),
    }


def _write_statistics_pooling(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        ("InputDim", c.in_dim),
        ("InputPeriod", c.input_period),
        ("LeftContext", c.left_context),
        ("RightContext", c.right_context),
        ("NumLogCountFeatures", c.num_log_count_features),
        ("OutputStddevs", bool(c.output_stddevs)),
        ("VarianceFloor", f32(c.variance_floor)),
    ]


def _write_statistics_extraction(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    # "IncludeVarinance" [sic] is Kaldi's token.
    return [
        ("InputDim", c.in_dim),
        ("InputPeriod", c.input_period),
        ("OutputPeriod", c.output_period),
        ("IncludeVarinance", bool(c.include_variance)),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "StatisticsExtractionComponent",
        StatisticsExtractionComponent,
        statistics_extraction_component,
        _statistics_extraction_options,
        {"InputDim": INT, "InputPeriod": INT, "OutputPeriod": INT, "IncludeVarinance": BOOL},
        _read_statistics_extraction,
        _write_statistics_extraction,
    )
)
register(
    KaldiComponentType(
        "StatisticsPoolingComponent",
        StatisticsPoolingComponent,
        statistics_pooling_component,
        _statistics_pooling_options,
        {
            "InputDim": INT,
            "InputPeriod": INT,
            "LeftContext": INT,
            "RightContext": INT,
            "NumLogCountFeatures": INT,
            "OutputStddevs": BOOL,
            "VarianceFloor": FLOAT,
        },
        _read_statistics_pooling,
        _write_statistics_pooling,
    )
)
