"""Kaldi nnet3 configs as symnet Networks, and back; symnet's own model file format.

Reading (`read_network`, `parse_network`, `build_network`) turns config lines
into a `KaldiNetwork`: a `symnet.Network` plus the objective of each output.

- `input-node name=input dim=12` is `Input('input', 12)`.
- `component` + `component-node` is `Node(node, Component(input))`: the
  component (from `COMPONENTS[type]`, with Kaldi's options, defaults and
  initialisation) whose input is the node's descriptor, its node names
  replaced by the layers they name (the `Input`, or the `Node` of a component-
  or dim-range-node). A component used by several component-nodes is built
  once: every use holds the same Weights (`{component}.{param}`), so they are
  one shared parameter.
- `dim-range-node` is `Node(name, DimRange(source, dim_offset, dim))`.
- `output-node name=output input=... objective=...` is the Network output
  `output`; its objective is in `KaldiNetwork.objectives`.

The Network finds its nodes by walking the trees from the outputs, so a
reference is replaced by the layer it names wherever that keeps the tree
finite. Only references that close a cycle (a recurrence, such as
`IfDefined(Offset(lstm1.m_trunc, -1))`) stay `Ref(name)`: the nodes are
visited depth-first from the output-nodes, each node's references in the
order they appear in its descriptor, and a reference to a node still being
visited (a back edge) is a `Ref`. The engine resolves it to the Node of that
name, which is then an enclosing node. Nodes that no output uses are left out
(with a warning, as Kaldi warns about orphan nodes).

Config errors are `ConfigError`s with file, line, column and a caret: line
syntax and references (`check_config`), unknown component types, missing or
malformed component options, and dimensions, which are checked statically:
a descriptor's dim is its node's dim (an input-node's dim, a component's
output-dim, a dim-range-node's dim), `Append` adds dims, `Sum`, `Failover`
and `Switch` need parts of one dim, `Const(value, dim)` has `dim`, and the
rest keep their operand's dim; a component-node's input must have the
component's input-dim.

A further config can add to or override an existing network
(`read_network(more, base=net)`, Kaldi's `nnet3-init existing.raw more.config`):
its lines are merged by Kaldi's rules (`merge_config`); components it
redefines are initialised afresh, every other parameter keeps its value.

Writing (`network_config_lines`, `write_network`) prints a Network as config
lines: an `input-node` per Input, a `component` line per component (its
options recovered from its fields, metadata and initialisers, see
`component_options`), a `component-node` per Node of a component, a
`dim-range-node` per Node of a `DimRange`, an `output-node` per output.
Reading what was written gives an equal Network (`==` on `net.structure`).

Model files (`save_model`, `load_model`): see `save_model`.
"""

from __future__ import annotations

import difflib
import heapq
import json
import os
import types
import warnings
import zipfile
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from ..components import COMPONENTS, ComponentConfigError, CompositeComponent
from ..components.base import Component, Constant
from ..core.descriptor import (
    Append,
    Const,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
)
from ..atomic import atomic_open
from ..version import __version__
from ..errors import ConfigError, DescriptorError, ModelFormatError, ParameterError, SymnetError
from ..core.initializers import Normal, Zeros
from ..core.layer import Identity, Layer, Weight
from ..core.walk import walk
from ..network import Network
from .config import (
    ComponentLine,
    ComponentNode,
    ConfigLine,
    DimRangeNode,
    InputNode,
    OutputNode,
    check_config,
    merge_config,
    parse_config,
    read_config,
    write_config,
)
from .descriptor_text import write_descriptor

__all__ = [
    "MODEL_FORMAT",
    "MODEL_VERSION",
    "ConfigWriteError",
    "KaldiNetwork",
    "build_network",
    "component_options",
    "load_model",
    "network_config_lines",
    "parse_network",
    "read_network",
    "save_model",
    "write_network",
]


class ConfigWriteError(SymnetError, ValueError):
    """A Network that cannot be written as a Kaldi config (a node that is not a component or a
    dim range, a component whose options cannot be recovered, an expression Kaldi's descriptors cannot say)."""


# ----- the result of reading a config ---------------------------------------------------------


def _frozen_objectives(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value or {}))


@attrs.frozen(eq=False)
class KaldiNetwork:
    """A Network read from a Kaldi config, with the objective of each output.

    `network` is an ordinary `symnet.Network` (a pytree: train, jit and run
    it as any other); `objectives` maps each output name to Kaldi's
    `objective` (`'linear'` or `'quadratic'`), read-only. Objectives are
    training metadata, not part of the computation, so they live beside the
    Network rather than in its expression. A KaldiNetwork is itself a
    pytree (its leaf is the Network; the objectives are static).
    """

    network: Network
    objectives: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_objectives)

    @property
    def structure(self):
        return self.network.structure

    @property
    def params(self):
        return self.network.params

    def replace(self, *, network: Network | None = None, params: Mapping[str, Any] | None = None) -> KaldiNetwork:
        """The same objectives with another network, or with new parameters."""
        net = network if network is not None else self.network
        if params is not None:
            net = net.replace(params=params)
        return KaldiNetwork(net, self.objectives)

    def config_lines(self) -> list[ConfigLine]:
        """The network as config lines (see `network_config_lines`)."""
        return network_config_lines(self)

    def to_config(self) -> str:
        """The network as config text (see `write_network`)."""
        return write_network(self)


jax.tree_util.register_pytree_node(
    KaldiNetwork,
    lambda k: ((k.network,), tuple(k.objectives.items())),
    lambda objectives, children: KaldiNetwork(children[0], dict(objectives)),
)


