"""Kaldi's RestrictedAttentionComponent (nnet-attention-component.cc): config options with Kaldi's
defaults, the options that build it again, and its model-file fields in Kaldi's write order (the
statistics it gathers in training, `<StatsCount>`, `<EntropyStats>`, `<PosteriorStats>`, are written
empty for a component built in symnet and kept as read otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...components.attention import RestrictedAttentionComponent
from ...components.base import Component
from ...core.layer import Layer
from ..models.token_kinds import BOOL, DMATRIX, DOUBLE, DVECTOR, FLOAT, INT
from .fields import ModelFields, ParamValues, f32
from .options import ComponentOptionReader, MatrixReader, field_options
from .registry import KaldiComponentType, register

__all__ = ["restricted_attention_component"]


def restricted_attention_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's RestrictedAttentionComponent::InitFromConfig): key-dim, value-dim, num-left-inputs,
    num-right-inputs (required; not both 0), num-heads (1), time-stride (1), num-left-inputs-required and
    num-right-inputs-required (negative or absent: all of them; at most num-left/right-inputs),
    output-context (true), key-scale (1/sqrt(key-dim) when absent or negative; in (0, 1])."""
    opts = ComponentOptionReader("RestrictedAttentionComponent", name, options)
    key_dim = opts.int("key-dim")
    value_dim = opts.int("value-dim")
    left = opts.int("num-left-inputs")
    right = opts.int("num-right-inputs")
    num_heads = opts.int("num-heads", 1)
    stride = opts.int("time-stride", 1)
    left_required = opts.int("num-left-inputs-required", -1)
    right_required = opts.int("num-right-inputs-required", -1)
    output_context = opts.bool("output-context", True)
    key_scale = opts.float("key-scale", -1.0)
    opts.finish()
    if key_scale < 0.0:
        key_scale = 1.0 / math.sqrt(key_dim) if key_dim > 0 else key_scale
    if left_required < 0:
        left_required = left
    if right_required < 0:
        right_required = right
    for key, value in (
        ("num-heads", num_heads),
        ("key-dim", key_dim),
        ("value-dim", value_dim),
        ("time-stride", stride),
    ):
        opts.positive(key, value)
    opts.nonnegative("num-left-inputs", left)
    opts.nonnegative("num-right-inputs", right)
    opts.require(left + right > 0, "num-left-inputs and num-right-inputs must not both be 0", "num-right-inputs")
    opts.require(
        left_required <= left,
        f"num-left-inputs-required={left_required} exceeds num-left-inputs={left}",
        "num-left-inputs-required",
    )
    opts.require(
        right_required <= right,
        f"num-right-inputs-required={right_required} exceeds num-right-inputs={right}",
        "num-right-inputs-required",
    )
    opts.require(0.0 < key_scale <= 1.0, f"key-scale={key_scale} must be in (0, 1]", "key-scale")
    return RestrictedAttentionComponent(
        name,
        input,
        num_heads,
        key_dim,
        value_dim,
        left,
        right,
        stride,
        left_required,
        right_required,
        output_context,
        key_scale,
    )


def _restricted_attention_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(
        c,
        "num_heads",
        "key_dim",
        "value_dim",
        "num_left_inputs",
        "num_right_inputs",
        "time_stride",
        "num_left_inputs_required",
        "num_right_inputs_required",
        "output_context",
        "key_scale",
    )


#: The integer fields, in Kaldi's write order, and the options they are.
_INT_FIELDS = (
    ("NumHeads", "num-heads"),
    ("KeyDim", "key-dim"),
    ("ValueDim", "value-dim"),
    ("NumLeftInputs", "num-left-inputs"),
    ("NumRightInputs", "num-right-inputs"),
    ("TimeStride", "time-stride"),
    ("NumLeftInputsRequired", "num-left-inputs-required"),
    ("NumRightInputsRequired", "num-right-inputs-required"),
)


def _read_restricted_attention(f: ModelFields) -> dict[str, Any]:
    out: dict[str, Any] = {key: f.int(token) for token, key in _INT_FIELDS}
    out["output-context"] = f.bool("OutputContext")
    out["key-scale"] = f.float("KeyScale")
    f.origin["input"] = "<NumHeads>, <KeyDim>, <ValueDim>, <NumLeftInputs> and <NumRightInputs>"
    return out


def _write_restricted_attention(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [(token, int(getattr(c, key.replace("-", "_")))) for token, key in _INT_FIELDS]
    return out + [
        ("OutputContext", bool(c.output_context)),
        ("KeyScale", f32(c.key_scale)),
        ("StatsCount", np.float64(0.0)),
        ("EntropyStats", np.zeros(0, np.float64)),
        ("PosteriorStats", np.zeros((0, 0), np.float64)),
    ]


register(
    KaldiComponentType(
        "RestrictedAttentionComponent",
        RestrictedAttentionComponent,
        restricted_attention_component,
        _restricted_attention_options,
        {
            **{
                t: INT
                for t in (
                    "NumHeads",
                    "KeyDim",
                    "ValueDim",
                    "NumLeftInputs",
                    "NumRightInputs",
                    "TimeStride",
                    "NumLeftInputsRequired",
                    "NumRightInputsRequired",
                )
            },
            "OutputContext": BOOL,
            "KeyScale": FLOAT,
            "StatsCount": DOUBLE,
            "EntropyStats": DVECTOR,
            "PosteriorStats": DMATRIX,
        },
        _read_restricted_attention,
        _write_restricted_attention,
    )
)
