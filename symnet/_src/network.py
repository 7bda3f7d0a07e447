"""Network: an expression (one or more named outputs) plus its parameters, as a JAX pytree.

The static part is the canonical expression, in which every Weight carries its
final name; the leaves are the parameter arrays, ordered by name. So `jax.jit`,
`jax.grad`, `jax.vmap` and `optax.apply_updates` take a Network as it is, and
two networks built the same way have equal structure (and share compiled code).
`objectives` is output metadata (Kaldi's `objective=` of each output node),
static in the pytree: it travels with the network through `jax.jit`, a config
or model file and `symnet.save`, but is no part of the computation.
"""

from __future__ import annotations

import functools
import hashlib
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import jax
import numpy as np

from .base.errors import ArgumentTypeError, GraphError, ParameterError, ShapeError
from .core import html
from .core.frozen import FrozenArray
from .core.layer import Layer, Weight, as_layer, evaluate, input_tape
from .core.params import checked_params, initial_values
from .core.precision import Precision
from .core.structure import Structure
from .core.tape import Tape
from .core.walk import rewrite, walk
from .engine import dense
from .engine.dims import node_shapes
from .engine.graph import Graph
from .engine.listing import listing
from .engine.summary import Summary, infer_dims, summarize

if TYPE_CHECKING:
    from .engine.recurrence import Lowering

__all__ = ["DEFAULT_OUTPUT", "Network", "OBJECTIVE_KINDS"]

DEFAULT_OUTPUT = "output"
#: The objectives an output may carry (Kaldi's output-node `objective=`).
OBJECTIVE_KINDS = ("linear", "quadratic")


def _check_dims(outputs: Mapping[str, Layer]) -> None:
    """A ShapeError, naming the layer and the line that built it, where operands' known dims do not fit: said
    when the network is built rather than at its first compute. What the build cannot tell (a graph that does not
    resolve yet, a layer without a shape rule) is left to the computation, which checks it again."""
    try:
        node_shapes(Graph(dict(outputs)))
    except ShapeError:
        raise
    except (GraphError, NotImplementedError, TypeError, ValueError):
        return


