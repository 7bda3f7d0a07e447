"""`Trainer`: the compiled pieces of one training setup (request, jitted step, evaluation) and minibatching.

Every minibatch is one regular request of chunks (`symnet._src.train.examples`):
one compiled computation per chunk width. A step runs forward, the objective,
`tape.backward` over every output the objective reads, and the optax update
(or Kaldi's rules) in one `jax.jit` (`_step_function`; the evaluation is
`_evaluate_function`, both jitted by `_jitted`). With natural gradient the
step only projects, and a second jitted program, the same for every chunk
width, updates the preconditioners from the statistics the step returns
(`symnet._src.components.online_preconditioner`): their small algebra is
compiled once per run, not into each width's step. The step and the evaluation
call their Computation inside their own program, not through the runner's
`run`, so each call says which one it runs (`symnet._src.engine.runner.note`):
`symnet.engine.record()` sees training's programs as it sees the runner's.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..components import batchnorm_stats_updates, natural_gradient, set_test_mode
from ..components.normalize import statistics_across
from ..core import rng
from ..core.index import IndexSet
from ..core.precision import Precision, wide
from ..core.tape import backward
from ..engine.buckets import padding_side
from ..engine.compiling import compile
from ..engine.computation import Computation
from ..engine.ends import EndMasks
from ..engine.graph import Graph
from ..engine.recurrence import Lowering
from ..engine.request import ComputationRequest
from ..engine.runner import compiled, note
from ..network import Network
from . import loss_scale
from .component_rules import KaldiRulesWarning
from .examples import Chunks
from .fit_data import used_widths
from .minibatches import MemoryBatches, Minibatch, by_width, minibatch_of
from .objectives import Objective
from .parallel import DataParallel, Reduction
from .rules import KaldiRules

__all__ = ["describe", "Trainer", "trains_with_ends"]


def trains_with_ends(network: Any) -> bool:
    """Whether padding a chunk past its sequence's end (repeating the last frame) changes its outputs, and the
    request can take each sequence's end instead (`symnet._src.engine.buckets.padding_side`)."""
    return padding_side(Graph(dict(network.structure.outputs)), with_ends=True) in ("ends", "start")


