"""Kaldi networks as configs: writing a Network's config lines, and the descriptor helpers of reading one.

Reading a config (`symnet._src.kaldi.text.build`) gives an ordinary `symnet.Network`
whose `objectives` are the output-nodes' `objective=`. `KaldiNetwork` is a
deprecated alias kept for one release (`KaldiNetwork(net, objectives)` is
`net.replace(objectives=objectives)`; it warns).

Writing (`network_config_lines`, `write_network`) prints a Network as config
lines: an `input-node` per Input, a `component` line per component (its
options recovered from its fields, metadata and initialisers, see
`symnet._src.kaldi.components.component_options`), a `component-node` per Node of
a component, a `dim-range-node` per Node of a `DimRange`, an `output-node` per
output. Reading what was written gives an equal Network (`==` on
`net.structure`). What a config cannot say is a `ConfigWriteError`.

The node-graph helpers that reading and writing share: `descriptor_dim` (the
dim of a descriptor, checked as Kaldi checks it), `substitute_nodes`,
`by_name` (a descriptor as a config line holds it) and `write_order` (the
order Kaldi writes nodes in).
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...base.errors import ArgumentTypeError, ConfigError, ConfigWriteError, DescriptorError
from ...components.base import Component
from ...components.structure import CompositeComponent
from ...core.descriptor import Combine, Descriptor, Input, Node, Ref, node_name
from ...core.layer import Identity, Layer, evolve
from ...core.structure import Structure
from ...core.walk import walk
from ...layers.kaldi import kaldi_forms
from ..components import PLACEHOLDER_INPUT, component_options
from .config import ComponentLine, ComponentNode, ConfigLine, DimRangeNode, InputNode, OutputNode, write_config
from .descriptor_text import write_descriptor

if TYPE_CHECKING:
    from ...network import Network

__all__ = [
    "KaldiNetwork",
    "by_name",
    "descriptor_dim",
    "network_config_lines",
    "strong_refs",
    "structure_config_lines",
    "substitute_nodes",
    "write_network",
    "write_order",
]


# ----- the deprecated wrapper ------------------------------------------------------------------


def _deprecated() -> None:
    warnings.warn(
        "KaldiNetwork is deprecated: a symnet.Network carries its objectives (net.objectives); "
        "use Network directly. This alias will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,
    )


class _KaldiNetworkAlias(type):
    """`KaldiNetwork(net, objectives)` gives `net` with those objectives; `isinstance(x, KaldiNetwork)` is
    `isinstance(x, Network)`. Both warn (DeprecationWarning)."""

    def __instancecheck__(cls, instance: Any) -> bool:
        from ...network import Network  # here: describing a config (`symnet info`) imports no jax

        _deprecated()
        return isinstance(instance, Network)

    def __call__(cls, network: Network, objectives: Mapping[str, str] | None = None) -> Network:
        from ...network import Network

        _deprecated()
        if not isinstance(network, Network):
            raise ArgumentTypeError(
                f"KaldiNetwork(network, objectives): expected a Network, got {type(network).__name__}"
            )
        return network if objectives is None else network.replace(objectives=objectives)


class KaldiNetwork(metaclass=_KaldiNetworkAlias):
    """Deprecated alias (removed in the next release): a Network now carries its objectives."""


# ----- descriptors ----------------------------------------------------------------------------


def _column(where: str | None) -> int | None:
    """The column of a `file:line:column` location (the `where` of a parsed descriptor)."""
    if not where:
        return None
    tail = where.rsplit(":", 1)
    try:
        return int(tail[1]) if len(tail) == 2 else None
    except ValueError:
        return None


def descriptor_dim(layer: Layer, dims: Mapping[str, int], line: ConfigLine) -> int:
    """The dim of a descriptor (`dims`: node name -> dim), checking that the parts of Sum, Failover and
    Switch agree; errors are ConfigErrors pointing into `line`."""
    if (name := node_name(layer)) is not None:
        return dims[name]
    if not isinstance(layer, Descriptor):
        raise line.error(f"{type(layer).__name__} is not a Kaldi descriptor", "input")
    if layer.output_dim is not None:  # Const, DimRange
        return layer.output_dim
    if layer.kaldi_name is None:
        raise line.error(f"{type(layer).__name__} is not a Kaldi descriptor", "input")
    if layer.combine is Combine.APPEND:
        return sum(descriptor_dim(p, dims, line) for p in layer.children)
    found = [descriptor_dim(p, dims, line) for p in layer.children]
    if len(found) > 1:  # Sum, Switch, Failover: the parts must agree
        if len(set(found)) > 1:
            what = type(layer).__name__
            message = f"{what}() of parts with different dims ({', '.join(map(str, found))})"
            column = _column(layer.where)
            if (
                line.source is not None
                and column is not None
                and layer.where is not None
                and layer.where.startswith(line.source.file + ":")
            ):
                raise line.source.error(message, column)
            raise line.error(message, "input")
    return found[0]


def substitute_nodes(layer: Layer, resolve: Callable[[str], Layer]) -> Layer:
    """The descriptor with every node-name leaf replaced by `resolve(name)`."""
    if (name := node_name(layer)) is not None:
        return resolve(name)
    children = layer.children
    if not children:
        return layer
    return layer.with_children(tuple(substitute_nodes(c, resolve) for c in children))


# ----- writing ----------------------------------------------------------------------------------


def _descriptor_text(layer: Layer, what: str) -> str:
    try:
        return write_descriptor(layer)
    except DescriptorError as e:
        raise ConfigWriteError(f"{what}: {e}") from None


def network_config_lines(
    network: Network, objectives: Mapping[str, str] | None = None, *, exact: bool = True
) -> list[ConfigLine]:
    """The config lines of a Network: input-nodes, component and node lines (operands first), output-nodes.

    Every component must be the operand of a `Node` (the component-node);
    a Node's operand must be a component or a `DimRange` of a node or input.
    `objectives` (output name -> 'linear' | 'quadratic') update the
    network's own; an output with neither is linear. `exact=False` writes components whose
    parameters came from files with the options of their shapes (see
    `component_options`). ConfigWriteError for what a config cannot say.
    """
    from ...network import Network  # here: describing a config (`structure_config_lines`) imports no jax

    if not isinstance(network, Network):
        raise ArgumentTypeError(f"expected a Network, got {type(network).__name__}")
    return structure_config_lines(network.structure, {**network.objectives, **(objectives or {})}, exact=exact)


def structure_config_lines(
    structure: Structure, objectives: Mapping[str, str], *, exact: bool = True
) -> list[ConfigLine]:
    """`network_config_lines` of a network's structure and objectives: it needs no parameter arrays."""
    output_names = [name for name, _ in structure.outputs]
    written = [layer for _, layer in structure.outputs]
    # Typed layers and nonlinearities as Kaldi's components, each the operand of a node; those made here keep
    # Kaldi's default training options, so only their parameters (names, shapes, initialisers) must come back
    # from the options written.
    forms = kaldi_forms(written)
    roots = forms.roots
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
                "the network reads Identity() (x); a Kaldi config needs named inputs: Input(name, dim)"
            )
        if isinstance(layer, Input):
            other = inputs.setdefault(layer.name, layer)
            if other.dim != layer.dim:
                raise ConfigWriteError(f"input {layer.name!r} is declared with dims {other.dim} and {layer.dim}")
        elif isinstance(layer, Component) and id(layer) not in under_node:
            raise ConfigWriteError(
                f"component {layer.name!r} ({layer.kaldi_type}) is not the operand of a Node; a Kaldi config "
                f"needs a component-node for it: Node(name, component)"
            )
        elif isinstance(layer, Node):
            other_node = nodes.setdefault(layer.name, layer)
            if other_node is not layer and other_node != layer:
                raise ConfigWriteError(f"two different nodes are named {layer.name!r}")
    clash = sorted(set(inputs) & set(nodes))
    if clash:
        raise ConfigWriteError(f"{clash[0]!r} names both an input and a node")
    lines: list[ConfigLine] = [InputNode(name=name, dim=layer.dim) for name, layer in inputs.items()]
    components: dict[str, Component] = {}
    for name in write_order(nodes):
        lines += _node_lines(
            nodes[name], components, exact and getattr(nodes[name].arg, "name", None) not in forms.made
        )
    names = {line.name for line in lines if not isinstance(line, ComponentLine)}
    for name, layer in zip(output_names, roots, strict=True):
        if name in names:
            raise ConfigWriteError(f"output {name!r} has the name of a node; Kaldi's node names are one namespace")
        objective = objectives.get(name, "linear")
        _descriptor_text(layer, f"output {name!r}")
        try:
            lines.append(OutputNode(name=name, descriptor=by_name(layer), objective=objective))
        except (ConfigError, DescriptorError, ValueError) as e:
            raise ConfigWriteError(f"output {name!r}: {e}") from None
    return lines


