"""Kaldi nnet3 model files as symnet networks: `KaldiModel`, and writing it (`write_model`, `format_model`).

    model = read_model("final.mdl")          # text or binary, raw nnet or acoustic model
    write_model("copy.mdl", model)           # byte-identical to final.mdl when nothing changed
    write_model("net.raw", parse_network(config), binary=False)   # a network built in symnet

Writing (`model_to_nnet`, `format_model`, `write_model`): a model read from a
file keeps that file (`KaldiModel.source`); every token symnet does not model
(statistics such as `<ValueAvg>`, `<Count>`, `<OderivRms>`, self-repair
counters, legacy tokens) is written back as it was, and a parameter whose
value did not change keeps its stored bits (also float64 ones, such as
BatchNorm's `<Count>`). So a model read and written with no change is
byte-identical in the format it was read in; written in the other format it is
what `nnet3-copy --binary=...` gives. A component that is not the one read
(a network built in symnet, or a component replaced) is synthesised in Kaldi's
write order by its type's record (`symnet._src.kaldi.components`), with empty
statistics, for the types in `WRITABLE_TYPES`; other types raise
`ModelWriteError`. Reading what was written gives an equal network (`==` on
`network.structure`, equal `params`) as long as the components' Weights have
the initialisers their options give by default: Kaldi files store values, not
initialisers (`param-stddev=0` comes back as the default initialiser, with the
stored zeros as its value).

Acoustic models (`nnet3-am-init`, `final.mdl`): the transition model is kept
as read (`KaldiModel.transition_model`; its raw bytes for a byte-identical
rewrite); `<LeftContext>`/`<RightContext>` are the file's while the network's
structure is unchanged, else the network's context; `<Priors>` are
`KaldiModel.priors`. `write_model(..., raw=True)` writes only the nnet
(`nnet3-am-copy --raw=true`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ...base.errors import (
    ArgumentTypeError,
    ConfigError,
    ConfigWriteError,
    DescriptorError,
    ModelFormatError,
    ModelWriteError,
    SymnetError,
)
from ...base.paths import as_path
from ...components.base import Component
from ...core.descriptor import Input, Node
from ...core.layer import Identity, evolve
from ...core.walk import walk
from ...layers.kaldi import kaldi_forms
from ...network import Network
from ..components import PLACEHOLDER_INPUT, WRITABLE_TYPES, ParamValues, lookup
from ..components.fields import Block
from ..text.config import ComponentNode, ConfigLine, DimRangeNode, InputNode, OutputNode, parse_config, write_config
from ..text.descriptor_text import write_descriptor
from ..text.network import by_name, descriptor_dim, dim_range_node, write_order
from .nnet_file import NnetComponent, NnetFile, find_token, format_nnet, write_nnet
from .transition_model import TransitionModel

__all__ = [
    "KaldiModel",
    "as_model",
    "format_model",
    "model_to_nnet",
    "nnet_component",
    "output_dims",
    "write_model",
]


# ----- the model ------------------------------------------------------------------------------


def _check_network(model: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, Network):
        raise ArgumentTypeError(f"KaldiModel.network must be a Network, not {type(value).__name__}")


def _as_priors(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    array = np.array(value, dtype=np.float32)
    if array.ndim != 1:
        raise ModelFormatError(f"priors must be a vector, got shape {array.shape}")
    array.setflags(write=False)
    return array


@attrs.frozen(eq=False)
class KaldiModel:
    """A Kaldi nnet3 model as symnet holds it.

    `network` is the Network, with the file's objectives (train it, run it, replace its parameters);
    `priors` AmNnetSimple's priors (None for a raw nnet); `transition_model` an
    acoustic model's transition model (None for a raw nnet). `source` is the
    `NnetFile` the model was read from (None for a network built in symnet):
    writing takes from it everything symnet does not model, so an unchanged
    model is written back byte for byte. `reference` is the network structure
    built from `source` (to tell what changed since).
    """

    network: Network = attrs.field(validator=_check_network)
    priors: np.ndarray | None = attrs.field(default=None, converter=_as_priors)
    transition_model: TransitionModel | None = None
    source: NnetFile | None = attrs.field(default=None, repr=False)
    reference: Any = attrs.field(default=None, repr=False)

    @property
    def is_am(self) -> bool:
        """Whether this is an acoustic model (a transition model and priors with the nnet)."""
        return self.transition_model is not None

    @property
    def params(self) -> dict[str, Any]:
        """The network's trainable parameters."""
        return self.network.params

    @property
    def values(self) -> dict[str, Any]:
        """Parameters and state together, by Weight name (what the model file stores)."""
        return self.network.values

    def replace(
        self,
        *,
        network: Network | None = None,
        params: Mapping[str, Any] | None = None,
        priors: Any = attrs.NOTHING,
    ) -> KaldiModel:
        """A copy with another network, new parameters or other priors (the file it came from stays).

        A `network` without objectives takes this model's objectives of the outputs it has.
        """
        net = self.network
        if network is not None:
            if not isinstance(network, Network):
                raise ArgumentTypeError(f"KaldiModel.replace: network must be a Network, not {type(network).__name__}")
            if not network.objectives:
                outputs = network.outputs
                network = network.replace(objectives={k: v for k, v in net.objectives.items() if k in outputs})
            net = network
        if params is not None:
            net = net.replace(params=params)
        changes: dict[str, Any] = {"network": net}
        if priors is not attrs.NOTHING:
            changes["priors"] = priors
        return attrs.evolve(self, **changes)


