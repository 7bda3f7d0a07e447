"""Everything symnet knows about each Kaldi component type, one record per type.

A `KaldiComponentType` (see `registry`) holds a type's layer class, its
config builder (Kaldi's InitFromConfig: options, defaults, initialisation),
the writer of its config options, the reader and writer of its model-file
fields (Kaldi's Read and Write) and the kinds of its tokens. The records live
in one module per family, laid out as `symnet.components`: `affine`,
`nonlinear`, `normalize`, `misc`, `scale`, `recurrent`, `tdnn`,
`convolution`, `attention`, `statistics`, `structure`. What they share:
`options` (reading and writing config options), `fields` (typed access to
model-file fields, parameter values for writing).

`lookup(kaldi_type)` finds a record, `build_component(kaldi_type, name,
options, input)` builds a component from its options, `component_options`
recovers them. The tables below are derived from the records.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from . import (
    affine,
    attention,
    convolution,
    misc,
    nonlinear,
    normalize,
    recurrent,
    scaling,
    statistics,
    structure,
    tdnn,
)
from .convolution import CONVOLUTION_MODEL_KINDS
from .fields import ModelFields, ParamValues
from .options import ComponentOptionReader, MatrixReader, read_matrix_file
from .registry import (
    PLACEHOLDER_INPUT,
    KaldiComponentType,
    build_component,
    component_options,
    lookup,
    records,
    register,
)

# The family modules register their records when imported.
del affine, attention, convolution, misc, nonlinear, normalize, recurrent, scaling, statistics, structure, tdnn

#: Kaldi type name -> builder `(name, options, input, *, read_matrix=None) -> Component`, for every known type.
COMPONENTS: Mapping[str, Any] = types.MappingProxyType({name: r.build for name, r in records().items()})

#: The Kaldi component types `read_model` turns into symnet components.
READABLE_TYPES = frozenset(name for name, r in records().items() if r.read_fields is not None)

#: The Kaldi component types `write_model` can write for a component built in symnet.
WRITABLE_TYPES = frozenset(name for name, r in records().items() if r.write_fields is not None)

#: Kaldi type -> token -> kind of its value (`symnet._src.kaldi.models.token_kinds`): every record's, plus the
#: <ConvolutionModel> block nested in TimeHeightConvolutionComponent.
TOKEN_KINDS: Mapping[str, Mapping[str, Any]] = types.MappingProxyType(
    {
        **{name: r.token_kinds for name, r in records().items()},
        "ConvolutionModel": types.MappingProxyType(CONVOLUTION_MODEL_KINDS),
    }
)

__all__ = [
    "COMPONENTS",
    "PLACEHOLDER_INPUT",
    "READABLE_TYPES",
    "TOKEN_KINDS",
    "WRITABLE_TYPES",
    "ComponentOptionReader",
    "KaldiComponentType",
    "MatrixReader",
    "ModelFields",
    "ParamValues",
    "build_component",
    "component_options",
    "lookup",
    "read_matrix_file",
    "records",
    "register",
]
