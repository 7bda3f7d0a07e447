"""Network: an expression (one or more named outputs) plus its parameters, as a JAX pytree.

The static part is the canonical expression, in which every Weight carries its
final name; the leaves are the parameter arrays, ordered by name. So `jax.jit`,
`jax.grad`, `jax.vmap` and `optax.apply_updates` take a Network as it is, and
two networks built the same way have equal structure (and share compiled code).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Mapping

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from .errors import GraphError, LayerTypeError, ParameterError, at
from .frozen import FrozenArray
from .descriptor import Node
from .layer import Identity, Layer, Literal, Weight, as_layer
from .tape import Tape

DEFAULT_OUTPUT = "output"


@attrs.frozen(cache_hash=True)
class Structure:
    """The static half of a Network: canonical outputs and the parameter names in leaf order."""

    outputs: tuple[tuple[str, Layer], ...]
    weights: tuple[Weight, ...]  # one per parameter, in name order

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.weights)


def _walk(roots: list[Layer]) -> list[Layer]:
    """Every layer reachable from `roots`, operands first, each once (by identity)."""
    order: list[Layer] = []
    seen: set[int] = set()
    stack: list[tuple[Layer, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        layer, expanded = stack.pop()
        if expanded:
            order.append(layer)
            continue
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        stack.append((layer, True))
        for c in reversed(layer.children):
            if id(c) not in seen:
                stack.append((c, False))
    return order


def _paths(roots: list[tuple[str, Layer]]) -> dict[int, str]:
    """The first path (depth-first, field order) to every layer, keyed by identity.

    Paths are field names joined by dots (`lhs.rhs`); below a `Node` they start
    from the node's name (`affine1.rhs`).
    """
    paths: dict[int, str] = {}
    stack = [(prefix, layer) for prefix, layer in reversed(roots)]
    while stack:
        path, layer = stack.pop()
        if id(layer) in paths:
            continue
        paths[id(layer)] = path
        for name, c in reversed(list(layer.named_children())):
            if id(c) not in paths:
                # Inside a named node, paths start again from the node's name.
                sub = layer.name if isinstance(layer, Node) else f"{path}.{name}" if path else name
                stack.append((sub, c))
    return paths


def canonicalize(outputs: Mapping[str, Layer]) -> tuple[dict[str, Layer], dict[str, Weight]]:
    """Give every Weight its final name; check that equally named Weights agree.

    Unnamed weights are named by their first path from the outputs (`lhs.rhs`),
    prefixed by the output name when there are several outputs: deterministic
    from the structure alone.
    """
    roots = [(name if len(outputs) > 1 else "", layer) for name, layer in outputs.items()]
    order = _walk([layer for _, layer in roots])
    paths = _paths(roots)
    explicit: dict[str, Weight] = {}
    for layer in order:
        if isinstance(layer, Weight) and layer.name is not None:
            other = explicit.setdefault(layer.name, layer)
            if other.init != layer.init:
                raise ParameterError(
                    f"two Weights named {layer.name!r} with different initialisers: "
                    f"{other.init!r} (built at {other.where}) and {layer.init!r} (built at {layer.where})"
                )
    weights: dict[str, Weight] = {}
    rewritten: dict[int, Layer] = {}
    for layer in order:
        if isinstance(layer, Weight):
            if layer.name is None:
                name = paths[id(layer)] or "weight"
                base, k = name, 1
                while name in explicit or (name in weights and weights[name] is not layer):
                    name, k = f"{base}_{k}", k + 1
                new = attrs.evolve(layer, name=name, token=None)
            else:
                new = explicit[layer.name]
                new = attrs.evolve(new, token=None) if new.token is not None else new
            weights.setdefault(new.name, new)
            rewritten[id(layer)] = weights[new.name]
        else:
            rewritten[id(layer)] = layer.with_children(tuple(rewritten[id(c)] for c in layer.children))
    return {name: rewritten[id(layer)] for name, layer in outputs.items()}, dict(sorted(weights.items()))


def parameter_key(seed: int, name: str) -> jax.Array:
    """The random key of the parameter `name`: derived from the seed and the name, not from any counter."""
    return jax.random.PRNGKey(zlib.crc32(f"{seed}:{name}".encode()))


def initial_values(weights: Mapping[str, Weight], seed: int) -> dict[str, jax.Array]:
    """Every Weight's initial array, random ones with a key derived from `seed` and the name."""
    return {name: w.initial_value(parameter_key(seed, name)) for name, w in weights.items()}