def as_model(value: Any) -> KaldiModel:
    """`value` (a KaldiModel or a Network) as a KaldiModel."""
    if isinstance(value, KaldiModel):
        return value
    if isinstance(value, Network):
        return KaldiModel(value)
    raise ArgumentTypeError(f"expected a KaldiModel or a Network, got {type(value).__name__}")


# ----- writing ---------------------------------------------------------------------------------


def nnet_component(component: Component, params: Mapping[str, Any]) -> NnetComponent:
    """The `NnetComponent` Kaldi would write for `component` (a symnet component) with parameter values
    `params` (the network's, by Weight name): Kaldi's tokens in its write order, empty statistics.
    ModelWriteError for a type symnet cannot write."""
    kind = getattr(component, "kaldi_type", "") or type(component).__name__
    record = lookup(kind)
    if record is None or record.write_fields is None:
        raise ModelWriteError(
            f"component {component.name!r}: symnet cannot write a {kind} to a Kaldi model file "
            f"(it writes: {', '.join(sorted(WRITABLE_TYPES))})"
        )
    try:
        fields = record.write_fields(component, ParamValues(component, params))
    except (TypeError, AttributeError) as e:
        raise ModelWriteError(f"component {component.name!r} ({kind}): cannot write it: {e}") from None
    return NnetComponent(component.name, kind, _blocks(fields))


def _blocks(fields: Any) -> list[tuple[str, Any]]:
    """Fields with every nested `Block` made an `NnetComponent` (name "", token its type)."""
    return [
        (token, NnetComponent("", value.type, _blocks(value.fields)) if isinstance(value, Block) else value)
        for token, value in fields
    ]


