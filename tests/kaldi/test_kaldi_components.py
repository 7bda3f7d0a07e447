"""The records of Kaldi component types (symnet._src.kaldi.components): complete, consistent, and the source of
every table derived from them."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import symnet.components as layers
from helpers.component_samples import NONSIMPLE_SAMPLES
from helpers.component_samples import SAMPLES as SIMPLE_SAMPLES
from symnet._src.components.base import Component
from symnet._src.core.layer import Weight
from symnet._src.kaldi.components import PLACEHOLDER_INPUT, ModelFields, ParamValues, records
from symnet._src.kaldi.components.fields import Block
from symnet._src.kaldi.models import token_kinds as kinds
from symnet.kaldi import (
    COMPONENTS,
    READABLE_TYPES,
    TOKEN_KINDS,
    WRITABLE_TYPES,
    KaldiComponentType,
    build_component,
    lookup,
    nnet_component,
)

SAMPLES = {**SIMPLE_SAMPLES, **{kind: options for kind, (options, _, _) in NONSIMPLE_SAMPLES.items()}}
SCALAR_KINDS = {kinds.INT, kinds.FLOAT, kinds.DOUBLE, kinds.BOOL}
ALL_KINDS = SCALAR_KINDS | {kinds.FLAG, *kinds.ARRAYS}


def _layer_classes() -> dict[str, type]:
    """Every component layer class symnet.components exports that names a Kaldi type."""
    out = {}
    for name in layers.__all__:
        value = getattr(layers, name)
        if isinstance(value, type) and issubclass(value, Component) and value.kaldi_type:
            out[value.kaldi_type] = value
    return out


def test_every_layer_class_has_one_record_and_every_record_is_complete_or_says_why():
    assert set(records()) == set(_layer_classes())
    for name, record in records().items():
        assert isinstance(record, KaldiComponentType)
        assert record.name == name and record.layer is _layer_classes()[name] and record.layer.kaldi_type == name
        assert callable(record.build) and callable(record.config_options)
        assert record.token_kinds, name
        for token, kind in record.token_kinds.items():
            assert kind in ALL_KINDS or (isinstance(kind, tuple) and set(kind) <= SCALAR_KINDS), (name, token, kind)
        # Every type that loads from a config also loads from a model file and writes back.
        assert callable(record.read_fields) and callable(record.write_fields), name
        assert record.limitation == "", name
        assert record.model_support == "read and write"
        assert lookup(name) is record


def test_a_record_without_model_support_must_say_why():
    base = records()["AffineComponent"]
    with pytest.raises(Exception, match="limitation"):
        attrs.evolve(base, read_fields=None)
    with pytest.raises(Exception, match="limitation"):
        attrs.evolve(base, limitation="no reason needed")
    with pytest.raises(Exception, match="kaldi_type"):
        attrs.evolve(base, name="LinearComponent")


def test_the_derived_tables_are_the_records():
    assert dict(COMPONENTS) == {name: r.build for name, r in records().items()}
    assert READABLE_TYPES == {name for name, r in records().items() if r.read_fields is not None}
    assert WRITABLE_TYPES == {name for name, r in records().items() if r.write_fields is not None}
    assert set(TOKEN_KINDS) - set(records()) == {"ConvolutionModel"}
    for name, record in records().items():
        assert dict(TOKEN_KINDS[name]) == dict(record.token_kinds)
    assert lookup("ConvolutionModel") is None


def test_every_record_has_a_sample():
    assert set(SAMPLES) == set(records())


@pytest.mark.parametrize("name", sorted(records()))
def test_fields_written_by_a_record_are_read_back_by_it(name):
    """write_fields gives tokens of the record's kinds (NnetComponent normalises them by those kinds), and
    read_fields turns them into options that build the same component (up to initialisers: a model file
    stores values)."""
    record = records()[name]
    component = build_component(name, "c1", SAMPLES[name], PLACEHOLDER_INPUT)
    params = {w.name: np.full(w.shape, 0.25, np.float32) for w in _weights(component)}
    fields = record.write_fields(component, ParamValues(component, params))
    blocks = {token for token, value in fields if isinstance(value, Block)}  # nested: a part, a ConvolutionModel
    assert {token for token, _ in fields} - blocks <= set(record.token_kinds), name
    stored = nnet_component(component, params)
    assert stored.tokens == tuple(token for token, _ in fields)
    options = record.read_fields(ModelFields(stored, "<test>"))
    again = build_component(name, "c1", options, PLACEHOLDER_INPUT)
    assert type(again) is type(component)
    assert _hyper_parameters(again) == _hyper_parameters(component)
    assert {w.name: w.shape for w in _weights(again)} == {w.name: w.shape for w in _weights(component)}


def _weights(component: Component) -> list[Weight]:
    """The component's Weights (a CompositeComponent's are its parts')."""
    own = [getattr(component, f) for f in component.param_fields if isinstance(getattr(component, f), Weight)]
    return own + [w for part in getattr(component, "parts", ()) for w in _weights(part)]


def _hyper_parameters(component: Component) -> dict:
    """The component's fields other than its operands and Kaldi metadata."""
    operands = {"input", *component.param_fields}
    return {
        f.name: getattr(component, f.name)
        for f in attrs.fields(type(component))
        if f.name not in operands and f.name not in ("options", "where", "name")
    }