class Trainer:
    """The compiled pieces of one training setup: request, step, evaluation."""

    def __init__(
        self,
        network: Any,
        optimizer: optax.GradientTransformation,
        *,
        batch_size: int,
        chunks: Chunks,
        objective: Objective,
        input: str,
        output: str,
        parallel: DataParallel | None = None,
        widths: Sequence[int] = (),
        rules: KaldiRules | None = None,
        frame_subsampling_factor: int = 1,
        lowering: Lowering = "auto",
        precision: Precision | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.lowering = lowering  # how recurrences and splices run in every compiled step (`compile`'s `lowering`)
        # The mixed-precision policy every computation is compiled with; with its loss_scale the optimiser
        # state is a LossScaled (symnet._src.train.loss_scale), and a step whose gradients overflow is skipped.
        self.precision = precision
        # A per-frame objective (`frame_loss` of the output rows), or a sequence objective (`value_and_grad` of
        # [batch, frames, dim] outputs with per-chunk supervision, made once per Chunks in `supervision`).
        self.objective = objective
        # Outputs at chunk frames 0, k, 2k, ...: the request asks for those output Indexes only (the planner
        # computes what they need: about half the time of all frames for a TDNN at k=3, docs/training.md).
        self.subsampling = int(frame_subsampling_factor)
        self._supervision: dict[int, tuple[Chunks, Any]] = {}
        # Kaldi's rules (`symnet._src.train.rules`): then `optimizer` is they, and every step also takes the
        # minibatch's number of sequences and the dropout schedule's proportions (`rules_args`).
        self.rules = rules
        self.input, self.output = input, output
        # Every output a step computes: the trained one first, then those the objective also reads (the
        # chain objective's `output-xent`), each given its derivative in one backward walk.
        self.outputs = (output, *objective.extra_outputs)
        self.batch_size = batch_size
        self.chunk, self.left, self.right = chunks.chunk, chunks.left, chunks.right
        # The chunk widths minibatches are cut down to (`fit`'s `chunk=(300, 200, 100)`): the largest is `chunk`.
        self.widths = used_widths(chunks, widths)
        # With a mesh every device computes its own `batch_size / devices` chunks (symnet._src.train.parallel).
        self.parallel = parallel
        self.reduce = Reduction(parallel.axis if parallel is not None else None)
        # A network whose outputs depend on where a sequence ends (a backward recurrence, an IfDefined of a
        # later frame) is trained with each chunk's own end, not on repeats of its sequence's last frame.
        # With a mesh each device gets the masks of its own chunks' ends.
        self.sequence_ends = chunks.ends is not None and trains_with_ends(network)
        self.local_batch = parallel.local_batch if parallel is not None else batch_size
        self.network = network
        self.test_network = set_test_mode(network)
        self._computations: dict[tuple[int, bool], Computation] = {}
        self.computation = self.computation_for(self.chunk)
        self.test_computation = self.computation_for(self.chunk, test=True)
        self.structure = network.structure
        self.jitted_step, self.jitted_evaluate = _jitted(self, _step_function(self), _evaluate_function(self))
        # Natural gradient: the preconditioners' update, jitted on first use, and the first leaf of the states it
        # last gave (states the step gets back need no check that they are initialised).
        self._jitted_advance: Any = None
        self._advanced_leaf: Any = None

    def step(
        self,
        network: Network,
        opt_state: Any,
        x: jax.Array,
        targets: Any,
        weights: jax.Array,
        key: jax.Array | None = None,
        ends: EndMasks | None = None,
        *rules_args: Mapping[str, Any],
    ) -> tuple[Network, Any, jax.Array, Any, dict[str, jax.Array], jax.Array, jax.Array]:
        """One training step on a minibatch (`arrays`): `(network, optimiser state, loss, statistics, whether
        each parameter is finite, gradient norm, frames)` (frames: the sum of the minibatch's weights, over all
        devices with a mesh); its computation is recorded as the runner's are (`symnet.engine.record`). With
        Kaldi's rules the last argument is `rules_args(...)`. With natural gradient the preconditioners are
        updated after the jitted step, by a second program (`_advance_preconditioners`)."""
        note(self.computation_for(self.width_of(x)))
        args = (x, targets, weights, key, ends, *rules_args)
        if self._uninitialised_preconditioners(opt_state):
            opt_state = self._initialise_preconditioners(network, opt_state, args)
        network, opt_state, loss, correct, finite, norm, frames, statistics, apply = self.jitted_step(
            network, opt_state, *args
        )
        if statistics:  # natural gradient: the preconditioners' update, deferred out of the step
            opt_state = self._advance_preconditioners(opt_state, statistics, apply, -1)
        return network, opt_state, loss, correct, finite, norm, frames

    def _uninitialised_preconditioners(self, opt_state: Any) -> bool:
        """Whether `opt_state` has natural-gradient preconditioners not yet initialised from data (read from the
        device only where they are not the ones the last step left)."""
        inner = loss_scale.inner(opt_state)
        if not isinstance(inner, natural_gradient.NaturalGradientState):
            return False
        leaves = jax.tree.leaves(inner.preconditioners)
        if not leaves or leaves[0] is self._advanced_leaf:
            return False
        states = [s for by_key in inner.preconditioners.values() for s in by_key.values()]
        return any(s.rank > 0 and float(s.t) < 0 for s in states)

    def _initialise_preconditioners(self, network: Network, opt_state: Any, args: tuple[Any, ...]) -> Any:
        """Kaldi's `Init` of the preconditioners on this minibatch: the step's projections, once per round of
        `natural_gradient.advance`'s initialisation, with the step's other results thrown away (the matrices a
        component preconditions do not depend on its preconditioners, so each round sees the same ones)."""
        for round in range(natural_gradient.NUM_INIT_ITERS):
            scratch = jax.tree.map(jnp.copy, opt_state)  # the step consumes (donates) its optimiser state
            *_, statistics, apply = self.jitted_step(network, scratch, *args)
            if statistics:
                opt_state = self._advance_preconditioners(opt_state, statistics, apply, round)
        return opt_state

    def _advance_preconditioners(self, opt_state: Any, statistics: Any, apply: jax.Array, init_round: int) -> Any:
        """`opt_state` with its preconditioners advanced by a step's statistics (`natural_gradient.advance_states`,
        one compiled program for every chunk width)."""
        if self._jitted_advance is None:
            network_settings = {
                name: natural_gradient.settings(layer)
                for name, layer in natural_gradient.components(self.network).items()
            }

            def advance(states: Any, statistics: Any, init_round: jax.Array, apply: jax.Array) -> Any:
                return natural_gradient.advance_states(states, statistics, network_settings, init_round, apply)

            self._jitted_advance = jax.jit(advance, donate_argnums=(0,))
        inner = loss_scale.inner(opt_state)
        states = self._jitted_advance(inner.preconditioners, statistics, jnp.asarray(init_round, jnp.int32), apply)
        self._advanced_leaf = jax.tree.leaves(states)[0] if init_round < 0 else None
        inner = inner._replace(preconditioners=states)
        return opt_state._replace(inner=inner) if isinstance(opt_state, loss_scale.LossScaled) else inner

    def evaluate(
        self,
        network: Network,
        x: jax.Array,
        targets: Any,
        weights: jax.Array,
        ends: EndMasks | None = None,
        *dropout: Mapping[str, Any],
    ) -> tuple[jax.Array, Any, jax.Array]:
        """`(loss, statistics, frames)` of a minibatch in test mode (with Kaldi's rules the last argument is the dropout
        proportions, `dropout(...)`); its computation is recorded as the runner's are."""
        note(self.computation_for(self.width_of(x), test=True))
        return self.jitted_evaluate(network, x, targets, weights, ends, *dropout)

    def loss(
        self, values: Mapping[str, jax.Array], targets: Any, weights: jax.Array
    ) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
        """(loss, statistics, d loss / d each of `outputs`) of the output rows `values` by name
        (`[frames * batch, dim]`, t-major; with frame subsampling the rows of chunk frames 0, k, 2k, ... only,
        as are `targets` and `weights`).

        Statistics: the correct frames for a per-frame objective, a sequence objective's statistics (a dict
        with `correct` and `count`) for one."""
        values = {name: v.astype(wide(v.dtype)) for name, v in values.items()}  # objectives sum in float32
        if self.objective.per_frame:
            loss, correct, delta = self.objective.frame_loss(values[self.output], targets, weights)
            return loss, correct, {self.output: delta}
        batch = self.local_batch

        def sequences(rows: jax.Array) -> jax.Array:  # [frames * batch, dim] -> [batch, frames, dim]
            return jnp.swapaxes(rows.reshape((rows.shape[0] // batch, batch) + rows.shape[1:]), 0, 1)

        def rows(x: jax.Array) -> jax.Array:
            return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])

        value = values[self.output]
        w = weights.reshape(value.shape[0] // batch, batch).T
        extra = {name: sequences(values[name]) for name in self.outputs[1:]}
        loss, stats, delta, extra_deltas = self.objective.value_and_grad(sequences(value), w, targets, extra)
        return loss, stats, {self.output: rows(delta), **{name: rows(d) for name, d in extra_deltas.items()}}

    def request(self, batch: int, width: int | None = None) -> ComputationRequest:
        """The request of one minibatch of `batch` chunks of `width` output frames (`chunk` unless given)."""
        width = self.chunk if width is None else width
        return ComputationRequest(
            inputs={self.input: IndexSet.range(n=batch, t=(-self.left, width + self.right))},
            outputs={name: IndexSet.range(n=batch, t=range(0, width, self.subsampling)) for name in self.outputs},
            sequence_ends=self.sequence_ends,
        )

    def computation_for(self, width: int, test: bool = False) -> Computation:
        """The compiled computation of one minibatch of chunks `width` frames wide (`test`: the test-mode network)."""
        key = (width, test)
        if key not in self._computations:
            network = self.test_network if test else self.network
            request = self.request(self.local_batch, width)
            self._computations[key] = compile(network, request, self.lowering, precision=self.precision)
        return self._computations[key]

    def width_of(self, x: Any) -> int:
        """The chunk width of a minibatch's features: `[(width + left + right) * local batch, dim]` (with a mesh,
        `arrays` gives `[devices, ...]` of those, and the step gets its device's)."""
        return int(x.shape[-2]) // self.local_batch - self.left - self.right

    def batches(self, chunks: Chunks, order: np.ndarray, drop_partial: bool = False) -> list[np.ndarray]:
        """Minibatch indexes in `order`, each of chunks of one width; `arrays` fills the last of each up to keep
        one shape (with `drop_partial` it is left out).

        With one width they are consecutive slices of `order`. With several, each width's chunks (in `order`)
        are cut into minibatches, ordered by where their first chunk comes in `order` (`by_width`).
        """
        return by_width(order, chunks.widths(self.widths), self.batch_size, drop_partial)

    def minibatch(self, number: int, chunks: Chunks, idx: np.ndarray) -> Minibatch:
        """Minibatch `number`, `chunks[idx]`, filled up to the batch size (with a mesh: this process's part)."""
        return minibatch_of(number, chunks, idx, self)

    def arrays(self, minibatch: Minibatch) -> tuple[Any, ...]:
        """(features, targets, weights) of `minibatch`, each split over the devices with a mesh (a sequence
        objective's targets: its per-chunk supervision, split by chunk)."""
        x, targets, weights = self.host_arrays(minibatch)
        if self.parallel is not None:
            if self.objective.per_frame:
                return self.parallel.shard(x, targets, weights)
            features, frame_weights = self.parallel.shard(x, weights)
            return features, self.parallel.shard_chunks(targets), frame_weights
        return jnp.asarray(x), jax.tree.map(jnp.asarray, targets), jnp.asarray(weights)

    def supervision(self, chunks: Chunks) -> Any:
        """The sequence objective's per-chunk supervision of `chunks`, made once (from the frames at the full
        rate; with frame subsampling, the output frames' weights are those of every k-th frame)."""
        cached = self._supervision.get(id(chunks))
        if cached is None or cached[0] is not chunks:
            made = self.objective.supervision(chunks.targets, chunks.weights, self.subsampling)
            cached = (chunks, {name: np.asarray(a) for name, a in made.items()})
            if len(self._supervision) >= 2:  # the training and validation chunks; a stream's minibatches come and go
                self._supervision.pop(next(iter(self._supervision)))
            self._supervision[id(chunks)] = cached
        return cached[1]

    def ends(self, minibatch: Minibatch, test: bool = False) -> EndMasks | None:
        """The end masks of `minibatch` for `step` (`test`: for `evaluate`) where training takes sequence ends,
        else None; with a mesh, each device's own, split over the data axis."""
        if not self.sequence_ends:
            return None
        computation = self.computation_for(minibatch.width, test)
        assert minibatch.chunks.ends is not None  # sequence_ends is set only for chunks that record their ends
        ends = minibatch.chunks.ends[minibatch.rows]
        if self.parallel is None:
            return computation.end_masks(ends)
        sequence_ends = computation.sequence_ends
        assert sequence_ends is not None  # a request with sequence ends (`request`)
        per_group = [sequence_ends.masks(part) for part in np.split(ends, len(self.parallel.local_groups))]
        return EndMasks(self.parallel.stack(per_group))

    def host_arrays(self, minibatch: Minibatch) -> tuple[np.ndarray, Any, np.ndarray]:
        """`minibatch`'s (features, targets, weights) matrices in (t, n) row order; the chunks that only fill it
        up get weight 0."""
        rows, width = minibatch.rows, minibatch.width
        x, frame_targets, weights = minibatch.chunks.minibatch(rows, width)
        targets: Any = frame_targets
        weights = weights * np.tile(minibatch.real.astype(np.float32), width)
        k = self.subsampling
        if k > 1:  # chunk frames 0, k, 2k, ... (rows t-major: every k-th block of `len(rows)` rows)
            picked = (np.arange(width)[::k, None] * len(rows) + np.arange(len(rows))).ravel()
            targets, weights = targets[picked], weights[picked]
        if not self.objective.per_frame:
            targets = {name: a[rows] for name, a in self.supervision(minibatch.chunks).items()}
        return x, targets, weights

    def counts(self, correct: Any, frames: float) -> tuple[float, float]:
        """(correct, count) of a step's or evaluation's statistics: a per-frame objective counts frames, a
        sequence objective its own (e.g. CTC's tokens)."""
        if isinstance(correct, Mapping):
            return float(correct["correct"]), float(correct["count"])
        return float(correct), frames

    def rules_args(self, minibatch: Minibatch, fraction: float) -> dict[str, Any] | None:
        """What a step with Kaldi's rules takes besides the minibatch: its number of sequences (chunks; the
        filling ones do not count) and the dropout proportions after `fraction` of the run (None without
        rules)."""
        if self.rules is None:
            return None
        return {"sequences": self._replicated(float(minibatch.count)), "dropout": self.dropout(fraction)}

    def dropout(self, fraction: float) -> dict[str, Any]:
        """The dropout schedule's proportions after `fraction` of the run, as arrays for the jitted step."""
        if self.rules is None:
            return {}
        return {name: self._replicated(p) for name, p in self.rules.dropout(fraction).items()}

    def _replicated(self, value: float) -> jax.Array:
        array = jnp.asarray(value, jnp.float32)
        return self.parallel.replicate(array) if self.parallel is not None else array

    def score(self, network: Any, batches: Any, fraction: float = 1.0) -> tuple[float, float]:
        """(loss, frame accuracy) over all the minibatches of `batches` (`Chunks`, or a source of
        `symnet._src.train.minibatches`; with a dropout schedule: its proportions after `fraction` of the run,
        which test-mode dropout scales by)."""
        if isinstance(batches, Chunks):
            batches = MemoryBatches(self, batches, 0, shuffle=False)
        total_loss, total_correct, total, total_count = 0.0, 0.0, 0.0, 0.0
        dropout = self.dropout(fraction)
        with batches.epoch(0) as minibatches:
            for minibatch in minibatches:
                x, targets, weights = self.arrays(minibatch)
                extra = (dropout,) if self.rules is not None else ()
                ends = self.ends(minibatch, test=True)
                loss, correct, weight = self.evaluate(network, x, targets, weights, ends, *extra)
                frames = float(weight)
                right, count = self.counts(correct, frames)
                total_loss += float(loss) * frames
                total_correct += right
                total += frames
                total_count += count
        return total_loss / max(total, 1.0), total_correct / max(total_count, 1.0)

    def first_non_finite(self, network: Any, minibatch: Minibatch, key: jax.Array | None = None) -> str:
        """The first node (operands before users) whose value is NaN or Inf, by walking the Tape.

        In the Tape's topological order the first such node has only finite operands:
        it is where the non-finite values start. With a mesh this process's part of the minibatch runs here,
        on its default device (dropout masks then differ from the devices').
        """
        x = jnp.asarray(self.host_arrays(minibatch)[0])
        width = minibatch.width
        computation = self.computation_for(width)
        ends = self.ends(minibatch)
        if self.parallel is not None:
            rows = len(minibatch.rows)
            computation = compiled(network, self.request(rows, width), self.lowering, self.precision)
            network = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)), network)
            key = None if key is None else jnp.asarray(np.asarray(key))
            if ends is not None:
                assert minibatch.chunks.ends is not None  # as in `ends`
                ends = computation.end_masks(minibatch.chunks.ends[minibatch.rows])
        with rng.randomness(key) if key is not None else contextlib.nullcontext():
            tape = computation.forward(network, {self.input: x}, ends)[self.output]
        for node in tape.nodes():
            value = np.asarray(node.value)
            bad = ~np.isfinite(value)
            if bad.any():
                first = value[bad].flat[0]
                return f"{describe(node.layer)} (its value has {int(bad.sum())} non-finite entries, first {first})"
        return "no node of the network (the objective itself)"