def _input_tape(value: Any) -> Tape:
    """The input as a Tape: a Tape as it is, a Literal's value, or an array (traced ones too)."""
    if isinstance(value, Tape):
        return value
    if isinstance(value, Literal):
        return Tape(value, value.array)
    if isinstance(value, Layer):
        raise GraphError(f"the input of forward must be a Tape, a Literal, a number or an array, got {value!r}")
    try:
        array = jnp.asarray(value)
    except TypeError:
        array = None
    if array is None or not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == jnp.bool_):
        raise LayerTypeError(f"cannot use {value!r} (a {type(value).__name__}) as the network's input")
    return Tape(Identity(), array)


def evaluate(
    roots: list[Layer], input: Tape | None, params: Mapping[str, jax.Array]
) -> list[Tape]:
    """Run the expression on plain arrays (no Indexes), building one Tape per layer."""
    tapes: dict[int, Tape] = {}
    for layer in _walk(roots):
        if isinstance(layer, Identity):
            if input is None:
                raise GraphError(f"the network reads its input (x) but no input was given{at(layer.where)}")
            tape = input
        elif isinstance(layer, Weight):
            tape = Tape(layer, params[layer.name], parameters=params)
        elif isinstance(layer, Literal):
            tape = Tape(layer, layer.array, parameters=params)
        elif not layer.rowwise or type(layer).apply is Layer.apply:
            raise GraphError(
                f"{type(layer).__name__} works on Indexes (n, t, x): run the network with "
                f"symnet.compile or network.compute{at(layer.where)}"
            )
        else:
            upstream = tuple(tapes[id(c)] for c in layer.children)
            layer.check(*(u.shape for u in upstream))
            tape = Tape(layer, layer.apply(*(u.value for u in upstream)), upstream, parameters=params)
        tapes[id(layer)] = tape
    return [tapes[id(r)] for r in roots]


