"""Reading Kaldi nnet3 model files as symnet networks: `read_model`, `parse_model`, `model_from_nnet`.

    model = read_model("final.mdl")          # text or binary; raw nnet (nnet3-init) or acoustic model
    model.network                            # a Network (with the objectives), parameters from the file
    model.priors                             # AmNnetSimple's priors (None for a raw nnet)

`model_from_nnet` works on the token-level `NnetFile` of
`symnet._src.kaldi.models.nnet_file`: every component the file's node lines use becomes a
`component` config line whose options its type's record
(`symnet._src.kaldi.components`) derives from its fields: dims from the parameter
shapes or the `<Dim>`/`<InputDim>` tokens, hyper-parameters (`<BlockDim>`,
`<TargetRms>`, `<Epsilon>`, `<TimeOffsets>`, `<DropoutProportion>`, the cell
dim of an LSTM from its `<Params>`, ...) and the metadata the config builder
keeps (learning rates, max-change, natural-gradient ranks). The network is
then built by the config builder (`symnet._src.kaldi.text.build.build_network`) from
those lines plus the file's node lines, and every parameter
(`{component}.{token_to_field(token)}`, e.g. `affine1.linear_params`) is set
from the file, shape-checked. A stored shape that disagrees with the node
lines is a `ModelFormatError` naming the component and the token.

Floats the file stores as float32 become options by their shortest decimal
(`0.001`, not `0.0010000000474974513`), so a config option survives the round
trip config -> model file -> network exactly. The model keeps the file it was
read from (`KaldiModel.source`), so writing it back unchanged
(`symnet._src.kaldi.models.model.write_model`) is byte-identical.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...base.errors import (
    ArgumentTypeError,
    ConfigError,
    DescriptorError,
    ModelFormatError,
    ParameterError,
    SymnetError,
)
from ...base.paths import as_path
from ...base.safe_read import MAX_ARRAY_BYTES, read_file
from ...components.base import Component
from ...core.layer import Weight
from ..components import PLACEHOLDER_INPUT, READABLE_TYPES, ModelFields, build_component, lookup
from ..components.fields import describe_value
from ..text.build import build_network, config_structure
from ..text.config import ComponentLine, ComponentNode, ConfigLine, DimRangeNode, InputNode, parse_config
from ..text.descriptor_text import write_descriptor
from ..text.network import descriptor_dim
from .nnet_file import NnetComponent, NnetFile, field_to_token, find_token, parse_nnet

if TYPE_CHECKING:
    import jax

    from ...core.structure import Structure
    from .model import KaldiModel
else:
    from ...core.lazyjax import jax

__all__ = [
    "component_line",
    "is_kaldi_model",
    "model_from_nnet",
    "parse_model",
    "read_model",
    "read_model_structure",
]


def _option_text(value: Any) -> str:
    """A value a field reader gives as config option text (floats by repr, read back exactly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, (tuple, list)):
        return ",".join(_option_text(v) for v in value)
    return str(value)


def _derive(component: NnetComponent, file: str) -> tuple[ComponentLine, ModelFields]:
    f = ModelFields(component, file)
    record = lookup(component.type)
    if record is None or record.read_fields is None:
        known = ", ".join(sorted(READABLE_TYPES))
        raise f.error(f"symnet cannot build a {component.type} from a model file (it reads: {known})")
    options = record.read_fields(f)
    line = ComponentLine(
        name=component.name, type=component.type, options=[(key, _option_text(value)) for key, value in options.items()]
    )
    return line, f


def component_line(component: NnetComponent, *, file: str = "<model>") -> ComponentLine:
    """The `component` config line whose options build `component` (a component of a model file) again,
    up to its parameter values. ModelFormatError for types symnet cannot build or malformed fields."""
    return _derive(component, file)[0]


def _build_one(line: ComponentLine, fields: ModelFields) -> Component:
    try:
        return build_component(line.type, line.name, dict(line.options), PLACEHOLDER_INPUT)
    except SymnetError as e:
        text = getattr(e, "message", str(e))
        raise fields.error(f"the stored values do not make a valid component: {text}") from None


def _config_error(file: str, error: SymnetError) -> ModelFormatError:
    text = str(error)
    return ModelFormatError(f"{file}: the model's config lines do not build a network: {text}")


def model_from_nnet(nnet: NnetFile, *, file: str = "<model>") -> KaldiModel:
    """The KaldiModel of a model file's content (see the module doc). `file` names it in errors."""
    from .model import KaldiModel  # here: describing a model file (`read_model_structure`) imports no jax

    if not isinstance(nnet, NnetFile):
        raise ArgumentTypeError(f"model_from_nnet takes an NnetFile, got {type(nnet).__name__}")
    lines, values = _model_lines(nnet, file)
    try:
        network = build_network(lines, values={name: jax.device_put(v) for name, v in values.items()})
    except (ConfigError, DescriptorError, ParameterError) as e:
        raise _config_error(file, e) from None
    return KaldiModel(
        network,
        priors=nnet.priors,
        transition_model=nnet.transition_model,
        source=nnet,
        reference=network.structure,
    )