def normalizer(statistics: Any, weights: jax.Array) -> jax.Array:
    """What a minibatch's loss was divided by: its weights' sum, or a sequence objective's own total (its
    statistics' `weight`: CTC leaves out the frames of chunks it cannot align)."""
    if isinstance(statistics, Mapping) and "weight" in statistics:
        return statistics["weight"]
    return weights.sum()


def _step_function(trainer: Trainer) -> Callable[..., Any]:
    """The training step of `trainer`'s setup, to be jitted: forward, objective, backward, update."""
    input, outputs, reduce, rules, optimizer = (
        trainer.input,
        trainer.outputs,
        trainer.reduce,
        trainer.rules,
        trainer.optimizer,
    )
    growth = trainer.precision.growth_interval if trainer.precision is not None else 1

    def step(
        network: Network,
        opt_state: Any,
        x: jax.Array,
        targets: jax.Array,
        weights: jax.Array,
        key: jax.Array | None = None,
        ends: EndMasks | None = None,
        rules_args: Mapping[str, Any] | None = None,
    ) -> tuple[Network, Any, jax.Array, jax.Array, dict[str, jax.Array], jax.Array, jax.Array, Any, jax.Array]:
        # With `natural_gradient.optimizer(...)` the optimiser state carries the preconditioners: the
        # NaturalGradient* components' backward reads them and records the statistics of their update, which
        # `Trainer.step` applies after this program (else a no-op context).
        # `key` feeds training-mode dropout (symnet.rng), forward and backward alike.
        # With a mesh: the loss and derivative scaled by this device's share of the frames, then summed.
        # Training-mode batch-norm takes the whole minibatch's statistics (over all devices).
        randomness = rng.randomness(reduce.key(key)) if key is not None else contextlib.nullcontext()
        computation = trainer.computation_for(trainer.width_of(x))
        scaled = isinstance(opt_state, loss_scale.LossScaled)
        inner = loss_scale.inner(opt_state)
        proportions = rng.dropout_proportions(rules_args["dropout"]) if rules_args else contextlib.nullcontext()
        # Kaldi's self-repair adds its term to the derivative summed over frames; this step's loss is the mean
        # over the minibatch's frames (on all devices), times the loss scale.
        frames = reduce.sum(weights.sum())  # the minibatch's frames on all devices
        repair: Any = contextlib.nullcontext()
        if rules is not None:
            repair = rules.repairing(inner, frames, opt_state.scale if scaled else 1.0)
        with (
            randomness,
            proportions,
            statistics_across(reduce.axis),
            natural_gradient.step_context(inner, deferred=True) as ng,
            repair as repaired,
        ):
            tapes = computation.forward(network, {input: x}, ends)
            if repaired is not None and repaired.missing():
                warnings.warn(
                    f"Kaldi's self-repair is not applied to {', '.join(repaired.missing())}: computed inside a "
                    "recurrence's loop (or not by this step)",
                    KaldiRulesWarning,
                    stacklevel=2,
                )
            loss, correct, deltas = trainer.loss({name: tapes[name].value for name in outputs}, targets, weights)
            share = reduce.share(normalizer(correct, weights))
            # With loss scaling the derivative is scaled up before the walk, the gradients down after it.
            seed = share * opt_state.scale if scaled else share
            grads = reduce.sum(backward([(tapes[name], d * seed) for name, d in deltas.items()]))
            if scaled:
                grads = {name: g / opt_state.scale for name, g in grads.items()}
            # Training-mode batch-norm accumulates its statistics: state, updated outside the gradients.
            state = dict(network.state)
            for name in outputs:
                state.update(batchnorm_stats_updates(tapes[name], network.state))
        loss, correct = reduce.sum((loss * share, correct))
        if rules is None:
            updates, new_inner = optimizer.update(grads, ng.carry(inner), network.params)
            params = optax.apply_updates(network.params, updates)
        else:
            # Kaldi's rules: the gradient is of the mean loss over the minibatch's frames; its l2 term
            # needs the number of sequences. Then batch-norm statistics and orthonormal constraints.
            assert rules_args is not None
            sequences = rules_args["sequences"]
            updates, new_inner = rules.update(
                grads,
                ng.carry(inner),
                network.params,
                frames=jnp.maximum(frames, 1.0),
                sequences=sequences,
                repair=repaired.after() if repaired is not None else None,
            )
            params = optax.apply_updates(network.params, updates)
            params, state = rules.after_update(params, state, key)
        ok = jnp.asarray(True)
        if scaled:  # gradients that overflowed: the step is skipped, the scale halved
            ok = loss_scale.all_finite(grads)
            params = loss_scale.choose(ok, params, network.params)
            state = loss_scale.choose(ok, state, dict(network.state))
            opt_state = loss_scale.advanced(opt_state, new_inner, ok, growth)
        else:
            opt_state = new_inner
        # Per parameter: are all its new values finite? (A huge step can overflow the
        # parameters while the loss, computed before the update, is still finite.)
        finite = {name: jnp.isfinite(value).all() for name, value in {**params, **state}.items()}
        new_network = Network.from_structure(network.structure, params, state, network.objectives)
        # The deferred preconditioner updates' statistics, and whether to apply them (not after an overflow).
        return new_network, opt_state, loss, correct, finite, optax.tree.norm(grads), frames, ng.statistics, ok

    return step


