"""Networks from Kaldi nnet3 configs: `build_network`, `parse_network`, `read_network`.

Reading (`read_network`, `parse_network`, `build_network`) turns config lines
into a `symnet.Network` whose `objectives` are the output-nodes'.

- `input-node name=input dim=12` is `Input('input', 12)`.
- `component` + `component-node` is `Node(node, Component(input))`: the
  component (built by its type's record in `symnet._src.kaldi.components`, with
  Kaldi's options, defaults and initialisation) whose input is the node's
  descriptor, its node names replaced by the layers they name (the `Input`, or the `Node` of a component-
  or dim-range-node). A component used by several component-nodes is built
  once: every use holds the same Weights (`{component}.{param}`), so they are
  one shared parameter.
- `dim-range-node` is `Node(name, DimRange(source, dim_offset, dim))`.
- `output-node name=output input=... objective=...` is the Network output
  `output`; its objective is in `Network.objectives`.

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
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...base.errors import ArgumentTypeError, ComponentConfigError, ConfigError, ParameterError, SymnetError
from ...components.base import Component
from ...core.descriptor import DimRange, Input, Node, Ref, node_name
from ...core.layer import Layer, Weight, evolve
from ...core.params import check_sizes
from ...core.structure import Structure
from ...core.walk import walk
from ..components import PLACEHOLDER_INPUT, lookup, records
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
)
from .network import descriptor_dim, network_config_lines, strong_refs, substitute_nodes

if TYPE_CHECKING:
    from ...network import Network

__all__ = ["build_network", "config_structure", "parse_network", "read_network", "read_structure", "sized_structure"]


def _where(line: ConfigLine, key: str | None = None) -> str | None:
    source = line.source
    if source is None:
        return None
    column = (source.value_column(key) if key else None) or source.kind_column
    return f"{source.file}:{source.line}:{column}"


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
    record = lookup(line.type)
    if record is None:
        close = difflib.get_close_matches(line.type, sorted(records()), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise line.error(f"unknown component type {line.type}{hint}", "type")
    try:
        component = record.build(line.name, dict(line.options), PLACEHOLDER_INPUT, read_matrix=read_matrix)
    except ComponentConfigError as e:
        raise _component_error(line, e) from None
    except ConfigError:
        raise
    except SymnetError as e:
        raise _component_error(line, e) from None
    return evolve(component, where=_where(line))


def _leaf_names(layer: Layer) -> list[str]:
    """The node names a descriptor refers to, in order of appearance, each once."""
    names: dict[str, None] = {}
    stack = [layer]
    while stack:
        item = stack.pop()
        if (name := node_name(item)) is not None:
            names.setdefault(name)
        else:
            stack.extend(reversed(item.children))
    return list(names)


def _visit_order(roots: Sequence[str], deps: Mapping[str, Sequence[str]]) -> tuple[list[str], set[tuple[str, str]]]:
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


def _check_instant_cycles(node_lines: Mapping[str, ConfigLine], components: Mapping[str, Layer]) -> None:
    """ConfigError for nodes that depend on themselves at the same frame (no time offset on the cycle).

    A component that reads no input (ConstantComponent, `input=<itself>`) adds no dependency."""
    deps: dict[str, list[str]] = {}
    for name, line in node_lines.items():
        if isinstance(line, ComponentNode):
            reads = getattr(components[line.component], "reads_input", True)
            refs = strong_refs(line.descriptor) if reads else []
            deps[name] = list(dict.fromkeys(ref for ref, shifted in refs if not shifted))
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
                cycle = path[path.index(nxt) :] + [nxt]
                line = node_lines[cycle[0]]
                raise line.error(
                    f"nodes {' -> '.join(cycle)} depend on each other at the same frame (a cycle "
                    "with no time offset on it cannot be computed)",
                    "input" if isinstance(line, ComponentNode) else "input-node",
                )
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(deps[nxt]))


def _config_outputs(
    lines: list[ConfigLine], read_matrix: Callable[[str], np.ndarray] | None
) -> tuple[dict[str, Layer], dict[str, str]]:
    """The output layers and objectives of config lines, checked (see the module doc); nothing is drawn."""
    check_config(lines)

    component_lines = {line.name: line for line in lines if isinstance(line, ComponentLine)}
    node_lines: dict[str, InputNode | ComponentNode | DimRangeNode] = {
        line.name: line for line in lines if isinstance(line, (InputNode, ComponentNode, DimRangeNode))
    }
    output_lines = [line for line in lines if isinstance(line, OutputNode)]
    components = {name: _build_component(line, read_matrix) for name, line in component_lines.items()}

    # The dim of every node, then the dims of every descriptor, checked.
    dims: dict[str, int] = {}
    line: ConfigLine  # each loop below narrows it to the lines it walks
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
                    f"{source_dim} of node {line.input_node}",
                    "dim-offset",
                )
        elif isinstance(line, ComponentNode):
            component = components[line.component]
            got = descriptor_dim(line.descriptor, dims, line)
            if got != component.input_dim:
                raise line.error(
                    f"component-node {line.name}: its input has dim {got}, but component {line.component} "
                    f"({component_lines[line.component].type}) has input-dim {component.input_dim}",
                    "input",
                )
    for line in output_lines:
        descriptor_dim(line.descriptor, dims, line)

    _check_instant_cycles(node_lines, components)

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
            warnings.warn(
                f"{where + ': ' if where else ''}component {line.name} is not used by any "
                "component-node; it is left out of the network",
                stacklevel=3,
            )
        elif not isinstance(line, (ComponentLine, OutputNode)) and line.name not in visited:
            warnings.warn(
                f"{where + ': ' if where else ''}{line.kind} {line.name} is not used by any output; "
                "it is left out of the network",
                stacklevel=3,
            )

    built: dict[str, Layer] = {}
    for name in order:
        line = node_lines[name]

        def resolve(target: str, user: str = name) -> Layer:
            return Ref(target, where=_where(node_lines[user], "input")) if (user, target) in back else built[target]

        if isinstance(line, InputNode):
            built[name] = Input(name, line.dim, where=_where(line))
        elif isinstance(line, ComponentNode):
            component = evolve(components[line.component], input=substitute_nodes(line.descriptor, resolve))
            built[name] = Node(name, component, where=_where(line))
        else:
            source = resolve(line.input_node)
            built[name] = Node(
                name, DimRange(source, line.dim_offset, line.dim, where=_where(line, "input-node")), where=_where(line)
            )
    outputs = {line.name: substitute_nodes(line.descriptor, built.__getitem__) for line in output_lines}
    objectives = {line.name: line.objective for line in output_lines}

    return outputs, objectives


def build_network(
    lines: Iterable[ConfigLine],
    *,
    seed: int = 0,
    base: Network | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
    values: Mapping[str, Any] | None = None,
) -> Network:
    """The Network of parsed config lines, with the output-nodes' objectives (see the module doc).

    `seed` seeds the parameters' initialisation (Kaldi's initialisation of
    each component, drawn with a key derived from the seed and the
    parameter's name). With `base`, `lines` add to or override that network
    (Kaldi's rules, `merge_config`): redefined components start afresh,
    every other parameter keeps its value in `base`. `read_matrix` reads the
    files named by `matrix=`/`vector=` options (default: Kaldi text or binary, or .npy).
    `values` gives arrays for parameters by name (`{component}.{param}`, as a
    model file stores them): those of the network's Weights are used as they
    are, never drawn (values of components no output uses are left out).
    """
    from ...network import Network  # here: `read_structure` (`symnet info`) imports no jax

    lines = list(lines)
    base_net = None
    redefined = {line.name for line in lines if isinstance(line, ComponentLine)}
    if base is not None:
        if not isinstance(base, Network):
            raise ArgumentTypeError(f"base must be a Network, not a {type(base).__name__}")
        base_net = base
        lines = merge_config(network_config_lines(base, exact=False), lines)
    outputs, objectives = _config_outputs(lines, read_matrix)
    if values is not None:
        names = {layer.name for layer in walk(list(outputs.values())) if isinstance(layer, Weight)}
        values = {name: value for name, value in values.items() if name in names}
    try:
        network = Network(outputs, seed=seed, values=values, objectives=objectives)
    except ParameterError as e:  # e.g. a Weight name used by two different components
        raise ConfigError(str(e), file=_config_file(lines)) from None
    if base_net is not None:
        network = _keep_base_params(network, base_net, redefined)
    return network


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
    values = network.values
    kept = {
        name: value
        for name, value in base.values.items()
        if name in values and owner.get(name) not in redefined and tuple(value.shape) == tuple(values[name].shape)
    }
    return network.assign(kept)


def parse_network(
    text: str,
    *,
    file: str = "<config>",
    seed: int = 0,
    base: Network | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> Network:
    """The Network of a config text (errors name `file`)."""
    return build_network(parse_config(text, file=file), seed=seed, base=base, read_matrix=read_matrix)


def read_network(
    source: str | os.PathLike[str] | Any,
    *,
    seed: int = 0,
    base: Network | None = None,
    file: str | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> Network:
    """The Network of a config file, given as a path or an open text file."""
    return build_network(read_config(source, file=file), seed=seed, base=base, read_matrix=read_matrix)


def read_structure(
    source: str | os.PathLike[str] | Any,
    *,
    file: str | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> tuple[Structure, dict[str, str]]:
    """The structure and output objectives of a config file, checked as `read_network` checks it.

    No parameter is drawn: what needs only the Weights' shapes (`symnet info`) reads this.
    """
    return sized_structure(read_config(source, file=file), read_matrix=read_matrix)


def sized_structure(
    lines: Iterable[ConfigLine], *, read_matrix: Callable[[str], np.ndarray] | None = None
) -> tuple[Structure, dict[str, str]]:
    """`config_structure`, with the parameters' sizes checked as drawing them would check them."""
    lines = list(lines)
    structure, objectives = config_structure(lines, read_matrix=read_matrix)
    try:
        check_sizes(dict(zip(structure.names, structure.weights, strict=True)))
    except ParameterError as e:
        raise ConfigError(str(e), file=_config_file(lines)) from None
    return structure, objectives


def config_structure(
    lines: Iterable[ConfigLine], *, read_matrix: Callable[[str], np.ndarray] | None = None
) -> tuple[Structure, dict[str, str]]:
    """The structure and output objectives of parsed config lines, checked as `build_network` checks them
    (but for the size of the parameters, which nothing here allocates)."""
    lines = list(lines)
    outputs, objectives = _config_outputs(lines, read_matrix)
    try:
        return Structure.of(outputs), objectives
    except ParameterError as e:  # as build_network's
        raise ConfigError(str(e), file=_config_file(lines)) from None