def read_model_structure(path: str | os.PathLike[str]) -> tuple[Structure, dict[str, str]]:
    """The structure and output objectives of a Kaldi model file, checked as `read_model` checks it (the
    stored arrays shape-checked too), without building its Network: what `symnet info` needs."""
    path = as_path(path, "read_model_structure")
    nnet = parse_nnet(_read_bytes(path), file=path)
    lines, _ = _model_lines(nnet, path)
    try:
        return config_structure(lines)
    except (ConfigError, DescriptorError, ParameterError) as e:
        raise _config_error(path, e) from None


def _model_lines(nnet: NnetFile, file: str) -> tuple[list[ConfigLine], dict[str, np.ndarray]]:
    """A model file's config lines (its components' lines, then its node lines) and its stored arrays by
    Weight name (float32), checked against each other."""
    try:
        node_lines = parse_config(nnet.config, file=f"{file}[config]")
    except ConfigError as e:
        raise _config_error(file, e) from None
    bad = [line for line in node_lines if isinstance(line, ComponentLine)]
    if bad:
        raise ModelFormatError(
            f"{file}: the config lines of a model file hold nodes only, not 'component' lines "
            f"(found component {bad[0].name})"
        )
    stored = {c.name: c for c in nnet.components}
    used: dict[str, None] = {}
    for line in node_lines:
        if isinstance(line, ComponentNode):
            if line.component not in stored:
                raise ModelFormatError(
                    f"{file}: component-node {line.name} uses component {line.component!r}, "
                    "which the file does not have"
                )
            used.setdefault(line.component)

    component_lines: list[ComponentLine] = []
    built: dict[str, tuple[Component, ModelFields]] = {}
    for c in nnet.components:  # Kaldi's order of components
        if c.name not in used:
            continue
        line, fields = _derive(c, file)
        component_lines.append(line)
        built[c.name] = (_build_one(line, fields), fields)

    _check_dims(node_lines, built, file)
    values: dict[str, np.ndarray] = {}  # parameters and state alike, by Weight name
    for component, fields in built.values():
        _stored_values(component, fields, values)
    return component_lines + node_lines, values


def _stored_values(layer: Component, fields: ModelFields, values: dict[str, Any]) -> None:
    """Put the stored values of `layer`'s parameters (and its parts', a CompositeComponent's) in `values`,
    shape-checked, as float32 numpy arrays."""
    c = fields.component
    for field in layer.param_fields:
        weight = getattr(layer, field)
        if not isinstance(weight, Weight) or weight.name is None:
            continue
        token = find_token(c, field)
        if token is None:
            raise fields.error(f"missing the parameter <{field_to_token(field)}>", field_to_token(field))
        value = np.asarray(c[token])
        if value.dtype.kind != "f":
            raise fields.error(f"expected numbers, got {describe_value(c[token])}", token)
        if tuple(value.shape) != tuple(weight.shape):
            raise fields.error(
                f"has shape {tuple(value.shape)}, but the component's other fields make it {tuple(weight.shape)}", token
            )
        values[weight.name] = value.astype(np.float32, copy=False)
    for part, block in zip(getattr(layer, "parts", ()), fields.blocks(), strict=False):
        _stored_values(part, block, values)


def _check_dims(lines: list[ConfigLine], built: Mapping[str, tuple[Component, ModelFields]], file: str) -> None:
    """ModelFormatError naming the component and token where stored dims disagree with the node lines."""
    dims: dict[str, int] = {}
    for line in lines:
        if isinstance(line, InputNode):
            dims[line.name] = line.dim
        elif isinstance(line, DimRangeNode):
            dims[line.name] = line.dim
        elif isinstance(line, ComponentNode):
            dims[line.name] = built[line.component][0].output_dim
    for line in lines:
        if not isinstance(line, ComponentNode):
            continue
        try:
            got = descriptor_dim(line.descriptor, dims, line)
        except KeyError:
            continue  # a reference to an unknown node: build_network names it
        except ConfigError as e:
            raise _config_error(file, e) from None
        component, fields = built[line.component]
        if got != component.input_dim:
            origin = fields.origin.get("input", "its fields")
            raise ModelFormatError(
                f"{file}: component {line.component!r} ({component.kaldi_type}): {origin}, which makes its input "
                f"dim {component.input_dim}, but component-node {line.name} gives it "
                f"input={write_descriptor(line.descriptor)} of dim {got}"
            )


def parse_model(data: bytes, *, file: str = "<bytes>") -> KaldiModel:
    """The KaldiModel of a Kaldi model file given as bytes (text or binary, raw nnet or acoustic model)."""
    return model_from_nnet(parse_nnet(data, file=file), file=file)


def read_model(path: str | os.PathLike[str]) -> KaldiModel:
    """Read a Kaldi nnet3 model file: a raw nnet (nnet3-init, nnet3-copy) or an acoustic model
    (nnet3-am-init, final.mdl), text or binary. ModelFormatError if it is malformed or inconsistent, or not
    a regular file (a device or FIFO could be read forever)."""
    path = as_path(path, "read_model")
    return parse_model(_read_bytes(path), file=path)


def _read_bytes(path: str) -> bytes:
    return read_file(path, MAX_ARRAY_BYTES, error=ModelFormatError, what="model file")  # opened once


def is_kaldi_model(path: str | os.PathLike[str]) -> bool:
    """Whether the file looks like a Kaldi model file (binary, or text starting <Nnet3> / <TransitionModel>)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    if head.startswith(b"\0B"):
        return True
    word = head.lstrip().split(b" ", 1)[0].split(b"\n", 1)[0]
    return word in (b"<Nnet3>", b"<TransitionModel>")