class Network:
    """An expression with named outputs, its parameters and its state; a JAX pytree.

    `Network(expr)` has one output named `output`; `Network({'out': e1, 'aux': e2})`
    has several. `params` holds the trainable Weights' arrays, `state` the
    FixedWeights' (values kept but never trained by gradients, such as
    batch-norm statistics), each by name. Both start from the initialisers,
    with a `jax.random` key derived from `seed` and the name, unless given:
    `params` and `state` give a whole half, `values` the arrays of some
    Weights by name (parameters or state, as a model file holds them), whose
    initialisers are then never called. An optimiser is given `net.params`
    only: it never sees the state.

    `objectives` maps some outputs to Kaldi's objective (`'linear'` or
    `'quadratic'`), read-only; an output without one is `'linear'` where Kaldi
    needs one. A network read from a Kaldi config or model file carries the
    file's.
    """

    __slots__ = ("structure", "params", "state", "objectives", "__weakref__")  # jax.jit(network) keeps a weak reference

    structure: Structure
    params: dict[str, jax.Array]
    state: dict[str, jax.Array]
    objectives: Mapping[str, str]

    def __init__(
        self,
        outputs: Layer | Mapping[str, Layer],
        *,
        params: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        seed: int = 0,
        values: Mapping[str, Any] | None = None,
        objectives: Mapping[str, str] | None = None,
    ):
        if not isinstance(outputs, Mapping):
            outputs = {DEFAULT_OUTPUT: outputs}
        if not outputs:
            raise GraphError("a Network needs at least one output")
        outputs = {str(k): as_layer(v) for k, v in outputs.items()}
        structure = Structure.of(outputs)
        _check_dims(outputs)
        weights = dict(zip(structure.names, structure.weights, strict=True))
        trainable = {n: w for n, w in weights.items() if w.trainable}
        fixed = {n: w for n, w in weights.items() if not w.trainable}
        if values is not None:
            if params is not None or state is not None:
                raise ParameterError("give a Network either values or params/state, not both")
            unknown = sorted(set(values) - set(weights))
            if unknown:
                raise ParameterError(f"unknown Weight(s) {unknown}; the network has {list(weights)}")
            params = _with_initial(trainable, values, seed)
            state = _with_initial(fixed, values, seed)
        params = initial_values(trainable, seed) if params is None else checked_params(trainable, _mapping(params))
        state = initial_values(fixed, seed) if state is None else checked_params(fixed, state, "state value")
        object.__setattr__(self, "structure", structure)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "objectives", _checked_objectives(objectives, list(outputs)))

    @classmethod
    def from_structure(
        cls,
        structure: Structure,
        params: Mapping[str, Any],
        state: Mapping[str, Any] | None = None,
        objectives: Mapping[str, str] | None = None,
    ) -> Network:
        """The network of a `Structure` (another network's `structure`) with these arrays, unchecked.

        For code that keeps structures apart from arrays (a jitted step, a
        checkpoint); `Network(...)` or `net.replace(...)` check them.
        """
        net = object.__new__(cls)
        object.__setattr__(net, "structure", structure)
        object.__setattr__(net, "params", dict(params))
        object.__setattr__(net, "state", dict(state or {}))
        object.__setattr__(net, "objectives", types.MappingProxyType(dict(objectives or {})))
        return net

    @property
    def network(self) -> Network:
        """Deprecated: the network itself (what `KaldiNetwork.network` was); use the network directly."""
        warnings.warn(
            "net.network is deprecated (KaldiNetwork is gone; a Network carries its objectives): "
            "use the Network itself; this alias will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Network is immutable; use net.replace(params=..., state=...)")

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
        """Name -> its (canonical) Weight layer, for parameters and state alike."""
        return {w.name: w for w in self.structure.weights}  # type: ignore[misc]

    @property
    def values(self) -> dict[str, jax.Array]:
        """Every Weight's array by name: the parameters and the state together."""
        return {**self.params, **self.state}

    def fingerprint(self) -> str:
        """A digest of the structure (expression and the shapes of every Weight), stable across runs.

        Checkpoints and model files store it to refuse loading into another network.
        """
        ids: dict[int, int] = {}
        lines: list[str] = []
        for layer in walk([layer for _, layer in self.structure.outputs]):
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
            lines.append(f"{type(layer).__name__}({', '.join(fields)})")
        lines.append(repr([name for name, _ in self.structure.outputs]))
        values = self.values
        lines.extend(f"{n}{tuple(np.shape(values[n]))}" for n in self.structure.names)
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    def replace(
        self,
        *,
        params: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        objectives: Mapping[str, str] | None = None,
    ) -> Network:
        """A network with the same structure and new parameters, state and/or objectives (each checked)."""
        weights = self.weights
        new_params = (
            self.params
            if params is None
            else checked_params({n: weights[n] for n in self.structure.param_names}, _mapping(params))
        )
        new_state = (
            self.state
            if state is None
            else checked_params({n: weights[n] for n in self.structure.state_names}, state, "state value")
        )
        names = [name for name, _ in self.structure.outputs]
        new_objectives = self.objectives if objectives is None else _checked_objectives(objectives, names)
        return Network.from_structure(self.structure, new_params, new_state, new_objectives)

    def assign(self, values: Mapping[str, Any]) -> Network:
        """A network with new arrays for some Weights (parameters or state, by name), the others kept.

        For readers of files and statistics updates, which hold values by Weight name.
        """
        unknown = sorted(set(values) - set(self.structure.names))
        if unknown:
            raise ParameterError(f"unknown Weight(s) {unknown}; the network has {list(self.structure.names)}")
        params = {n: values.get(n, v) for n, v in self.params.items()}
        state = {n: values.get(n, v) for n, v in self.state.items()}
        return self.replace(params=params, state=state)

    def select(self, outputs: Mapping[str, str] | Sequence[str]) -> Network:
        """A network of some of these outputs, arrays kept; a mapping renames (new name -> this network's name).

        `net.select({"output": "output-xent"})` is nnet3-copy's rename-node.
        (`Network({"output": net.outputs["output-xent"]})` would build the same
        structure with every Weight at its initial value.)
        """
        pairs = dict(outputs) if isinstance(outputs, Mapping) else {name: name for name in outputs}
        mine = self.outputs
        unknown = [old for old in pairs.values() if old not in mine]
        if unknown or not pairs:
            raise GraphError(f"select: no output(s) {unknown or 'given'}; the network has {list(mine)}")
        objectives = {new: self.objectives[old] for new, old in pairs.items() if old in self.objectives}
        fresh = Network({new: mine[old] for new, old in pairs.items()}, objectives=objectives)
        values = self.values
        return fresh.assign({name: values[name] for name in fresh.values})

    def rewrite(self, fn: Callable[[Layer], Layer], *, seed: int = 0) -> Network:
        """A network whose every layer is replaced by `fn(layer)`, operands first; arrays kept by name.

        `fn` gets each layer with its operands already rewritten and returns the
        replacement or the layer itself; shared sub-trees stay shared. Every
        Weight of this network has its final name, so a parameter (or state
        value) that is still there keeps its array; new Weights start from their
        initialisers (`seed`). For example, every ReLU to a Tanh:

            net.rewrite(lambda layer: Tanh(layer.arg) if isinstance(layer, ReLU) else layer)
        """
        names = [name for name, _ in self.structure.outputs]
        outputs = dict(zip(names, rewrite([layer for _, layer in self.structure.outputs], fn)))
        fresh = Network(outputs, seed=seed)
        old = self.values

        def kept(arrays: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
            return {n: old[n] if n in old and np.shape(old[n]) == np.shape(v) else v for n, v in arrays.items()}

        return Network.from_structure(fresh.structure, kept(fresh.params), kept(fresh.state), self.objectives)

    # ----- running -----------------------------------------------------------------

    def forward(self, input: Any = None, params: Mapping[str, Any] | None = None) -> Tape | dict[str, Tape]:
        """Run on `input` and return the output's Tape (a dict of Tapes for several outputs).

        `params` replaces the parameters for this run (e.g. inside `jax.grad`).
        """
        if params is not None:
            weights = self.weights
            params = checked_params({n: weights[n] for n in self.structure.param_names}, _mapping(params))
        given = None if input is None else input_tape(input)
        names = [name for name, _ in self.structure.outputs]
        roots = [layer for _, layer in self.structure.outputs]
        tapes = evaluate(roots, given, self.params if params is None else params, self.state)
        return tapes[0] if len(names) == 1 else dict(zip(names, tapes))

    def __call__(self, input: Any = None) -> jax.Array | dict[str, jax.Array]:
        """The output value(s) for `input`."""
        result = self.forward(input)
        if isinstance(result, Tape):
            return result.value
        return {name: tape.value for name, tape in result.items()}

    def context(self, output: str | None = None) -> tuple[int, int]:
        """(left, right) frames of input context an output frame needs (nnet3-info's context)."""
        return dense.context(self, output)

    def infer_dims(self, input_dims: Mapping[str, int] | None = None) -> dict[str, int]:
        """The dim of every input, named Node and output, without running: `{'input': 40, 'h': 512, 'output': 10}`.

        `input_dims` gives the dims of inputs that declare none (`Identity()`:
        `{'input': 40}`). Operands that do not fit raise the layer's ShapeError,
        as does a dim nothing determines.
        """
        return infer_dims(self.outputs, input_dims)

    def summary(self, input_dims: Mapping[str, int] | None = None) -> Summary:
        """A table of the layers, operands first: output dim, parameter and state counts, time context.

        `str(net.summary())` is a text table; in a notebook it shows as HTML.
        `input_dims` is as for `infer_dims`; rows are named by Node and role (`lstm1.c`).
        """
        return summarize(self.outputs, input_dims)

    def compute(
        self,
        x: Any,
        *,
        mode: str = "same",
        output: str | None = None,
        frames_per_chunk: int | None = None,
        carry_state: bool = True,
        extra_left_context: int = 0,
        extra_right_context: int = 0,
        lowering: Lowering = "auto",
        precision: str | Precision | None = None,
        test_mode: bool = True,
    ) -> Any:
        """Outputs for every frame of `[N, T, D]` input or a list of `[T_i, D]` sequences.

        `mode='same'` repeats edge frames as nnet3-compute does; `mode='valid'`
        returns only frames that need no padding. Sequences are padded to a few
        bucket lengths where that changes no output, so that any set of lengths
        compiles a few programs. `frames_per_chunk` runs in chunks, carrying recurrent state across them
        (`carry_state=True`, equal to one pass) or computing each chunk on its
        own as nnet3-compute does (`carry_state=False`, with extra context).
        Inside `jax.jit`/`jax.grad` (traced `x`, static frame count) it runs one
        regular request for the whole batch and gives the same numbers;
        `frames_per_chunk` needs concrete input (a PlanError when traced).
        `lowering` is how recurrences and spliced products run (`'auto'`, `'fused'`, `'plain'`, as
        for `symnet.compile`); `symnet.engine.record()` shows the
        Computations a call used and what each recurrence got. `precision` is a
        mixed-precision policy (`symnet.Precision` or `"float32"`, `"bfloat16"`,
        `"float16"`; docs/precision.md).
        `test_mode=True` computes as Kaldi's nnet3-compute does: batch-norm with its stored statistics (a
        warning names one that has none yet) and dropout off, row by row, so any lengths bucket together;
        `test_mode=False` computes the network as built (training-mode batch-norm normalises over the call's
        frames: one minibatch of one length; dropout draws inside `symnet.rng.randomness`).
        """
        if not isinstance(test_mode, bool):
            raise ArgumentTypeError(f"test_mode is True or False, got {test_mode!r}")
        return dense.compute(
            self._in_test_mode() if test_mode else self,
            x,
            mode=mode,
            output=output,
            frames_per_chunk=frames_per_chunk,
            carry_state=carry_state,
            extra_left_context=extra_left_context,
            extra_right_context=extra_right_context,
            lowering=lowering,
            precision=precision,
        )

    def _in_test_mode(self) -> Network:
        """This network as inference computes it (`compute`'s `test_mode`): the same arrays, every layer
        `in_test_mode`; warns of a batch-norm without statistics."""
        structure, keeping = _test_mode_structure(self.structure)
        values = {**self.params, **self.state}
        for layer in keeping:
            if layer.missing_statistics(values):
                warnings.warn(
                    f"{layer.own_name or type(layer).__name__!r} has no batch-norm statistics yet (its count is 0: "
                    "fit gathers them): in test mode it normalises with mean 0 and variance 0. "
                    "compute(..., test_mode=False) normalises over the call's own frames instead",
                    stacklevel=3,
                )
        if structure is self.structure:
            return self
        return Network.from_structure(structure, self.params, self.state, self.objectives)

    def __repr__(self) -> str:
        """One line per named node, operands by name, repeated blocks elided (symnet._src.engine.listing), then
        the counts of parameters and state; `repr(net.structure)` is the whole expression."""
        lines = listing(dict(self.structure.outputs), {**self.params, **self.state})
        count = sum(int(np.size(v)) for v in self.params.values())
        state = sum(int(np.size(v)) for v in self.state.values())
        tail = f"params: {count:,} in {len(self.params)} arrays" + (
            f", state: {state:,} in {len(self.state)} arrays" if self.state else ""
        )
        if self.objectives:
            tail += f", objectives: {dict(self.objectives)}"
        return "Network(\n" + "".join(f"  {line}\n" for line in [*lines, tail]) + ")"

    def _repr_html_(self) -> str:
        """Nodes, dims, parameters, context and a picture, for notebooks (see `symnet.display`)."""
        return html.render_html(self)

    # ----- pytree ------------------------------------------------------------------
    # Two children, the parameters and the state (dicts in name order): `jax.grad` of
    # a function of a Network gives a Network; train with the gradients of `params`.
    # The static part is the structure and the objectives (as sorted pairs, hashable).

    def _aux(self) -> tuple[Structure, tuple[tuple[str, str], ...]]:
        return self.structure, tuple(sorted(self.objectives.items()))

    def _tree_flatten_with_keys(
        self,
    ) -> tuple[tuple[tuple[Any, dict[str, Any]], ...], tuple[Structure, tuple[tuple[str, str], ...]]]:
        children = ((jax.tree_util.GetAttrKey("params"), self.params), (jax.tree_util.GetAttrKey("state"), self.state))
        return children, self._aux()

    def _tree_flatten(
        self,
    ) -> tuple[tuple[dict[str, Any], dict[str, Any]], tuple[Structure, tuple[tuple[str, str], ...]]]:
        return (self.params, self.state), self._aux()

    @classmethod
    def _tree_unflatten(cls, aux: tuple[Structure, tuple[tuple[str, str], ...]], children: Any) -> Network:
        params, state = children
        structure, objectives = aux
        return cls.from_structure(structure, params, state, dict(objectives))


jax.tree_util.register_pytree_with_keys(
    Network,
    Network._tree_flatten_with_keys,
    Network._tree_unflatten,
    Network._tree_flatten,
)


@functools.lru_cache(maxsize=32)
def _test_mode_structure(structure: Structure) -> tuple[Structure, tuple[Layer, ...]]:
    """`structure` with every layer `in_test_mode` (itself where none changes), and its layers that keep
    statistics (`missing_statistics`): made once per structure."""
    names = [name for name, _ in structure.outputs]
    outputs = rewrite([layer for _, layer in structure.outputs], lambda layer: layer.in_test_mode())
    if not all(new is old for new, (_, old) in zip(outputs, structure.outputs, strict=True)):
        structure = Structure.of(dict(zip(names, outputs, strict=True)))
    keeping = tuple(
        layer
        for layer in walk(layer for _, layer in structure.outputs)
        if type(layer).missing_statistics is not Layer.missing_statistics
    )
    return structure, keeping


def _with_initial(weights: Mapping[str, Weight], values: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The given values of these Weights, and initial arrays for the rest (only theirs are drawn)."""
    rest = {n: w for n, w in weights.items() if n not in values}
    return {**initial_values(rest, seed), **{n: values[n] for n in weights if n in values}}


def _checked_objectives(objectives: Mapping[str, str] | None, outputs: Sequence[str]) -> Mapping[str, str]:
    """The objectives as a read-only mapping; a GraphError for an unknown output or objective."""
    checked = dict(objectives or {})
    for name, kind in checked.items():
        if name not in outputs:
            raise GraphError(f"objective for {name!r}, which is not an output; the network has outputs {list(outputs)}")
        if kind not in OBJECTIVE_KINDS:
            raise GraphError(f"output {name!r}: objective {kind!r} is not one of {', '.join(OBJECTIVE_KINDS)}")
    return types.MappingProxyType(checked)


def _mapping(params: Any) -> Mapping[str, Any]:
    """Parameters given as a mapping, or as a Network whose parameters to take."""
    return params.params if isinstance(params, Network) else params
