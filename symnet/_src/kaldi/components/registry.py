"""One record per Kaldi component type, and the registry that finds them by Kaldi's type name.

Kaldi keeps everything about a component type on its class (Type,
InitFromConfig, Read, Write); symnet keeps it in one `KaldiComponentType`
record:

- `name`: Kaldi's type name (``"AffineComponent"``);
- `layer`: the symnet layer class (`symnet.components.AffineComponent`);
- `build(name, options, input, *, read_matrix=None)`: the component from its
  config options, with Kaldi's defaults, checks and initialisation;
- `config_options(component)`: the config options that build it again;
- `read_fields(fields)`: the config options of a component stored in a model
  file, from its fields (a `ModelFields`);
- `write_fields(component, params)`: the fields Kaldi's Write gives for it, in
  Kaldi's order (`params` a `ParamValues`);
- `token_kinds`: the kind of each token Kaldi's Read/Write functions use
  (`symnet._src.kaldi.models.token_kinds`);
- `limitation`: for a type symnet cannot read or write in model files, why.

Each family module of this package (affine, nonlinear, ...) defines its
records and `register`s them; `lookup(kaldi_type)` finds one.
`build_component` builds a component from its options, `component_options`
recovers the options of a component (checked by building it again).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ...base.errors import ComponentConfigError, ConfigWriteError, SymnetError
from ...components.base import Component
from ...core.descriptor import Ref
from ...core.layer import Layer, evolve
from ..models.token_kinds import Kind

__all__ = [
    "PLACEHOLDER_INPUT",
    "KaldiComponentType",
    "build_component",
    "component_options",
    "lookup",
    "option_text",
    "records",
    "register",
]

#: The input a component is built with when only the component matters (a config's `component`
#: line before its node, a component rebuilt from its options); replaced by the node's descriptor.
PLACEHOLDER_INPUT = Ref("_component_input_", where=None)

Builder = Callable[..., Component]
OptionsWriter = Callable[[Any], list[tuple[str, Any]]]
FieldReader = Callable[[Any], dict[str, Any]]
FieldWriter = Callable[[Any, Any], list[tuple[str, Any]]]


def _kinds(value: Mapping[str, Kind]) -> Mapping[str, Kind]:
    return types.MappingProxyType(dict(value))


@attrs.frozen
class KaldiComponentType:
    """Everything symnet knows about one Kaldi component type (see the module doc)."""

    name: str
    layer: type
    build: Builder
    config_options: OptionsWriter
    token_kinds: Mapping[str, Kind] = attrs.field(converter=_kinds)
    read_fields: FieldReader | None = None
    write_fields: FieldWriter | None = None
    limitation: str = ""

    def __attrs_post_init__(self) -> None:
        if getattr(self.layer, "kaldi_type", None) != self.name:
            raise SymnetError(
                f"the record of {self.name} names the layer class {self.layer.__name__}, whose "
                f"kaldi_type is {getattr(self.layer, 'kaldi_type', None)!r}"
            )
        full = self.read_fields is not None and self.write_fields is not None
        if full == bool(self.limitation):
            raise SymnetError(
                f"the record of {self.name}: a type without a field reader or writer needs a "
                "limitation (why), and only such a type"
            )

    @property
    def model_support(self) -> str:
        """What symnet does with this type in Kaldi model files: 'read and write', 'read' or 'config only'."""
        if self.read_fields is not None:
            return "read and write" if self.write_fields is not None else "read"
        return "config only"


_RECORDS: dict[str, KaldiComponentType] = {}


def register(record: KaldiComponentType) -> KaldiComponentType:
    """Add `record` to the registry (once per type name)."""
    if record.name in _RECORDS:
        raise SymnetError(f"two records of the Kaldi component type {record.name}")
    _RECORDS[record.name] = record
    return record


def lookup(kaldi_type: str) -> KaldiComponentType | None:
    """The record of the Kaldi type `kaldi_type`, or None if symnet does not know it."""
    return _RECORDS.get(kaldi_type)


def records() -> Mapping[str, KaldiComponentType]:
    """Kaldi type name -> record, for every type symnet knows (read-only)."""
    return types.MappingProxyType(_RECORDS)


def build_component(
    kaldi_type: str,
    name: str,
    options: Mapping[str, Any],
    input: Layer,
    *,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> Component:
    """Build the component of Kaldi type `kaldi_type` from its config options (strings or Python values),
    with Kaldi's defaults, checks and initialisation. ComponentConfigError for an unknown type or bad
    options. `read_matrix(path)` reads the files that options such as `matrix=` name."""
    record = lookup(kaldi_type)
    if record is None:
        raise ComponentConfigError(
            f"unknown component type {kaldi_type!r}", component=name, type=kaldi_type, option="type"
        )
    return record.build(name, options, input, read_matrix=read_matrix)


# ----- the options of a component ---------------------------------------------------------------


def option_text(value: Any) -> str:
    """An option value as config text that the component reads back exactly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    if isinstance(value, (tuple, list)):
        return ",".join(option_text(v) for v in value)
    return str(value)


def _stripped(component: Component) -> Component:
    return evolve(component, input=PLACEHOLDER_INPUT)


def _rebuild(record: KaldiComponentType, component: Component, options: Sequence[tuple[str, str]]) -> Component | None:
    try:
        return record.build(component.name, dict(options), PLACEHOLDER_INPUT)
    except (SymnetError, TypeError, ValueError):
        return None


def _shape(layer: Layer) -> tuple[int, ...]:
    return tuple(getattr(layer, "shape", ()))


def _same_params(a: Component, b: Component) -> bool:
    for field in a.param_fields:
        wa, wb = getattr(a, field), getattr(b, field)
        if getattr(wa, "name", None) != getattr(wb, "name", None) or _shape(wa) != _shape(wb):
            return False
    return type(a) is type(b)


def component_options(component: Component, *, exact: bool = True) -> list[tuple[str, str]]:
    """The config options (`[(key, value)]`, values as text) that build `component` again.

    Options equal to Kaldi's defaults are left out. The result is checked by
    building the component from it: with `exact`, the rebuilt component must
    equal this one (input aside), including its Weights' names and
    initialisers; without, only its type, hyper-parameters' effect on the
    parameters' names and shapes must agree (for components whose parameters
    were read from files, which a config cannot name: their values live in
    the model file). ConfigWriteError otherwise.
    """
    kind = component.kaldi_type
    record = lookup(kind)
    if record is None:
        what = kind or type(component).__name__
        raise ConfigWriteError(f"component {component.name!r}: no config options known for type {what}")
    try:
        options = [(key, option_text(value)) for key, value in record.config_options(component)]
    except (TypeError, AttributeError, IndexError) as e:
        raise ConfigWriteError(f"component {component.name!r} ({kind}): cannot recover its options: {e}") from None
    target = _stripped(component)
    rebuilt = _rebuild(record, component, options)
    if rebuilt is None or rebuilt != target:
        if exact or rebuilt is None or not _same_params(rebuilt, target):
            text = " ".join(f"{k}={v}" for k, v in options)
            raise ConfigWriteError(
                f"component {component.name!r} ({kind}) cannot be written as a config line: the options "
                f"'{text}' build a different component (parameters read from files, renamed Weights or "
                f"initialisers Kaldi's config cannot express)"
            )
        return options
    # Leave out what the defaults give anyway, last options first.
    for i in range(len(options) - 1, -1, -1):
        trial = options[:i] + options[i + 1 :]
        again = _rebuild(record, component, trial)
        if again is not None and again == target:
            options = trial
    return options