def _updated(stored: NnetComponent, component: Component, params: Mapping[str, Any]) -> NnetComponent:
    """`stored` (as read) with the network's current parameter values; unchanged values keep their bits.
    The parts of a CompositeComponent are its nested component blocks, in order."""
    parts = getattr(component, "parts", ())
    if parts:
        fields = list(stored.fields)
        blocks = [
            i
            for i, (token, value) in enumerate(fields)
            if isinstance(value, NnetComponent) and token.endswith("Component")
        ]
        for part, i in zip(parts, blocks, strict=False):
            fields[i] = (fields[i][0], _updated(fields[i][1], part, params))
        stored = attrs.evolve(stored, fields=tuple(fields))
    values: dict[str, Any] = {}
    for field in component.param_fields:
        weight = getattr(component, field)
        name = getattr(weight, "name", None)
        token = find_token(stored, field)
        if token is None or name is None or name not in params:
            continue
        old = stored[token]
        new = np.asarray(params[name])
        old_array = np.asarray(old)
        if new.shape != old_array.shape:
            raise ModelWriteError(
                f"component {component.name!r}: parameter {name!r} has shape {new.shape}, the "
                f"stored <{token}> {old_array.shape}"
            )
        if np.array_equal(new.astype(np.float32), old_array.astype(np.float32), equal_nan=True):
            continue
        if isinstance(old, np.ndarray):
            values[token] = new.astype(old.dtype)
        else:
            values[token] = old.dtype.type(new.reshape(()))
    return stored.replace(**values) if values else stored


def _bare(component: Component) -> Component:
    """The component without its input (to compare components used by different nodes)."""
    return evolve(component, input=PLACEHOLDER_INPUT)


def _network_lines(net: Network) -> tuple[list[ConfigLine], dict[str, Component]]:
    """The node lines Kaldi writes for `net` (no component lines) and its components by name, in order; typed
    layers and nonlinearities are written as Kaldi's components (`symnet._src.layers.kaldi.kaldi_forms`)."""
    try:
        roots = kaldi_forms([layer for _, layer in net.structure.outputs]).roots
    except ConfigWriteError as e:
        raise ModelWriteError(str(e)) from None
    order = walk(roots)
    under_node = {id(layer.arg) for layer in order if isinstance(layer, Node)}
    inputs: dict[str, Input] = {}
    nodes: dict[str, Node] = {}
    for layer in order:
        if isinstance(layer, Identity):
            raise ModelWriteError(
                "the network reads Identity() (x); a Kaldi model needs named inputs: Input(name, dim)"
            )
        if isinstance(layer, Input):
            inputs.setdefault(layer.name, layer)
        elif isinstance(layer, Component) and id(layer) not in under_node:
            raise ModelWriteError(
                f"component {layer.name!r} ({layer.kaldi_type}) is not the operand of a Node; a "
                "Kaldi model needs a component-node for it: Node(name, component)"
            )
        elif isinstance(layer, Node):
            other = nodes.setdefault(layer.name, layer)
            if other is not layer and other != layer:
                raise ModelWriteError(f"two different nodes are named {layer.name!r}")
    lines: list[ConfigLine] = [InputNode(name=name, dim=layer.dim) for name, layer in inputs.items()]
    components: dict[str, Component] = {}
    try:
        for name in write_order(nodes):
            node = nodes[name]
            arg = node.arg
            if isinstance(arg, Component) and hasattr(arg, "input"):
                known = components.setdefault(arg.name, arg)
                if known is not arg and _bare(known) != _bare(arg):
                    raise ModelWriteError(f"node {name!r}: two different components are named {arg.name!r}")
                write_descriptor(arg.input)
                lines.append(ComponentNode(name=name, component=arg.name, descriptor=by_name(arg.input)))
            elif (dim_range := dim_range_node(name, arg)) is not None:
                lines.append(dim_range)
            else:
                raise ModelWriteError(
                    f"node {name!r}: a Kaldi node is a component or a DimRange of a node, not {type(arg).__name__}"
                )
        for (name, _), layer in zip(net.structure.outputs, roots, strict=True):
            write_descriptor(layer)
            lines.append(OutputNode(name=name, descriptor=by_name(layer), objective="linear"))
    except (ConfigError, DescriptorError) as e:
        raise ModelWriteError(str(e).splitlines()[0]) from None
    return lines, components


