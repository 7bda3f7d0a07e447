"""Kaldi's structural components: DistributeComponent, CompositeComponent and SpecAugmentTimeMaskComponent
(nnet-general-component.cc, nnet-simple-component.cc).

Config options with Kaldi's defaults, the options that build a component
again and the fields of their model files. A CompositeComponent's parts are
built, read and written by their own records (in a model file each part is a
nested block, `<NumComponents>` of them after `<MaxRowsProcess>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...base.errors import ComponentConfigError, ConfigWriteError, ModelWriteError, SymnetError
from ...components.base import Component
from ...components.structure import PART_INPUT, CompositeComponent, DistributeComponent, SpecAugmentTimeMaskComponent
from ...core.layer import Layer
from ..models.token_kinds import FLOAT, INT
from .fields import (
    IN_OUT_KINDS,
    UPDATABLE_KINDS,
    Block,
    ModelFields,
    ParamValues,
    dim_token,
    f32,
    read_in_out,
    updatable_fields,
    write_in_out,
)
from .options import ComponentOptionReader, MatrixReader, field_options, in_out_options
from .registry import KaldiComponentType, component_options, lookup, option_text, register

__all__ = ["composite_component", "composite_part_name", "distribute_component", "spec_augment_time_mask_component"]


def distribute_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's DistributeComponent::InitFromConfig): input-dim, output-dim (required, positive,
    output-dim divides input-dim)."""
    opts = ComponentOptionReader("DistributeComponent", name, options)
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.finish()
    opts.positive("input-dim", input_dim)
    opts.positive("output-dim", output_dim)
    opts.require(
        input_dim % output_dim == 0, f"output-dim={output_dim} must divide input-dim={input_dim}", "output-dim"
    )
    return DistributeComponent(name, input, input_dim, output_dim)


def _nested_options(opts: ComponentOptionReader, key: str, text: str) -> dict[str, str]:
    """The `key=value` pairs of a nested config line (`'type=AffineComponent input-dim=3 ...'`)."""
    out: dict[str, str] = {}
    for word in text.split():
        name, equals, value = word.partition("=")
        if not equals or not name:
            raise opts.error(f"cannot parse {key}: {word!r} is not key=value", key)
        if name in out:
            raise opts.error(f"cannot parse {key}: {name} is given twice", key)
        out[name] = value
    return out


def composite_part_name(name: str, i: int) -> str:
    """The name of part number `i` (from 1, as in `component{i}=`) of the CompositeComponent `name`."""
    return f"{name}.component{i}"