class Network:
    """An expression with named outputs and its parameters; a JAX pytree.

    `Network(expr)` has one output named `output`; `Network({'out': e1, 'aux': e2})`
    has several. Parameters start from each Weight's initialiser, with a
    `jax.random` key derived from `seed` and the parameter's name, unless
    `params` (name -> array) is given.
    """

    __slots__ = ("structure", "params")

    structure: Structure
    params: dict[str, jax.Array]

    def __init__(
        self,
        outputs: Layer | Mapping[str, Layer],
        *,
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
    ):
        if not isinstance(outputs, Mapping):
            outputs = {DEFAULT_OUTPUT: outputs}
        if not outputs:
            raise GraphError("a Network needs at least one output")
        outputs = {str(k): as_layer(v) for k, v in outputs.items()}
        canonical, weights = canonicalize(outputs)
        structure = Structure(tuple(canonical.items()), tuple(weights.values()))
        if params is None:
            params = initial_values(weights, seed)
        else:
            params = _checked_params(weights, params)
        object.__setattr__(self, "structure", structure)
        object.__setattr__(self, "params", params)

    @classmethod
    def _from_parts(cls, structure: Structure, params: dict[str, Any]) -> Network:
        net = object.__new__(cls)
        object.__setattr__(net, "structure", structure)
        object.__setattr__(net, "params", params)
        return net

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Network is immutable; use net.replace(params=...)")

    # ----- structure ---------------------------------------------------------------

    @property
    def outputs(self) -> dict[str, Layer]:
        """Output name -> canonical expression."""
        return dict(self.structure.outputs)

    @property
    def output(self) -> Layer:
        """The expression of the only output (an error if there are several)."""
        if len(self.structure.outputs) != 1:
            raise GraphError(f"this network has outputs {list(self.outputs)}; pick one from net.outputs")
        return self.structure.outputs[0][1]

    @property
    def weights(self) -> dict[str, Weight]:
        """Parameter name -> its (canonical) Weight layer."""
        return {w.name: w for w in self.structure.weights}

    def fingerprint(self) -> str:
        """A digest of the structure (expression and parameter shapes), stable across runs.

        Checkpoints and model files store it to refuse loading into another network.
        """
        ids: dict[int, int] = {}
        lines: list[str] = []
        for layer in _walk([layer for _, layer in self.structure.outputs]):
            fields = []
            for f in attrs.fields(type(layer)):
                if f.name in ("where", "token"):
                    continue
                value = getattr(layer, f.name)
                if isinstance(value, Layer):
                    fields.append(f"#{ids[id(value)]}")
                elif isinstance(value, tuple) and value and all(isinstance(v, Layer) for v in value):
                    fields.append("(" + ",".join(f"#{ids[id(v)]}" for v in value) + ")")
                elif isinstance(value, FrozenArray):
                    fields.append(f"array{value.shape}:{hashlib.sha256(value.array.tobytes()).hexdigest()}")
                else:
                    fields.append(repr(value))
            ids[id(layer)] = len(lines)
            lines.append(f"{type(layer).__module__}.{type(layer).__name__}({', '.join(fields)})")
        lines.append(repr([name for name, _ in self.structure.outputs]))
        lines.extend(f"{n}{tuple(np.shape(self.params[n]))}" for n in self.structure.names)
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    def replace(self, *, params: Mapping[str, Any]) -> Network:
        """A network with the same structure and new parameters (checked against the Weights)."""
        return Network._from_parts(self.structure, _checked_params(self.weights, params))

    # ----- running -----------------------------------------------------------------

    def forward(self, input: Any = None, params: Mapping[str, Any] | None = None) -> Tape | dict[str, Tape]:
        """Run on `input` and return the output's Tape (a dict of Tapes for several outputs)."""
        params = self.params if params is None else _checked_params(self.weights, params)
        input_tape = None if input is None else _input_tape(input)
        names = [name for name, _ in self.structure.outputs]
        tapes = evaluate([layer for _, layer in self.structure.outputs], input_tape, params)
        return tapes[0] if len(names) == 1 else dict(zip(names, tapes))

    def __call__(self, input: Any = None) -> jax.Array | dict[str, jax.Array]:
        """The output value(s) for `input`."""
        result = self.forward(input)
        if isinstance(result, Tape):
            return result.value
        return {name: tape.value for name, tape in result.items()}

    def context(self, output: str | None = None) -> tuple[int, int]:
        """(left, right) frames of input context an output frame needs (nnet3-info's context)."""
        from .engine.dense import context

        return context(self, output)

    def compute(self, x: Any, *, mode: str = "same", output: str | None = None,
                frames_per_chunk: int | None = None) -> Any:
        """Outputs for every frame of `[N, T, D]` input or a list of `[T_i, D]` sequences.

        See `symnet.engine.dense.compute`: `mode='same'` repeats edge frames as
        nnet3-compute does; `mode='valid'` returns only frames that need no padding;
        `frames_per_chunk` runs in chunks, carrying recurrent state across them.
        """
        from .engine.dense import compute

        return compute(self, x, mode=mode, output=output, frames_per_chunk=frames_per_chunk)

    def __repr__(self) -> str:
        outs = ", ".join(f"{name!r}: {layer!r}" for name, layer in self.structure.outputs)
        shapes = ", ".join(f"{n}{tuple(np.shape(v))}" for n, v in self.params.items())
        return f"Network({{{outs}}}, params=[{shapes}])"

    def _repr_html_(self) -> str:
        """Nodes, dims, parameters, context and a picture, for notebooks (see `symnet.display`)."""
        from .display import network_html

        return network_html(self)

    # ----- pytree ------------------------------------------------------------------

    def _tree_flatten_with_keys(self):
        children = tuple((jax.tree_util.DictKey(n), self.params[n]) for n in self.structure.names)
        return children, self.structure

    def _tree_flatten(self):
        return tuple(self.params[n] for n in self.structure.names), self.structure

    @classmethod
    def _tree_unflatten(cls, structure: Structure, leaves: Any) -> Network:
        return cls._from_parts(structure, dict(zip(structure.names, leaves)))


jax.tree_util.register_pytree_with_keys(
    Network,
    Network._tree_flatten_with_keys,
    Network._tree_unflatten,
    Network._tree_flatten,
)


def _checked_params(weights: Mapping[str, Weight], params: Mapping[str, Any]) -> dict[str, jax.Array]:
    """Parameters as arrays, after checking names and shapes against the Weights."""
    if isinstance(params, Network):
        params = params.params
    missing = [n for n in weights if n not in params]
    if missing:
        w = weights[missing[0]]
        raise ParameterError(f"missing parameter(s) {missing}: Weight {w!r}{at(w.where)}")
    unknown = [n for n in params if n not in weights]
    if unknown:
        raise ParameterError(f"unknown parameter(s) {unknown}; the network has {list(weights)}")
    out = {}
    for name, w in weights.items():
        value = params[name]
        if not hasattr(value, "shape"):
            try:
                value = jnp.asarray(value, dtype=jnp.result_type(float))
            except (TypeError, ValueError):
                raise ParameterError(f"parameter {name!r} is {value!r}, not an array") from None
        if tuple(value.shape) != w.shape:
            raise ParameterError(
                f"parameter {name!r} has shape {tuple(value.shape)}, but its Weight has shape {w.shape}{at(w.where)}"
            )
        out[name] = value
    return out