def _unwrap(network: Network | KaldiNetwork, objectives: Mapping[str, str] | None) -> tuple[Network, dict[str, str]]:
    if isinstance(network, KaldiNetwork):
        merged = dict(network.objectives)
        merged.update(objectives or {})
        return network.network, merged
    if not isinstance(network, Network):
        raise TypeError(f"expected a Network or KaldiNetwork, got {type(network).__name__}")
    return network, dict(objectives or {})


# ----- reading ------------------------------------------------------------------------------

_PLACEHOLDER = Ref("_component_input_", where=None)


def _where(line: ConfigLine, key: str | None = None) -> str | None:
    source = line.source
    if source is None:
        return None
    column = (source.value_column(key) if key else None) or source.kind_column
    return f"{source.file}:{source.line}:{column}"


def _column(where: str | None) -> int | None:
    """The column of a `file:line:column` location (the `where` of a parsed descriptor)."""
    if not where:
        return None
    tail = where.rsplit(":", 1)
    try:
        return int(tail[1]) if len(tail) == 2 else None
    except ValueError:
        return None


def _component_error(line: ComponentLine, error: SymnetError) -> ConfigError:
    """A component builder's error as a ConfigError pointing at the option at fault."""
    option = getattr(error, "option", None)
    text = getattr(error, "message", str(error))
    message = f"component {line.name} ({line.type}): {text}"
    source = line.source
    if source is None:
        return ConfigError(message)
    column = None
    if option is not None and source.key_column(option) is not None:
        column = source.key_column(option) if text.startswith("unknown option") else source.value_column(option)
    return source.error(message, column)  # a missing option points at the end of the line


def _build_component(line: ComponentLine, read_matrix: Callable | None) -> Component:
    builder = COMPONENTS.get(line.type)
    if builder is None:
        close = difflib.get_close_matches(line.type, sorted(COMPONENTS), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise line.error(f"unknown component type {line.type}{hint}", "type")
    try:
        component = builder(line.name, dict(line.options), _PLACEHOLDER, read_matrix=read_matrix)
    except ComponentConfigError as e:
        raise _component_error(line, e) from None
    except ConfigError:
        raise
    except SymnetError as e:
        raise _component_error(line, e) from None
    return attrs.evolve(component, where=_where(line))


def _leaf_names(layer: Layer) -> list[str]:
    """The node names a descriptor refers to, in order of appearance, each once."""
    names: dict[str, None] = {}
    stack = [layer]
    while stack:
        item = stack.pop()
        if isinstance(item, (Ref, Input, Node)):
            names.setdefault(item.name)
        else:
            stack.extend(reversed(item.children))
    return list(names)


def _descriptor_dim(layer: Layer, dims: Mapping[str, int], line: ConfigLine) -> int:
    """The dim of a descriptor, checking that the parts of Sum, Failover and Switch agree."""
    if isinstance(layer, (Ref, Input, Node)):
        return dims[layer.name]
    if isinstance(layer, Const):
        return layer.dim
    if isinstance(layer, Append):
        return sum(_descriptor_dim(p, dims, line) for p in layer.parts)
    if isinstance(layer, (Sum, Switch, Failover)):
        parts = layer.parts if isinstance(layer, (Sum, Switch)) else (layer.first, layer.second)
        found = [_descriptor_dim(p, dims, line) for p in parts]
        if len(set(found)) > 1:
            what = type(layer).__name__
            message = f"{what}() of parts with different dims ({', '.join(map(str, found))})"
            column = _column(layer.where)
            if line.source is not None and column is not None and layer.where.startswith(line.source.file + ":"):
                raise line.source.error(message, column)
            raise line.error(message, "input")
        return found[0]
    if isinstance(layer, (Offset, IfDefined, Round, ReplaceIndex, Scale)):
        return _descriptor_dim(layer.arg, dims, line)
    if isinstance(layer, DimRange):
        return layer.dim
    raise line.error(f"{type(layer).__name__} is not a Kaldi descriptor", "input")


def _substitute(layer: Layer, resolve: Callable[[str], Layer]) -> Layer:
    """The descriptor with every node-name leaf replaced by `resolve(name)`."""
    if isinstance(layer, (Ref, Input, Node)):
        return resolve(layer.name)
    children = layer.children
    if not children:
        return layer
    return layer.with_children(tuple(_substitute(c, resolve) for c in children))


def _visit_order(
    roots: Sequence[str], deps: Mapping[str, Sequence[str]]
) -> tuple[list[str], set[tuple[str, str]]]:
    """Depth-first from `roots`: nodes in post-order (operands first) and the back edges (user, used)."""
    state: dict[str, int] = {}  # 1: being visited, 2: done
    order: list[str] = []
    back: set[tuple[str, str]] = set()
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(deps[root]))]
        while stack:
            name, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[name] = 2
                order.append(name)
            elif state.get(nxt) == 1:
                back.add((name, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))
    return order, back