def composite_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's CompositeComponent::InitFromConfig): num-components (required, >= 1), component1 ..
    componentN (required: each a nested config line `type=... options`, or a mapping with a `type`), of simple
    components (not CompositeComponent) whose dims chain; max-rows-process (4096)."""
    opts = ComponentOptionReader("CompositeComponent", name, options)
    max_rows = opts.int("max-rows-process", 4096)
    num = opts.int("num-components")
    opts.require(num >= 1, f"num-components={num} must be at least 1", "num-components")
    parts: list[Component] = []
    for i in range(1, num + 1):
        key = f"component{i}"
        opts.require(opts.has(key), f"option {key} is required (num-components={num})", key)
        raw = opts.raw[key]
        opts.used.add(key)
        sub = dict(raw) if isinstance(raw, Mapping) else _nested_options(opts, key, str(raw))
        kind = sub.pop("type", None)
        opts.require(bool(kind), f"{key} has no type=", key)
        opts.require(kind != "CompositeComponent", f"{key}: a CompositeComponent cannot be nested in another", key)
        record = lookup(str(kind))
        if record is None:
            raise opts.error(f"{key}: unknown component type {kind}", key)
        try:
            part = record.build(composite_part_name(name, i), sub, PART_INPUT, read_matrix=read_matrix)
        except ComponentConfigError as e:
            raise opts.error(f"{key} ({kind}): {e.message}", key) from None
        except SymnetError as e:
            raise opts.error(f"{key} ({kind}): {e}", key) from None
        opts.require(
            type(part).rowwise and getattr(part, "input", None) is PART_INPUT,
            f"{key}: {kind} is not a simple (row-wise) component",
            key,
        )
        if parts:
            opts.require(
                part.input_dim == parts[-1].output_dim,
                f"{key} has input-dim {part.input_dim}, but component{i - 1} has output-dim {parts[-1].output_dim}",
                key,
            )
        parts.append(part)
    opts.finish()
    return CompositeComponent(name, input, tuple(parts), max_rows)


def spec_augment_time_mask_component(
    name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Component:
    """Options (Kaldi's SpecAugmentTimeMaskComponent::InitFromConfig): dim (required), zeroed-proportion (0.25),
    time-mask-max-frames (10, more than 1). Kaldi's config has no test-mode option: the component starts in
    training mode; `set_test_mode` switches it."""
    opts = ComponentOptionReader("SpecAugmentTimeMaskComponent", name, options)
    dim = opts.int("dim")
    proportion = opts.float("zeroed-proportion", 0.25)
    max_frames = opts.int("time-mask-max-frames", 10)
    opts.finish()
    opts.positive("dim", dim)
    opts.require(max_frames > 1, f"time-mask-max-frames={max_frames} must be more than 1", "time-mask-max-frames")
    return SpecAugmentTimeMaskComponent(name, input, dim, proportion, max_frames)


# ----- config options and model-file fields ------------------------------------------------------


def _composite_options(c: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("max-rows-process", c.max_rows_process), ("num-components", len(c.parts))]
    for i, part in enumerate(c.parts, 1):
        try:
            nested = component_options(part)
        except ConfigWriteError:
            nested = component_options(part, exact=False)
        out.append((f"component{i}", " ".join([f"type={part.kaldi_type}"] + [f"{k}={v}" for k, v in nested])))
    return out


def _read_composite(f: ModelFields) -> dict[str, Any]:
    parts = f.blocks()
    count = f.int("NumComponents")
    if count != len(parts) or count < 1:
        raise f.error(f"says {count} components, but {len(parts)} nested component blocks follow", "NumComponents")
    out: dict[str, Any] = {"max-rows-process": f.int("MaxRowsProcess", 4096), "num-components": count}
    for i, part in enumerate(parts, 1):
        record = lookup(part.component.type)
        if record is None or record.read_fields is None:
            raise part.error(f"symnet cannot read a {part.component.type} from a model file")
        options = record.read_fields(part)
        out[f"component{i}"] = " ".join(
            [f"type={part.component.type}"] + [f"{k}={option_text(v)}" for k, v in options.items()]
        )
    f.origin["input"] = "its first part's fields"
    return out


def _write_composite(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = updatable_fields(c) + [
        ("MaxRowsProcess", int(c.max_rows_process)),
        ("NumComponents", len(c.parts)),
    ]
    for part in c.parts:
        record = lookup(part.kaldi_type)
        if record is None or record.write_fields is None:
            raise ModelWriteError(
                f"component {c.name!r}: symnet cannot write its part {part.name!r} ({part.kaldi_type}) to a model file"
            )
        out.append((part.kaldi_type, Block(part.kaldi_type, record.write_fields(part, ParamValues(part, p.params)))))
    return out


def _spec_augment_options(c: Any) -> list[tuple[str, Any]]:
    return field_options(c, "dim", "zeroed_proportion", "time_mask_max_frames")


def _read_spec_augment(f: ModelFields) -> dict[str, Any]:
    return {
        "dim": dim_token(f),
        "zeroed-proportion": f.float("ZeroedProportion"),
        "time-mask-max-frames": f.int("TimeMaskMaxFrames"),
    }


def _write_spec_augment(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    return [
        ("Dim", c.dim),
        ("ZeroedProportion", f32(c.zeroed_proportion)),
        ("TimeMaskMaxFrames", int(c.time_mask_max_frames)),
    ]


# ----- the records ---------------------------------------------------------------------------

register(
    KaldiComponentType(
        "DistributeComponent",
        DistributeComponent,
        distribute_component,
        in_out_options,
        IN_OUT_KINDS,
        read_in_out,
        write_in_out,
    )
)
register(
    KaldiComponentType(
        "CompositeComponent",
        CompositeComponent,
        composite_component,
        _composite_options,
        {**UPDATABLE_KINDS, "MaxRowsProcess": INT, "NumComponents": INT},
        _read_composite,
        _write_composite,
    )
)
# Token names from shared/KALDI-TEXT-FORMATS.md, not from its Write code.
register(
    KaldiComponentType(
        "SpecAugmentTimeMaskComponent",
        SpecAugmentTimeMaskComponent,
        spec_augment_time_mask_component,
        _spec_augment_options,
        {"Dim": INT, "ZeroedProportion": FLOAT, "TimeMaskMaxFrames": INT},
        _read_spec_augment,
        _write_spec_augment,
    )
)