def _evaluate_function(trainer: Trainer) -> Callable[..., Any]:
    """The evaluation of `trainer`'s setup, to be jitted: loss and statistics in test mode (batch-norm's stored
    statistics, no dropout), as Kaldi's nnet3-compute-prob; the test-mode network has the same parameters."""
    input, outputs, reduce = trainer.input, trainer.outputs, trainer.reduce
    test_structure = trainer.test_network.structure

    def evaluate(
        network: Network,
        x: jax.Array,
        targets: jax.Array,
        weights: jax.Array,
        ends: EndMasks | None = None,
        dropout: Mapping[str, Any] | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        test_network = Network.from_structure(test_structure, network.params, network.state)
        with rng.dropout_proportions(dropout) if dropout else contextlib.nullcontext():
            values = trainer.computation_for(trainer.width_of(x), test=True)(test_network, {input: x}, ends)
        loss, correct, _ = trainer.loss({name: values[name] for name in outputs}, targets, weights)
        share = reduce.share(normalizer(correct, weights))
        return reduce.sum((loss * share, correct, weights.sum()))

    return evaluate


def _jitted(trainer: Trainer, step: Callable[..., Any], evaluate: Callable[..., Any]) -> tuple[Any, Any]:
    """`step` and `evaluate` jitted: on one device, or over `trainer.parallel`'s mesh (whose jit takes exactly
    its arguments: the rules' only with rules)."""
    parallel = trainer.parallel
    if parallel is None:
        return jax.jit(step, donate_argnums=(1,)), jax.jit(evaluate)
    if trainer.rules is not None:
        return parallel.jit(step, "rrsssrsr", donate=(1,)), parallel.jit(evaluate, "rssssr")

    def plain_step(*args: Any) -> Any:
        return step(*args)

    def plain_evaluate(*args: Any) -> Any:
        return evaluate(*args)

    return parallel.jit(plain_step, "rrsssrs", donate=(1,)), parallel.jit(plain_evaluate, "rssss")


def describe(layer: Any, width: int = 100) -> str:
    """A layer for an error message: its type, its name or a shortened expression, where it was built."""
    kind = type(layer).__name__
    name = getattr(layer, "name", None)
    if isinstance(name, str):
        text = f"{kind} {name!r}"
    else:
        expr = repr(layer)
        if len(expr) > width:  # keep both ends: `... @ Weight(..., name='out.w')` names the parameter
            expr = expr[: width // 2 - 2] + " ... " + expr[-(width // 2 - 3) :]
        text = f"{kind} node `{expr}`"
    where = getattr(layer, "where", None)
    return f"{text} (built at {where})" if where else text