def output_dims(network: KaldiModel | Network) -> dict[str, int]:
    """The dim of each output of a network (from its node lines and components' dims)."""
    net = as_model(network).network
    lines, components = _network_lines(net)
    dims: dict[str, int] = {}
    out: dict[str, int] = {}
    try:
        for line in lines:
            if isinstance(line, (InputNode, DimRangeNode)):
                dims[line.name] = line.dim
            elif isinstance(line, ComponentNode):
                dims[line.name] = components[line.component].output_dim
            elif isinstance(line, OutputNode):
                out[line.name] = descriptor_dim(line.descriptor, dims, line)
    except (ConfigError, KeyError) as e:
        raise ModelWriteError(f"cannot work out the dims of the network's outputs: {e}") from None
    return out


def model_to_nnet(model: KaldiModel | Network, *, raw: bool = False) -> NnetFile:
    """The `NnetFile` of a model: its source file with the current parameters when the network's structure
    is the one read, else node lines and components written from the network (see the module doc).
    `raw` leaves out an acoustic model's transition model and priors."""
    model = as_model(model)
    net = model.network
    source = model.source
    params = net.values  # a model file stores parameters and state alike
    unchanged = (
        source is not None
        and model.reference is not None
        and net.structure == model.reference
        and dict(net.objectives) == _objectives(source.config)
    )
    if unchanged:
        assert source is not None  # `unchanged` says so
        built = {
            layer.name: layer
            for layer in walk([layer for _, layer in net.structure.outputs])
            if isinstance(layer, Component)
        }
        components = tuple(_updated(c, built[c.name], params) if c.name in built else c for c in source.components)
        config = source.config
    else:
        lines, by_name = _network_lines(net)
        objectives = net.objectives
        lines = [
            attrs.evolve(line, objective=objectives.get(line.name, "linear")) if isinstance(line, OutputNode) else line
            for line in lines
        ]
        reference: dict[str, Component] = {}
        if source is not None and model.reference is not None:
            reference = {
                layer.name: layer
                for layer in walk([layer for _, layer in model.reference.outputs])
                if isinstance(layer, Component)
            }
        stored = {c.name: c for c in source.components} if source is not None else {}
        out = []
        for name, component in by_name.items():
            old = reference.get(name)
            if name in stored and old is not None and _bare(old) == _bare(component):
                out.append(_updated(stored[name], component, params))
            else:
                out.append(nnet_component(component, params))
        components = tuple(out)
        config = write_config(lines)
        if source is not None:
            try:
                same = write_config(parse_config(source.config)) == config
            except SymnetError:
                same = False
            if same:
                config = source.config
    if raw or model.transition_model is None:
        if model.priors is not None and not raw and len(model.priors):
            raise ModelWriteError(
                "the model has priors but no transition model: an acoustic model needs both; "
                "write it raw (raw=True) to leave the priors out"
            )
        return NnetFile(config, components)
    if unchanged and source is not None and source.is_am:
        left, right = source.left_context, source.right_context
    else:
        try:
            left, right = net.context("output")
        except SymnetError as e:
            raise ModelWriteError(
                f"cannot work out the context of output 'output' for the acoustic model: {str(e).splitlines()[0]}"
            ) from None
    priors = model.priors if model.priors is not None else np.zeros(0, np.float32)
    return NnetFile(
        config,
        components,
        transition_model=model.transition_model,
        left_context=left,
        right_context=right,
        priors=priors,
    )


def _objectives(config: str) -> dict[str, str]:
    try:
        return {line.name: line.objective for line in parse_config(config) if isinstance(line, OutputNode)}
    except SymnetError:
        return {}


def format_model(model: KaldiModel | Network, *, binary: bool = True, raw: bool = False) -> bytes:
    """The bytes of the model file Kaldi would write (`nnet3-copy --binary=...`; `raw` as in
    `nnet3-am-copy --raw=true`)."""
    return format_nnet(model_to_nnet(model, raw=raw), binary=binary)


def write_model(
    path: str | os.PathLike[str], model: KaldiModel | Network, *, binary: bool = True, raw: bool = False
) -> None:
    """Write a Kaldi model file, atomically (a failure leaves any existing file untouched)."""
    write_nnet(as_path(path, "write_model"), model_to_nnet(model, raw=raw), binary=binary)