def by_name(descriptor: Layer) -> Layer:
    """The descriptor with its nodes and inputs as `Ref(name)`, as a config line holds it."""
    return substitute_nodes(descriptor, lambda name: Ref(name, where=None))


def strong_refs(layer: Layer, shifted: bool = False) -> Iterable[tuple[str, bool]]:
    """(name, whether read at another frame) for every node-name leaf of a descriptor."""
    if (name := node_name(layer)) is not None:
        yield name, shifted
        return
    shifted = shifted or (isinstance(layer, Descriptor) and layer.shifts_time())
    for child in layer.children:
        yield from strong_refs(child, shifted)


def dim_range_node(name: str, arg: Layer) -> DimRangeNode | None:
    """The dim-range-node line of node `name` if its operand is columns of a node or input (a DimRange), else None."""
    columns = arg.column_range() if isinstance(arg, Descriptor) else None
    source = arg.children[0] if columns is not None else None
    source_name = node_name(source) if source is not None else None
    if columns is None or source_name is None:
        return None
    return DimRangeNode(name=name, input_node=source_name, dim_offset=columns[0], dim=columns[1])


def write_order(nodes: Mapping[str, Node]) -> list[str]:
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
        if isinstance(arg, Descriptor) and arg.column_range() is not None:  # a dim-range-node
            source = arg.children[0]
        deps[name] = {ref for ref, shifted in strong_refs(source) if not shifted and ref in nodes and ref != name}
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
        stripped = evolve(arg, input=PLACEHOLDER_INPUT)
        known = components.get(arg.name)
        if known is None:
            components[arg.name] = stripped
            options = component_options(arg, exact=exact)
            out.append(ComponentLine(name=arg.name, type=arg.kaldi_type, options=options))
        elif known != stripped:
            raise ConfigWriteError(f"{what}: two different components are named {arg.name!r}")
        _descriptor_text(arg.input, what)
        try:
            out.append(ComponentNode(name=node.name, component=arg.name, descriptor=by_name(arg.input)))
        except (ConfigError, DescriptorError) as e:
            raise ConfigWriteError(f"{what}: {e}") from None
        return out
    dim_range = dim_range_node(node.name, arg)
    if dim_range is not None:
        return [dim_range]
    raise ConfigWriteError(
        f"{what}: a Kaldi config node is a component or a DimRange of a node, not {type(arg).__name__}"
    )


def write_network(network: Network, objectives: Mapping[str, str] | None = None) -> str:
    """The config text of a Network (see `network_config_lines`)."""
    return write_config(network_config_lines(network, objectives))