def _check_instant_cycles(node_lines: Mapping[str, ConfigLine]) -> None:
    """ConfigError for nodes that depend on themselves at the same frame (no time offset on the cycle)."""
    deps: dict[str, list[str]] = {}
    for name, line in node_lines.items():
        if isinstance(line, ComponentNode):
            deps[name] = list(dict.fromkeys(ref for ref, shifted in _strong_refs(line.descriptor) if not shifted))
        elif isinstance(line, DimRangeNode):
            deps[name] = [line.input_node]
        else:
            deps[name] = []
    state: dict[str, int] = {}
    for start in node_lines:
        if start in state:
            continue
        path = [start]
        state[start] = 1
        stack = [iter(deps[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                state[path.pop()] = 2
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                line = node_lines[cycle[0]]
                raise line.error(f"nodes {' -> '.join(cycle)} depend on each other at the same frame (a cycle "
                                 "with no time offset on it cannot be computed)",
                                 "input" if isinstance(line, ComponentNode) else "input-node")
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(deps[nxt]))


def build_network(
    lines: Iterable[ConfigLine],
    *,
    seed: int = 0,
    base: Network | KaldiNetwork | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> KaldiNetwork:
    """The KaldiNetwork of parsed config lines (see the module doc).

    `seed` seeds the parameters' initialisation (Kaldi's initialisation of
    each component, drawn with a key derived from the seed and the
    parameter's name). With `base`, `lines` add to or override that network
    (Kaldi's rules, `merge_config`): redefined components start afresh,
    every other parameter keeps its value in `base`. `read_matrix` reads the
    files named by `matrix=`/`vector=` options (default: Kaldi text or .npy).
    """
    lines = list(lines)
    base_net = None
    redefined = {line.name for line in lines if isinstance(line, ComponentLine)}
    if base is not None:
        base_net, _ = _unwrap(base, None)
        lines = merge_config(network_config_lines(base, exact=False), lines)
    check_config(lines)

    component_lines = {line.name: line for line in lines if isinstance(line, ComponentLine)}
    node_lines = {line.name: line for line in lines if not isinstance(line, (ComponentLine, OutputNode))}
    output_lines = [line for line in lines if isinstance(line, OutputNode)]
    components = {name: _build_component(line, read_matrix) for name, line in component_lines.items()}

    # The dim of every node, then the dims of every descriptor, checked.
    dims: dict[str, int] = {}
    for line in node_lines.values():
        if isinstance(line, InputNode):
            dims[line.name] = line.dim
        elif isinstance(line, ComponentNode):
            dims[line.name] = components[line.component].output_dim
        else:
            dims[line.name] = line.dim
    for line in node_lines.values():
        if isinstance(line, DimRangeNode):
            source_dim = dims[line.input_node]
            if line.dim_offset + line.dim > source_dim:
                raise line.error(
                    f"dim-range-node {line.name}: dim-offset={line.dim_offset} plus dim={line.dim} exceeds the dim "
                    f"{source_dim} of node {line.input_node}", "dim-offset")
        elif isinstance(line, ComponentNode):
            component = components[line.component]
            got = _descriptor_dim(line.descriptor, dims, line)
            if got != component.input_dim:
                raise line.error(
                    f"component-node {line.name}: its input has dim {got}, but component {line.component} "
                    f"({component_lines[line.component].type}) has input-dim {component.input_dim}", "input")
    for line in output_lines:
        _descriptor_dim(line.descriptor, dims, line)

    _check_instant_cycles(node_lines)

    # Depth-first from the outputs: post-order to build, back edges stay Refs.
    deps: dict[str, list[str]] = {}
    for name, line in node_lines.items():
        if isinstance(line, ComponentNode):
            deps[name] = _leaf_names(line.descriptor)
        elif isinstance(line, DimRangeNode):
            deps[name] = [line.input_node]
        else:
            deps[name] = []
    roots = [name for line in output_lines for name in _leaf_names(line.descriptor)]
    order, back = _visit_order(roots, deps)
    visited = set(order)
    used_components = {line.component for line in node_lines.values() if isinstance(line, ComponentNode)}
    for line in lines:
        where = _where(line)
        if isinstance(line, ComponentLine) and line.name not in used_components:
            warnings.warn(f"{where + ': ' if where else ''}component {line.name} is not used by any "
                          "component-node; it is left out of the network", stacklevel=2)
        elif not isinstance(line, (ComponentLine, OutputNode)) and line.name not in visited:
            warnings.warn(f"{where + ': ' if where else ''}{line.kind} {line.name} is not used by any output; "
                          "it is left out of the network", stacklevel=2)

    built: dict[str, Layer] = {}
    for name in order:
        line = node_lines[name]

        def resolve(target: str, user: str = name) -> Layer:
            return Ref(target, where=_where(node_lines[user], "input")) if (user, target) in back else built[target]

        if isinstance(line, InputNode):
            built[name] = Input(name, line.dim, where=_where(line))
        elif isinstance(line, ComponentNode):
            component = attrs.evolve(components[line.component], input=_substitute(line.descriptor, resolve))
            built[name] = Node(name, component, where=_where(line))
        else:
            source = resolve(line.input_node)
            built[name] = Node(name, DimRange(source, line.dim_offset, line.dim, where=_where(line, "input-node")),
                               where=_where(line))
    outputs = {line.name: _substitute(line.descriptor, built.__getitem__) for line in output_lines}
    objectives = {line.name: line.objective for line in output_lines}

    try:
        network = Network(outputs, seed=seed)
    except ParameterError as e:  # e.g. a Weight name used by two different components
        raise ConfigError(str(e), file=_config_file(lines)) from None
    if base_net is not None:
        network = _keep_base_params(network, base_net, redefined)
    return KaldiNetwork(network, objectives)


def _config_file(lines: Sequence[ConfigLine]) -> str:
    return next((line.source.file for line in lines if line.source), "<config>")


def _component_params(network: Network) -> dict[str, str]:
    """Parameter name -> the name of the component that holds it."""
    owner: dict[str, str] = {}
    for layer in walk([layer for _, layer in network.structure.outputs]):
        if isinstance(layer, Component):
            for field in layer.param_fields:
                weight = getattr(layer, field)
                if isinstance(weight, Weight) and weight.name is not None:
                    owner.setdefault(weight.name, layer.name)
    return owner


def _keep_base_params(network: Network, base: Network, redefined: set[str]) -> Network:
    """`network` with the values in `base` of every parameter of a component not in `redefined`."""
    owner = _component_params(network)
    params = dict(network.params)
    for name, value in base.params.items():
        if name in params and owner.get(name) not in redefined and tuple(value.shape) == tuple(params[name].shape):
            params[name] = value
    return network.replace(params=params)


def parse_network(
    text: str,
    *,
    file: str = "<config>",
    seed: int = 0,
    base: Network | KaldiNetwork | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> KaldiNetwork:
    """The KaldiNetwork of a config text (errors name `file`)."""
    return build_network(parse_config(text, file=file), seed=seed, base=base, read_matrix=read_matrix)


def read_network(
    source: str | os.PathLike[str] | Any,
    *,
    seed: int = 0,
    base: Network | KaldiNetwork | None = None,
    file: str | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> KaldiNetwork:
    """The KaldiNetwork of a config file, given as a path or an open text file."""
    return build_network(read_config(source, file=file), seed=seed, base=base, read_matrix=read_matrix)


# ----- component options, recovered from a component ----------------------------------------

_LEARNING = ("learning-rate", "learning-rate-factor", "max-change", "l2-regularize")
_NATURAL = ("num-samples-history", "alpha", "rank-in", "rank-out", "update-period")


def _meta(component: Component, keys: Iterable[str]) -> list[tuple[str, Any]]:
    out = []
    for key in keys:
        value = component.option(key)
        if value is not None:
            out.append((key, value))
    return out


def _init(layer: Layer, stddev_key: str | None, mean_key: str | None) -> list[tuple[str, Any]]:
    """Options that make Kaldi's `SetRandn(); Scale(stddev); Add(mean)` give this Weight's initialiser."""
    init = getattr(layer, "init", None)
    if isinstance(init, Normal):
        stddev, mean = init.stddev, init.mean
    elif isinstance(init, Zeros):
        stddev, mean = 0.0, 0.0
    elif isinstance(init, Constant):
        stddev, mean = 0.0, init.value
    else:
        return []
    out = []
    if stddev_key:
        out.append((stddev_key, stddev))
    if mean_key:
        out.append((mean_key, mean))
    return out


def _shape(layer: Layer) -> tuple[int, ...]:
    return tuple(getattr(layer, "shape", ()))


def _fields(component: Component, *names: str) -> list[tuple[str, Any]]:
    return [(name.replace("_", "-"), getattr(component, name)) for name in names]


def _affine_opts(c: Any) -> list[tuple[str, Any]]:
    natural = c.kaldi_type == "NaturalGradientAffineComponent"
    out = [("input-dim", c.input_dim), ("output-dim", c.output_dim)]
    out += _init(c.linear_params, "param-stddev", None)
    out += _init(c.bias_params, "bias-stddev", "bias-mean" if natural else None)
    out += _meta(c, _LEARNING + ("orthonormal-constraint",) + (_NATURAL if natural else ()))
    return out


def _linear_opts(c: Any) -> list[tuple[str, Any]]:
    return ([("input-dim", c.input_dim), ("output-dim", c.output_dim)] + _init(c.params, "param-stddev", None)
            + _meta(c, _LEARNING + _NATURAL + ("use-natural-gradient", "orthonormal-constraint")))


def _block_affine_opts(c: Any) -> list[tuple[str, Any]]:
    return ([("input-dim", c.input_dim), ("output-dim", c.output_dim), ("num-blocks", c.num_blocks)]
            + _init(c.linear_params, "param-stddev", None) + _init(c.bias_params, "bias-stddev", "bias-mean")
            + _meta(c, _LEARNING))


def _repeated_opts(c: Any) -> list[tuple[str, Any]]:
    return ([("num-repeats", c.num_repeats), ("input-dim", c.input_dim), ("output-dim", c.output_dim)]
            + _init(c.linear_params, "param-stddev", None) + _init(c.bias_params, "bias-stddev", "bias-mean")
            + _meta(c, _LEARNING))


def _nonlinear_opts(c: Any) -> list[tuple[str, Any]]:
    return [("dim", c.dim)] + _meta(c, ("block-dim", "self-repair-lower-threshold", "self-repair-upper-threshold",
                                        "self-repair-scale"))


def _lstm_opts(c: Any) -> list[tuple[str, Any]]:
    out = [("cell-dim", c.cell_dim)] + _init(c.params, "param-stddev", None) + [("use-dropout", c.use_dropout)]
    config = c.option("self-repair-config")
    if config is not None and len(config) == 10:
        out += [("sigmoid-self-repair-threshold", config[0]), ("tanh-self-repair-threshold", config[2]),
                ("self-repair-scale", config[5])]
    return out + _meta(c, _LEARNING)


def _gru_opts(c: Any) -> list[tuple[str, Any]]:
    return ([("cell-dim", c.cell_dim), ("recurrent-dim", c.recurrent_dim)] + _init(c.w_h, "param-stddev", None)
            + _meta(c, _LEARNING + ("self-repair-threshold", "self-repair-scale", "alpha", "rank-in", "rank-out",
                                    "update-period")))


def _output_gru_opts(c: Any) -> list[tuple[str, Any]]:
    return ([("cell-dim", c.cell_dim)] + _init(c.w_h, "param-stddev", "param-mean")
            + _meta(c, _LEARNING + ("self-repair-threshold", "self-repair-scale", "alpha", "rank", "update-period")))


def _per_element_scale_opts(c: Any) -> list[tuple[str, Any]]:
    keys = _LEARNING + (("rank", "update-period", "num-samples-history", "alpha")
                        if c.kaldi_type.startswith("NaturalGradient") else ())
    return [("dim", c.input_dim)] + _init(c.params, "param-stddev", "param-mean") + _meta(c, keys)


def _tdnn_opts(c: Any) -> list[tuple[str, Any]]:
    out = [("input-dim", c.input_dim), ("output-dim", c.output_dim), ("time-offsets", c.time_offsets),
           ("use-bias", c.use_bias)]
    out += _init(c.linear_params, "param-stddev", None)
    if c.use_bias:
        out += _init(c.bias_params, "bias-stddev", "bias-mean")
    return out + _meta(c, _LEARNING + ("orthonormal-constraint", "use-natural-gradient", "rank-in", "rank-out",
                                       "alpha-in", "alpha-out", "num-samples-history"))


def _fixed_scale_opts(c: Any) -> list[tuple[str, Any]]:
    init = getattr(c.scales, "init", None)
    out: list[tuple[str, Any]] = [("dim", c.input_dim)]
    if isinstance(init, Constant):
        out.append(("scale", init.value))
    elif isinstance(init, Zeros):
        out.append(("scale", 0.0))
    return out


def _time_height_opts(c: Any) -> list[tuple[str, Any]]:
    out = [("num-filters-in", c.num_filters_in), ("num-filters-out", c.num_filters_out), ("height-in", c.height_in),
           ("height-out", c.height_out), ("height-subsample-out", c.height_subsample_out),
           ("height-offsets", c.height_offsets), ("time-offsets", c.time_offsets),
           ("required-time-offsets", c.required_time_offsets)]
    if isinstance(getattr(c.linear_params, "init", None), (Normal, Zeros)):
        out += _init(c.linear_params, "param-stddev", None)
    else:
        out.append(("init-unit", True))
    out += _init(c.bias_params, "bias-stddev", None)
    return out + _meta(c, _LEARNING + ("max-memory-mb", "use-natural-gradient", "rank-in", "rank-out", "alpha-in",
                                       "alpha-out", "num-minibatches-history"))


def _convolution_opts(c: Any) -> list[tuple[str, Any]]:
    return (_fields(c, "input_x_dim", "input_y_dim", "input_z_dim", "filt_x_dim", "filt_y_dim", "filt_x_step",
                    "filt_y_step", "input_vectorization_order") + [("num-filters", c.num_filters)]
            + _init(c.filter_params, "param-stddev", None) + _init(c.bias_params, "bias-stddev", None)
            + _meta(c, _LEARNING))


def _composite_opts(c: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("max-rows-process", c.max_rows_process), ("num-components", len(c.parts))]
    for i, part in enumerate(c.parts, 1):
        try:
            nested = component_options(part)
        except ConfigWriteError:
            nested = component_options(part, exact=False)
        out.append((f"component{i}", " ".join([f"type={part.kaldi_type}"] + [f"{k}={v}" for k, v in nested])))
    return out


_OPTIONS: dict[str, Callable[[Any], list[tuple[str, Any]]]] = {
    "AffineComponent": _affine_opts,
    "NaturalGradientAffineComponent": _affine_opts,
    "LinearComponent": _linear_opts,
    "FixedAffineComponent": lambda c: [("input-dim", c.input_dim), ("output-dim", c.output_dim)],
    "BlockAffineComponent": _block_affine_opts,
    "RepeatedAffineComponent": _repeated_opts,
    "NaturalGradientRepeatedAffineComponent": _repeated_opts,
    "RectifiedLinearComponent": _nonlinear_opts,
    "SigmoidComponent": _nonlinear_opts,
    "TanhComponent": _nonlinear_opts,
    "SoftmaxComponent": _nonlinear_opts,
    "LogSoftmaxComponent": _nonlinear_opts,
    "PnormComponent": lambda c: [("input-dim", c.in_dim), ("output-dim", c.out_dim)],
    "NoOpComponent": lambda c: _fields(c, "dim", "backprop_scale"),
    "ElementwiseProductComponent": lambda c: [("input-dim", c.in_dim), ("output-dim", c.out_dim)],
    "SumGroupComponent": lambda c: [("sizes", c.sizes)],
    "SumBlockComponent": lambda c: [("input-dim", c.in_dim), ("output-dim", c.out_dim), ("scale", c.scale)],
    "PermuteComponent": lambda c: [("column-map", c.column_map)],
    "DropoutComponent": lambda c: _fields(c, "dim", "dropout_proportion", "dropout_per_frame", "test_mode"),
    "GeneralDropoutComponent": lambda c: _fields(c, "dim", "block_dim", "time_period", "dropout_proportion",
                                                 "continuous", "test_mode"),
    "ClipGradientComponent": lambda c: _fields(c, "dim", "clipping_threshold", "norm_based_clipping") + _meta(
        c, ("self-repair-clipped-proportion-threshold", "self-repair-target", "self-repair-scale")),
    "BackpropTruncationComponent": lambda c: _fields(c, "dim", "scale", "clipping_threshold", "zeroing_threshold",
                                                     "zeroing_interval", "recurrence_interval"),
    "NormalizeComponent": lambda c: [("dim", c.in_dim)] + _fields(c, "block_dim", "target_rms", "add_log_stddev"),
    "BatchNormComponent": lambda c: _fields(c, "dim", "block_dim", "epsilon", "target_rms", "test_mode"),
    "LstmNonlinearityComponent": _lstm_opts,
    "GruNonlinearityComponent": _gru_opts,
    "OutputGruNonlinearityComponent": _output_gru_opts,
    "ScaleAndOffsetComponent": lambda c: [("dim", c.dim), ("block-dim", _shape(c.scales)[0])] + _meta(
        c, _LEARNING + ("use-natural-gradient", "rank")),
    "PerElementScaleComponent": _per_element_scale_opts,
    "NaturalGradientPerElementScaleComponent": _per_element_scale_opts,
    "PerElementOffsetComponent": lambda c: ([("dim", c.dim), ("block-dim", _shape(c.offsets)[0])]
                                            + _init(c.offsets, "param-stddev", "param-mean")
                                            + _meta(c, _LEARNING + ("use-natural-gradient",))),
    "FixedScaleComponent": _fixed_scale_opts,
    "FixedBiasComponent": lambda c: [("dim", c.input_dim)],
    "ConstantFunctionComponent": lambda c: ([("input-dim", c.in_dim), ("output-dim", c.output_dim),
                                             ("is-updatable", c.is_updatable)]
                                            + _init(c.output, "output-stddev", "output-mean")
                                            + _meta(c, _LEARNING + ("use-natural-gradient",))),
    "TdnnComponent": _tdnn_opts,
    "StatisticsExtractionComponent": lambda c: [("input-dim", c.in_dim)] + _fields(
        c, "input_period", "output_period", "include_variance"),
    "StatisticsPoolingComponent": lambda c: [("input-dim", c.in_dim)] + _fields(
        c, "input_period", "left_context", "right_context", "num_log_count_features", "output_stddevs",
        "variance_floor"),
    "TimeHeightConvolutionComponent": _time_height_opts,
    "ConvolutionComponent": _convolution_opts,
    "MaxpoolingComponent": lambda c: _fields(c, *(f"input_{a}_dim" for a in "xyz"), *(f"pool_{a}_size" for a in "xyz"),
                                             *(f"pool_{a}_step" for a in "xyz")),
    "RestrictedAttentionComponent": lambda c: _fields(
        c, "num_heads", "key_dim", "value_dim", "num_left_inputs", "num_right_inputs", "time_stride",
        "num_left_inputs_required", "num_right_inputs_required", "output_context", "key_scale"),
    "DistributeComponent": lambda c: [("input-dim", c.in_dim), ("output-dim", c.out_dim)],
    "CompositeComponent": _composite_opts,
    "SpecAugmentTimeMaskComponent": lambda c: _fields(c, "dim", "zeroed_proportion", "time_mask_max_frames"),
}


def _text(value: Any) -> str:
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
        return ",".join(_text(v) for v in value)
    return str(value)


def _stripped(component: Component) -> Component:
    return attrs.evolve(component, input=_PLACEHOLDER)


def _rebuild(component: Component, options: Sequence[tuple[str, str]]) -> Component | None:
    try:
        return COMPONENTS[component.kaldi_type](component.name, dict(options), _PLACEHOLDER)
    except (SymnetError, TypeError, ValueError):
        return None


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
    maker = _OPTIONS.get(kind)
    if maker is None or COMPONENTS.get(kind) is None:
        what = kind or type(component).__name__
        raise ConfigWriteError(f"component {component.name!r}: no config options known for type {what}")
    try:
        options = [(key, _text(value)) for key, value in maker(component)]
    except (TypeError, AttributeError, IndexError) as e:
        raise ConfigWriteError(f"component {component.name!r} ({kind}): cannot recover its options: {e}") from None
    target = _stripped(component)
    rebuilt = _rebuild(component, options)
    if rebuilt is None or rebuilt != target:
        if exact or rebuilt is None or not _same_params(rebuilt, target):
            text = " ".join(f"{k}={v}" for k, v in options)
            raise ConfigWriteError(
                f"component {component.name!r} ({kind}) cannot be written as a config line: the options "
                f"'{text}' build a different component (parameters read from files, renamed Weights or "
                f"initialisers Kaldi's config cannot express)")
        return options
    # Leave out what the defaults give anyway, last options first.
    for i in range(len(options) - 1, -1, -1):
        trial = options[:i] + options[i + 1 :]
        again = _rebuild(component, trial)
        if again is not None and again == target:
            options = trial
    return options


# ----- writing ----------------------------------------------------------------------------------


def _descriptor_text(layer: Layer, what: str) -> str:
    try:
        return write_descriptor(layer)
    except DescriptorError as e:
        raise ConfigWriteError(f"{what}: {e}") from None


def network_config_lines(
    network: Network | KaldiNetwork, objectives: Mapping[str, str] | None = None, *, exact: bool = True
) -> list[ConfigLine]:
    """The config lines of a Network: input-nodes, component and node lines (operands first), output-nodes.

    Every component must be the operand of a `Node` (the component-node);
    a Node's operand must be a component or a `DimRange` of a node or input.
    `objectives` (output name -> 'linear' | 'quadratic') defaults to the
    KaldiNetwork's, else linear. `exact=False` writes components whose
    parameters came from files with the options of their shapes (see
    `component_options`). ConfigWriteError for what a config cannot say.
    """
    net, objectives = _unwrap(network, objectives)
    roots = [layer for _, layer in net.structure.outputs]
    inputs: dict[str, Input] = {}
    nodes: dict[str, Node] = {}
    under_node: set[int] = set()
    for layer in walk(roots):
        if isinstance(layer, Node):
            under_node.add(id(layer.arg))
        elif isinstance(layer, CompositeComponent):  # its parts are written inside its own line
            under_node.update(id(part) for part in layer.parts)
    for layer in walk(roots):
        if isinstance(layer, Identity):
            raise ConfigWriteError(
                "the network reads Identity() (x); a Kaldi config needs named inputs: Input(name, dim)")
        if isinstance(layer, Input):
            other = inputs.setdefault(layer.name, layer)
            if other.dim != layer.dim:
                raise ConfigWriteError(f"input {layer.name!r} is declared with dims {other.dim} and {layer.dim}")
        elif isinstance(layer, Component) and id(layer) not in under_node:
            raise ConfigWriteError(
                f"component {layer.name!r} ({layer.kaldi_type}) is not the operand of a Node; a Kaldi config "
                f"needs a component-node for it: Node(name, component)")
        elif isinstance(layer, Node):
            other = nodes.setdefault(layer.name, layer)
            if other is not layer and other != layer:
                raise ConfigWriteError(f"two different nodes are named {layer.name!r}")
    clash = sorted(set(inputs) & set(nodes))
    if clash:
        raise ConfigWriteError(f"{clash[0]!r} names both an input and a node")
    lines: list[ConfigLine] = [InputNode(name=name, dim=layer.dim) for name, layer in inputs.items()]
    components: dict[str, Component] = {}
    for name in _write_order(nodes):
        lines += _node_lines(nodes[name], components, exact)
    names = {line.name for line in lines if not isinstance(line, ComponentLine)}
    for name, layer in net.structure.outputs:
        if name in names:
            raise ConfigWriteError(f"output {name!r} has the name of a node; Kaldi's node names are one namespace")
        objective = objectives.get(name, "linear")
        _descriptor_text(layer, f"output {name!r}")
        try:
            lines.append(OutputNode(name=name, descriptor=_by_name(layer), objective=objective))
        except (ConfigError, DescriptorError, ValueError) as e:
            raise ConfigWriteError(f"output {name!r}: {e}") from None
    return lines


def _by_name(descriptor: Layer) -> Layer:
    """The descriptor with its nodes and inputs as `Ref(name)`, as a config line holds it."""
    return _substitute(descriptor, lambda name: Ref(name, where=None))


def _strong_refs(layer: Layer, shifted: bool = False) -> Iterable[tuple[str, bool]]:
    """(name, whether read at another frame) for every node-name leaf of a descriptor."""
    if isinstance(layer, (Node, Ref, Input)):
        yield layer.name, shifted
        return
    if isinstance(layer, Offset):
        shifted = shifted or layer.t_offset != 0
    elif isinstance(layer, Round):
        shifted = shifted or layer.t_modulus > 1
    elif isinstance(layer, ReplaceIndex):
        shifted = shifted or layer.variable == "t"
    for child in layer.children:
        yield from _strong_refs(child, shifted)


def _write_order(nodes: Mapping[str, Node]) -> list[str]:
    """The nodes in an order where each comes after the nodes it reads at the same frame.

    Among the nodes that can come next, the first in `nodes` (operands-first
    order of the tree) does, so plain feed-forward nets keep their order and
    recurrences are written as Kaldi's xconfig writes them.
    """
    rank = {name: i for i, name in enumerate(nodes)}
    deps: dict[str, set[str]] = {}
    for name, node in nodes.items():
        arg = node.arg
        source = arg.input if isinstance(arg, Component) and hasattr(arg, "input") else arg
        if isinstance(arg, DimRange):
            source = arg.arg
        deps[name] = {ref for ref, shifted in _strong_refs(source) if not shifted and ref in nodes and ref != name}
    users: dict[str, list[str]] = {name: [] for name in nodes}
    for name, used in deps.items():
        for ref in used:
            users[ref].append(name)
    waiting = {name: len(used) for name, used in deps.items()}
    ready = [rank[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    names = list(nodes)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for user in users[name]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, rank[user])
    if len(order) < len(names):  # a cycle at one frame (the engine rejects it): keep the tree order
        placed = set(order)
        order += [name for name in names if name not in placed]
    return order


def _node_lines(node: Node, components: dict[str, Component], exact: bool) -> list[ConfigLine]:
    arg = node.arg
    what = f"node {node.name!r}"
    if isinstance(arg, Component) and hasattr(arg, "input"):
        out: list[ConfigLine] = []
        stripped = _stripped(arg)
        known = components.get(arg.name)
        if known is None:
            components[arg.name] = stripped
            options = component_options(arg, exact=exact)
            out.append(ComponentLine(name=arg.name, type=arg.kaldi_type, options=options))
        elif known != stripped:
            raise ConfigWriteError(f"{what}: two different components are named {arg.name!r}")
        _descriptor_text(arg.input, what)
        try:
            out.append(ComponentNode(name=node.name, component=arg.name, descriptor=_by_name(arg.input)))
        except (ConfigError, DescriptorError) as e:
            raise ConfigWriteError(f"{what}: {e}") from None
        return out
    if isinstance(arg, DimRange) and isinstance(arg.arg, (Node, Input, Ref)):
        return [DimRangeNode(name=node.name, input_node=arg.arg.name, dim_offset=arg.offset, dim=arg.dim)]
    raise ConfigWriteError(
        f"{what}: a Kaldi config node is a component or a DimRange of a node, not {type(arg).__name__}")


def write_network(network: Network | KaldiNetwork, objectives: Mapping[str, str] | None = None) -> str:
    """The config text of a Network (see `network_config_lines`)."""
    return write_config(network_config_lines(network, objectives))


# ----- symnet's model file ------------------------------------------------------------------------

#: The `format` field of a model file's header.
MODEL_FORMAT = "symnet-model"
#: The version of the model file format this code writes (and the newest it reads).
MODEL_VERSION = 1

_HEADER = "symnet.header"
_CONFIG = "symnet.config"
_PARAM = "params/"


def save_model(path: str | os.PathLike[str], network: Network | KaldiNetwork,
               objectives: Mapping[str, str] | None = None) -> None:
    """Write symnet's model file: a NumPy `.npz` archive (a zip of `.npy` arrays), never a pickle.

    Entries:

    - `symnet.header`: a 0-d string array holding JSON:
      `{"format": "symnet-model", "version": 1, "symnet_version": ...,
      "parameters": {name: {"shape": [...], "dtype": "float32"}}, "objectives": {output: objective}}`;
    - `symnet.config`: a 0-d string array, the network as a Kaldi config (`write_network`);
    - `params/NAME`: one array per parameter, named as in `network.params`.

    Loading (`load_model`) reads it with `allow_pickle=False`, rebuilds the
    network from the config and checks every parameter against the header
    and the network. The file is written atomically: to a temporary file in
    the same directory, flushed, then renamed onto `path`, so `path` is
    either the old file or the complete new one, never half written.
    """
    net, objectives = _unwrap(network, objectives)
    config = write_config(network_config_lines(net, objectives, exact=False))
    params = {name: np.asarray(value) for name, value in net.params.items()}
    header = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "symnet_version": __version__,
        "parameters": {name: {"shape": list(v.shape), "dtype": v.dtype.str} for name, v in params.items()},
        "objectives": {name: objectives.get(name, "linear") for name, _ in net.structure.outputs},
    }
    arrays = {_HEADER: np.array(json.dumps(header, sort_keys=True)), _CONFIG: np.array(config)}
    arrays.update({_PARAM + name: value for name, value in params.items()})
    with atomic_open(path) as f:
        np.savez(f, **arrays)


def _string_entry(data: Any, key: str, path: str) -> str:
    if key not in data.files:
        raise ModelFormatError(f"{path}: not a symnet model file (no {key!r} entry)")
    value = data[key]
    if value.shape != () or value.dtype.kind != "U":
        raise ModelFormatError(f"{path}: entry {key!r} is not a string (dtype {value.dtype}, shape {value.shape})")
    return str(value)


def load_model(path: str | os.PathLike[str], *, read_matrix: Callable[[str], np.ndarray] | None = None) -> KaldiNetwork:
    """Read a model file written by `save_model` (no pickle); ModelFormatError if it is not one, or is damaged."""
    path = os.fspath(path)
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ModelFormatError(f"{path}: not a symnet model file ({e})") from None
    if not hasattr(data, "files"):
        raise ModelFormatError(f"{path}: not a symnet model file (a single array, not an archive)")
    with data:
        try:
            header = json.loads(_string_entry(data, _HEADER, path))
        except json.JSONDecodeError as e:
            raise ModelFormatError(f"{path}: damaged header: {e}") from None
        if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
            raise ModelFormatError(f"{path}: not a symnet model file (header format {header.get('format')!r})"
                                   if isinstance(header, dict) else f"{path}: damaged header")
        version = header.get("version")
        if not isinstance(version, int) or version < 1 or version > MODEL_VERSION:
            raise ModelFormatError(f"{path}: model format version {version!r}; this symnet reads versions 1 to "
                                   f"{MODEL_VERSION}")
        config = _string_entry(data, _CONFIG, path)
        declared = header.get("parameters")
        if not isinstance(declared, dict):
            raise ModelFormatError(f"{path}: damaged header: no parameter list")
        stored = {key[len(_PARAM):] for key in data.files if key.startswith(_PARAM)}
        if stored != set(declared):
            missing, extra = sorted(set(declared) - stored), sorted(stored - set(declared))
            raise ModelFormatError(
                f"{path}: parameters do not match the header (missing {missing}, unexpected {extra})")
        params = {}
        for name, info in declared.items():
            try:
                value = data[_PARAM + name]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
                raise ModelFormatError(f"{path}: parameter {name!r} cannot be read: {e}") from None
            if list(value.shape) != list(info.get("shape", [])) or value.dtype.str != info.get("dtype"):
                raise ModelFormatError(
                    f"{path}: parameter {name!r} has shape {list(value.shape)} and dtype {value.dtype.str}, "
                    f"the header says {info.get('shape')} and {info.get('dtype')}")
            params[name] = jnp.asarray(value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = parse_network(config, file=f"{path}[config]", read_matrix=read_matrix)
    except ConfigError as e:
        raise ModelFormatError(f"{path}: the stored config does not build: {e}") from None
    try:
        network = built.network.replace(params=params)
    except ParameterError as e:
        raise ModelFormatError(f"{path}: {e}") from None
    objectives = header.get("objectives") or {}
    return KaldiNetwork(network, {name: objectives.get(name, built.objectives.get(name, "linear"))
                                  for name in built.objectives})
