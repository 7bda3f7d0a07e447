"""`fit`: train a network on sequences with an optax optimiser, one jitted step per minibatch.

Data is cut into fixed-size chunks with the network's context
(`symnet.train.examples`), so every minibatch is one regular request: one
compiled computation, slice-only row movement (with several chunk widths, one
per width: a chunk whose sequence ends early is computed at the smallest width
that holds it). Each step runs forward, the
objective, `tape.backward` and the optax update in one `jax.jit`. Runs are
deterministic given the seed, and a run resumed from a checkpoint continues
bit-identically.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..atomic import check_writable
from ..components import batchnorm_stats_updates, natural_gradient, set_test_mode
from ..components.normalize import statistics_across
from ..core import rng
from ..core.index import IndexSet
from ..core.layer import evolve
from ..core.tape import backward
from ..core.walk import walk
from ..engine import ComputationRequest, compile
from ..engine.buckets import padding_side
from ..engine.ends import EndMasks
from ..engine.graph import Graph
from ..errors import ShapeError, TrainingError
from ..host_memory import tune_host_memory
from ..network import Network
from . import checkpoint as ckpt
from . import resume
from .examples import Chunks, make_chunks
from .objectives import OBJECTIVE_NAMES, Chain, Objective, check_labels, get_objective, objective
from .parallel import DATA_AXIS, DataParallel, Reduction
from .rules import DROPOUT_TYPES, KaldiRules, carries_kaldi_rules, kaldi_rules


@attrs.frozen
class EpochStats:
    epoch: int
    step: int
    train_loss: float
    train_accuracy: float
    valid_loss: float | None
    valid_accuracy: float | None
    frames_per_second: float


@attrs.frozen
class StepStats:
    """One training step, for `fit(on_step=...)`: its loss and accuracy on its minibatch, the global norm
    of its gradient (of the mean loss, before the optimiser and Kaldi's rules), the output frames it trained
    on, and the seconds since the previous step ended (compilation included)."""

    epoch: int
    step: int
    loss: float
    accuracy: float
    grad_norm: float
    frames: float
    seconds: float


@attrs.frozen
class FitResult:
    network: Any
    history: tuple[EpochStats, ...]
    opt_state: Any


def as_chunks(data: Any, network: Any, chunk: int, output: str | Sequence[str]) -> Chunks:
    """Chunks from a `Chunks`, a `symnet.datasets.Dataset`, or a `(features, targets)` pair of lists, with the
    input context `output` needs (of several outputs, the widest on each side)."""
    if isinstance(data, Chunks):
        return data
    if hasattr(data, "features") and hasattr(data, "labels"):
        features, targets = data.features, data.labels
    elif isinstance(data, tuple) and len(data) == 2:
        features, targets = data
    else:
        hint = " (read Kaldi archives with symnet.train.read_kaldi_data)" if isinstance(data, str) else ""
        raise ShapeError(f"cannot train on {type(data).__name__}: give a Dataset, Chunks or (features, targets)" + hint)
    names = (output,) if isinstance(output, str) else output
    # An output the network does not have is _check_data's error to report, by name.
    contexts = [network.context(name) for name in names if name == names[0] or name in network.structure.outputs]
    left, right = max(c[0] for c in contexts), max(c[1] for c in contexts)
    return make_chunks(features, targets, chunk=chunk, left=left, right=right)


def trains_with_ends(network: Any) -> bool:
    """Whether padding a chunk past its sequence's end (repeating the last frame) changes its outputs, and the
    request can take each sequence's end instead (`symnet.engine.buckets.padding_side`)."""
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
        kind: str | Objective,
        input: str,
        output: str,
        parallel: DataParallel | None = None,
        widths: Sequence[int] = (),
        rules: KaldiRules | None = None,
        frame_subsampling_factor: int = 1,
    ) -> None:
        self.optimizer = optimizer
        # A per-frame objective by its name (`objective()`), or a sequence Objective (`objective.loss` on
        # [batch, frames, dim] outputs with per-chunk supervision, made once per Chunks in `supervision`).
        resolved = get_objective(kind)
        self.sequence: Objective | None = resolved if isinstance(resolved, Objective) else None
        kind = resolved if isinstance(resolved, str) else resolved.name
        # Outputs at chunk frames 0, k, 2k, ...: the request asks for those output Indexes only (the planner
        # computes what they need: about half the time of all frames for a TDNN at k=3, docs/training.md).
        self.subsampling = int(frame_subsampling_factor)
        if self.sequence is not None and parallel is not None:
            raise TrainingError(
                f"the {self.sequence.name!r} objective does not train over a mesh yet; train it without mesh="
            )
        self._supervision: dict[int, tuple[Chunks, Any]] = {}
        # Kaldi's rules (`symnet.train.rules`): then `optimizer` is they, and every step also takes the
        # minibatch's number of sequences and the dropout schedule's proportions (`rules_args`).
        self.rules = rules
        self.kind, self.input, self.output = kind, input, output
        # Every output a step computes: the trained one first, then those the objective also reads (the
        # chain objective's `output-xent`), each given its derivative in one backward walk.
        self.outputs = (output, *(self.sequence.extra_outputs if self.sequence is not None else ()))
        self.batch_size = batch_size
        self.chunk, self.left, self.right = chunks.chunk, chunks.left, chunks.right
        # The chunk widths minibatches are cut down to (`fit`'s `chunk=(300, 200, 100)`): the largest is `chunk`.
        self.widths = _chunk_widths(chunks, widths)
        # With a mesh every device computes its own `batch_size / devices` chunks (symnet.train.parallel).
        self.parallel = parallel
        reduce = Reduction(parallel.axis if parallel is not None else None)
        # A network whose outputs depend on where a sequence ends (a backward recurrence, an IfDefined of a
        # later frame) is trained with each chunk's own end, not on repeats of its sequence's last frame.
        # With a mesh each device gets the masks of its own chunks' ends.
        self.sequence_ends = chunks.ends is not None and trains_with_ends(network)
        self.local_batch = parallel.local_batch if parallel is not None else batch_size
        self.network = network
        self.test_network = set_test_mode(network)
        self._computations: dict[tuple[int, bool], Any] = {}
        self.computation = self.computation_for(self.chunk)
        self.test_computation = self.computation_for(self.chunk, test=True)
        self.structure = network.structure

        def step(
            network: Network,
            opt_state: Any,
            x: jax.Array,
            targets: jax.Array,
            weights: jax.Array,
            key: jax.Array | None = None,
            ends: EndMasks | None = None,
            rules_args: Mapping[str, Any] | None = None,
        ) -> tuple[Network, Any, jax.Array, jax.Array, dict[str, jax.Array], jax.Array]:
            # With `natural_gradient.optimizer(...)` the optimiser state carries the preconditioners:
            # the NaturalGradient* components' backward reads and updates them (else a no-op context).
            # `key` feeds training-mode dropout (symnet.rng), forward and backward alike.
            # With a mesh: the loss and derivative scaled by this device's share of the frames, then summed.
            # Training-mode batch-norm takes the whole minibatch's statistics (over all devices).
            randomness = rng.randomness(reduce.key(key)) if key is not None else contextlib.nullcontext()
            computation = self.computation_for(self.width_of(x))
            proportions = rng.dropout_proportions(rules_args["dropout"]) if rules_args else contextlib.nullcontext()
            with (
                randomness,
                proportions,
                statistics_across(reduce.axis),
                natural_gradient.step_context(opt_state) as ng,
            ):
                tapes = computation.forward(network, {input: x}, ends)
                loss, correct, deltas = self.objective(
                    {name: tapes[name].value for name in self.outputs}, targets, weights
                )
                share = reduce.share(weights)
                grads = reduce.sum(backward([(tapes[name], d * share) for name, d in deltas.items()]))
                # Training-mode batch-norm accumulates its statistics: state, updated outside the gradients.
                state = dict(network.state)
                for name in self.outputs:
                    state.update(batchnorm_stats_updates(tapes[name]))
            loss, correct = reduce.sum((loss * share, correct))
            if rules is None:
                updates, opt_state = optimizer.update(grads, ng.carry(opt_state), network.params)
                params = optax.apply_updates(network.params, updates)
            else:
                # Kaldi's rules: the gradient is of the mean loss over the minibatch's frames; its l2 term
                # needs the number of sequences. Then batch-norm statistics and orthonormal constraints.
                assert rules_args is not None
                frames = jnp.maximum(reduce.sum(weights.sum()), 1.0)
                updates, opt_state = rules.update(
                    grads, ng.carry(opt_state), network.params, frames=frames, sequences=rules_args["sequences"]
                )
                params = optax.apply_updates(network.params, updates)
                params, state = rules.after_update(params, state, key)
            # Per parameter: are all its new values finite? (A huge step can overflow the
            # parameters while the loss, computed before the update, is still finite.)
            finite = {name: jnp.isfinite(value).all() for name, value in {**params, **state}.items()}
            new_network = Network.from_structure(network.structure, params, state, network.objectives)
            return new_network, opt_state, loss, correct, finite, optax.tree.norm(grads)

        # Validation runs in test mode (batch-norm's stored statistics, no dropout), as Kaldi's
        # nnet3-compute-prob does; the test-mode network has the same parameters.
        test_structure = self.test_network.structure

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
                values = self.computation_for(self.width_of(x), test=True)(test_network, {input: x}, ends)
            loss, correct, _ = self.objective({name: values[name] for name in self.outputs}, targets, weights)
            share = reduce.share(weights)
            return reduce.sum((loss * share, correct))

        if parallel is None:
            self.step = jax.jit(step, donate_argnums=(1,))
            self.evaluate = jax.jit(evaluate)
        elif rules is None:  # a mesh's jit takes exactly its arguments: the rules' only with rules

            def plain_step(*args: Any) -> Any:
                return step(*args)

            def plain_evaluate(*args: Any) -> Any:
                return evaluate(*args)

            self.step = parallel.jit(plain_step, "rrsssrs", donate=(1,))
            self.evaluate = parallel.jit(plain_evaluate, "rssss")
        else:
            self.step = parallel.jit(step, "rrsssrsr", donate=(1,))
            self.evaluate = parallel.jit(evaluate, "rssssr")

    def objective(
        self, values: Mapping[str, jax.Array], targets: Any, weights: jax.Array
    ) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
        """(loss, statistics, d loss / d each of `outputs`) of the output rows `values` by name
        (`[frames * batch, dim]`, t-major; with frame subsampling the rows of chunk frames 0, k, 2k, ... only,
        as are `targets` and `weights`).

        Statistics: the correct frames for a per-frame objective, a sequence objective's statistics (a dict
        with `correct` and `count`) for one."""
        if self.sequence is None:
            loss, correct, delta = objective(self.kind, values[self.output], targets, weights)
            return loss, correct, {self.output: delta}
        batch = self.local_batch

        def sequences(rows: jax.Array) -> jax.Array:  # [frames * batch, dim] -> [batch, frames, dim]
            return jnp.swapaxes(rows.reshape((rows.shape[0] // batch, batch) + rows.shape[1:]), 0, 1)

        def rows(x: jax.Array) -> jax.Array:
            return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])

        value = values[self.output]
        w = weights.reshape(value.shape[0] // batch, batch).T
        extra = {name: sequences(values[name]) for name in self.outputs[1:]}
        loss, stats, delta, extra_deltas = self.sequence.value_and_grad(sequences(value), w, targets, extra)
        return loss, stats, {self.output: rows(delta), **{name: rows(d) for name, d in extra_deltas.items()}}

    def request(self, batch: int, width: int | None = None) -> ComputationRequest:
        """The request of one minibatch of `batch` chunks of `width` output frames (`chunk` unless given)."""
        width = self.chunk if width is None else width
        return ComputationRequest(
            inputs={self.input: IndexSet.range(n=batch, t=(-self.left, width + self.right))},
            outputs={name: IndexSet.range(n=batch, t=range(0, width, self.subsampling)) for name in self.outputs},
            sequence_ends=self.sequence_ends,
        )

    def computation_for(self, width: int, test: bool = False) -> Any:
        """The compiled computation of one minibatch of chunks `width` frames wide (`test`: the test-mode network)."""
        key = (width, test)
        if key not in self._computations:
            network = self.test_network if test else self.network
            self._computations[key] = compile(network, self.request(self.local_batch, width))
        return self._computations[key]

    def width_of(self, x: Any) -> int:
        """The chunk width of a minibatch's features (`[(width + left + right) * local batch, dim]`)."""
        return int(x.shape[0]) // self.local_batch - self.left - self.right

    def batches(self, chunks: Chunks, order: np.ndarray) -> list[np.ndarray]:
        """Minibatch indexes in `order`, each of chunks of one width; `arrays` fills the last of each up to keep
        one shape.

        With one width they are consecutive slices of `order`. With several, each width's chunks (in `order`)
        are cut into minibatches, ordered by where their first chunk comes in `order`.
        """
        need = chunks.widths(self.widths)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        out = []
        for width in self.widths:
            members = order[need[order] == width]
            out += [members[start : start + self.batch_size] for start in range(0, len(members), self.batch_size)]
        return sorted(out, key=lambda idx: int(rank[idx[0]]))

    def width(self, chunks: Chunks, idx: np.ndarray) -> int:
        """The width minibatch `idx` is computed at: the widest its chunks need."""
        return int(chunks.widths(self.widths, idx).max())  # per step: this minibatch's chunks only

    def arrays(self, chunks: Chunks, idx: np.ndarray) -> tuple[jax.Array, ...]:
        """(features, targets, weights) of minibatch `idx`, each split over the devices with a mesh."""
        x, targets, weights = self.host_arrays(chunks, idx)
        if self.parallel is not None:
            return self.parallel.shard(x, targets, weights)
        return jnp.asarray(x), jax.tree.map(jnp.asarray, targets), jnp.asarray(weights)

    def supervision(self, chunks: Chunks) -> Any:
        """The sequence objective's per-chunk supervision of `chunks`, made once (from the frames at the full
        rate; with frame subsampling, the output frames' weights are those of every k-th frame)."""
        assert self.sequence is not None
        cached = self._supervision.get(id(chunks))
        if cached is None or cached[0] is not chunks:
            made = self.sequence.supervision(chunks.targets, chunks.weights, self.subsampling)
            cached = (chunks, {name: np.asarray(a) for name, a in made.items()})
            self._supervision[id(chunks)] = cached
        return cached[1]

    def ends(self, chunks: Chunks, idx: np.ndarray, test: bool = False) -> EndMasks | None:
        """The end masks of minibatch `idx` for `step` (`test`: for `evaluate`) where training takes sequence
        ends, else None; with a mesh, each device's own, split over the data axis."""
        if not self.sequence_ends:
            return None
        computation = self.computation_for(self.width(chunks, idx), test)
        assert chunks.ends is not None  # sequence_ends is set only for chunks that record their ends
        ends = chunks.ends[self.filled(idx)]
        if self.parallel is None:
            return computation.end_masks(ends)
        per_device = [computation.sequence_ends.masks(part) for part in np.split(ends, self.parallel.devices)]
        return EndMasks(self.parallel.stack(per_device))

    def filled(self, idx: np.ndarray) -> np.ndarray:
        """`idx` filled up to the batch size with repeats of its chunks (`host_arrays` gives them weight 0)."""
        pad = self.batch_size - len(idx)
        return np.concatenate([idx, np.resize(idx, pad)]) if pad else idx

    def host_arrays(self, chunks: Chunks, idx: np.ndarray) -> tuple[np.ndarray, Any, np.ndarray]:
        weights_scale = np.ones(self.batch_size, dtype=np.float32)
        weights_scale[len(idx) :] = 0.0
        width = self.width(chunks, idx)
        x, frame_targets, weights = chunks.minibatch(self.filled(idx), width)
        targets: Any = frame_targets
        weights = weights * np.tile(weights_scale, width)
        k = self.subsampling
        if k > 1:  # chunk frames 0, k, 2k, ... (rows t-major: every k-th block of `batch_size` rows)
            rows = (np.arange(width)[::k, None] * self.batch_size + np.arange(self.batch_size)).ravel()
            targets, weights = targets[rows], weights[rows]
        if self.sequence is not None:
            targets = {name: a[self.filled(idx)] for name, a in self.supervision(chunks).items()}
        return x, targets, weights

    def frames(self, chunks: Chunks, idx: np.ndarray) -> float:
        """The weight (frames) of minibatch `idx`: the sum of `arrays`' weights (every k-th frame's with frame
        subsampling)."""
        if self.subsampling > 1:
            return float(chunks.weights[idx][:, :: self.subsampling].sum(dtype=np.float32))
        return float(chunks.weights[idx].sum(dtype=np.float32))

    def counts(self, correct: Any, frames: float) -> tuple[float, float]:
        """(correct, count) of a step's or evaluation's statistics: a per-frame objective counts frames, a
        sequence objective its own (e.g. CTC's tokens)."""
        if isinstance(correct, Mapping):
            return float(correct["correct"]), float(correct["count"])
        return float(correct), frames

    def rules_args(self, idx: np.ndarray, fraction: float) -> dict[str, Any] | None:
        """What a step with Kaldi's rules takes besides the minibatch: its number of sequences (chunks; the
        filling ones do not count) and the dropout proportions after `fraction` of the run (None without
        rules)."""
        if self.rules is None:
            return None
        return {"sequences": self._replicated(float(len(idx))), "dropout": self.dropout(fraction)}

    def dropout(self, fraction: float) -> dict[str, Any]:
        """The dropout schedule's proportions after `fraction` of the run, as arrays for the jitted step."""
        if self.rules is None:
            return {}
        return {name: self._replicated(p) for name, p in self.rules.dropout(fraction).items()}

    def _replicated(self, value: float) -> jax.Array:
        array = jnp.asarray(value, jnp.float32)
        return self.parallel.replicate(array) if self.parallel is not None else array

    def score(self, network: Any, chunks: Chunks, fraction: float = 1.0) -> tuple[float, float]:
        """(loss, frame accuracy) over all of `chunks` (with a dropout schedule: its proportions after
        `fraction` of the run, which test-mode dropout scales by)."""
        total_loss, total_correct, total, total_count = 0.0, 0.0, 0.0, 0.0
        dropout = self.dropout(fraction)
        for idx in self.batches(chunks, np.arange(len(chunks))):
            x, targets, weights = self.arrays(chunks, idx)
            extra = (dropout,) if self.rules is not None else ()
            loss, correct = self.evaluate(network, x, targets, weights, self.ends(chunks, idx, test=True), *extra)
            frames = self.frames(chunks, idx)
            right, count = self.counts(correct, frames)
            total_loss += float(loss) * frames
            total_correct += right
            total += frames
            total_count += count
        return total_loss / max(total, 1.0), total_correct / max(total_count, 1.0)

    def first_non_finite(self, network: Any, chunks: Chunks, idx: np.ndarray, key: jax.Array | None = None) -> str:
        """The first node (operands before users) whose value is NaN or Inf, by walking the Tape.

        In the Tape's topological order the first such node has only finite operands:
        it is where the non-finite values start. With a mesh the whole minibatch runs here, on this
        process's default device (dropout masks then differ from the devices').
        """
        x = jnp.asarray(self.host_arrays(chunks, idx)[0])
        width = self.width(chunks, idx)
        computation = self.computation_for(width)
        ends = self.ends(chunks, idx)
        if self.parallel is not None:
            computation = compile(network, self.request(self.batch_size, width))
            network = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)), network)
            key = None if key is None else jnp.asarray(np.asarray(key))
            if ends is not None:
                assert chunks.ends is not None  # as in `ends`
                ends = computation.end_masks(chunks.ends[self.filled(idx)])
        with rng.randomness(key) if key is not None else contextlib.nullcontext():
            tape = computation.forward(network, {self.input: x}, ends)[self.output]
        for node in tape.nodes():
            value = np.asarray(node.value)
            bad = ~np.isfinite(value)
            if bad.any():
                first = value[bad].flat[0]
                return f"{describe(node.layer)} (its value has {int(bad.sum())} non-finite entries, first {first})"
        return "no node of the network (the objective itself)"


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


def fit(
    network: Any,
    train: Any,
    optimizer: optax.GradientTransformation,
    *,
    valid: Any = None,
    epochs: int = 1,
    batch_size: int = 64,
    chunk: int | Sequence[int] = 20,
    objective: str | Objective = "linear",
    seed: int = 0,
    checkpoint: str | None = None,
    checkpoint_every: int = 0,
    progress: bool = True,
    max_steps: int | None = None,
    input: str = "input",
    output: str = "output",
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_step: Callable[[StepStats], None] | None = None,
    run: Mapping[str, Any] | None = None,
    allow_changes: Sequence[str] = (),
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str = DATA_AXIS,
    rules: KaldiRules | bool | None = None,
    frame_subsampling_factor: int = 1,
) -> FitResult:
    """Train `network` on `train`; return the trained network and per-epoch statistics.

    `objective`: `"linear"` (cross-entropy of log-probability outputs and frame labels; `"xent"` is the same),
    `"quadratic"` (target vectors), `"ctc"` (`symnet.train.CTC()`: the frame labels of each chunk, repeats
    collapsed, as its label sequence; blank 0), or a `symnet.train.Objective`. `frame_subsampling_factor=k`
    (Kaldi's `frame-subsampling-factor`) trains the outputs at chunk frames 0, k, 2k, ... only (`chunk` must
    be a multiple of k; the targets stay at the full frame rate, e.g. `read_kaldi_data(...,
    frame_subsampling_factor=k)` expands a subsampled alignment).

    `train`/`valid`: a `symnet.datasets.Dataset`, `Chunks`, or `(features, targets)`.
    `chunk` is the output frames per example; with several widths (`chunk=(300, 200, 100)`, as
    Kaldi's `--frames-per-eg=300,200,100`) sequences are cut into chunks of the largest, and a chunk
    whose sequence ends sooner is computed at the smallest width that holds it (fewer padded frames;
    one compiled step per width).
    With `checkpoint` (a file path) the run saves there at the end of every epoch
    (and every `checkpoint_every` steps) and resumes from it if it exists. The
    checkpoint records what defines the run (batch size, chunk, seed, objective,
    a digest of the data, and `run`: the caller's own settings such as the
    optimiser and learning rate, which `fit` cannot see inside `optimizer`); a
    resume with other settings is a CheckpointError naming them, unless they are
    in `allow_changes` (see `symnet.train.resume`). While the run lasts the
    checkpoint is locked: a second run on it is refused.
    `max_steps` stops early (a simulated interruption, for tests and time limits).
    `on_epoch` is called with each epoch's `EpochStats`, `on_step` with each step's `StepStats` (a log of
    metrics: `symnet train --metrics`).
    With `mesh` (a `jax.sharding.Mesh` with an axis named `data_axis`) each minibatch is split
    over that axis's devices, `batch_size / devices` chunks each, and the parameters and
    optimiser state are replicated (`symnet.train.parallel`; docs/scaling.md). With several
    processes every process calls `fit` with the same arguments and data.
    Kaldi's training rules (`symnet.train.kaldi_rules`: learning-rate factors, l2, max-change,
    max-param-change, orthonormal constraints, batch-norm statistics, a dropout schedule) apply when
    `optimizer` is `kaldi_rules(...)`, and by default (`rules=None`) also when a component of the network
    carries such options (max-change, l2-regularize, learning-rate-factor, orthonormal-constraint): then
    `optimizer` is wrapped in them (`kaldi_rules(network, optimizer=optimizer)`). `rules=False` trains
    with `optimizer` alone; `rules=True` wraps it even when no component asks; `rules=kaldi_rules(...)`
    gives them.
    It first calls `symnet.tune_host_memory()`: glibc then keeps freed host memory, which makes CPU
    training steps faster (docs/performance.md; `SYMNET_HOST_MEMORY=system` leaves malloc as it is).
    """
    tune_host_memory()
    optimizer, chosen = _with_rules(network, optimizer, rules)
    _check_arguments(
        network,
        optimizer,
        batch_size=batch_size,
        chunk=chunk,
        epochs=epochs,
        checkpoint_every=checkpoint_every,
        seed=seed,
        objective=objective,
        checkpoint=checkpoint,
        max_steps=max_steps,
        input=input,
        output=output,
        on_epoch=on_epoch,
        on_step=on_step,
        run=run,
        allow_changes=allow_changes,
        frame_subsampling_factor=frame_subsampling_factor,
    )
    if not isinstance(data_axis, str):
        raise TrainingError(f"data_axis must be a mesh axis name, got {data_axis!r}")
    parallel = DataParallel(mesh, batch_size, data_axis) if mesh is not None else None
    widths = _widths(chunk)
    resolved = get_objective(objective)
    outputs = (output, *(resolved.extra_outputs if isinstance(resolved, Objective) else ()))
    train_chunks = as_chunks(train, network, widths[-1], outputs)
    valid_chunks = as_chunks(valid, network, widths[-1], outputs) if valid is not None else None
    _check_data(network, train_chunks, resolved, input, output)
    if valid_chunks is not None:
        _check_data(network, valid_chunks, resolved, input, output, "validation data", like=train_chunks)
    if isinstance(resolved, Chain):  # its denominator graph for the output (from a den.fst or the alignments)
        resolved = resolved.for_output(
            train_chunks.targets,
            train_chunks.weights,
            _output_dim(network, train_chunks, input, output),
            int(frame_subsampling_factor),
        )
    used = _chunk_widths(train_chunks, widths)  # the chunks' own width, and those below it of `chunk`
    if frame_subsampling_factor > 1 and any(w % frame_subsampling_factor for w in used):
        raise TrainingError(
            f"frame_subsampling_factor={frame_subsampling_factor}: the chunk widths {used} must be multiples of "
            "it (Kaldi's frames-per-eg are), so that every chunk's outputs are at frames 0, k, 2k, ... of its "
            "sequence"
        )
    with ckpt.lock(checkpoint) if checkpoint else contextlib.nullcontext():
        return _fit(
            network,
            optimizer,
            chosen,
            train_chunks,
            valid_chunks,
            data=(train, valid),
            epochs=epochs,
            batch_size=batch_size,
            chunk=widths,
            objective=resolved,
            seed=seed,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
            progress=progress,
            max_steps=max_steps,
            input=input,
            output=output,
            on_epoch=on_epoch,
            on_step=on_step,
            run=run,
            allow_changes=allow_changes,
            parallel=parallel,
            frame_subsampling_factor=int(frame_subsampling_factor),
        )


def _with_rules(network: Any, optimizer: Any, rules: Any) -> tuple[Any, KaldiRules | None]:
    """`fit`'s optimiser and Kaldi's rules (None: none) for its `optimizer` and `rules` arguments."""
    if not isinstance(network, Network):
        return optimizer, None  # _check_arguments says what is wrong
    if isinstance(rules, KaldiRules):
        if isinstance(optimizer, KaldiRules) and optimizer is not rules:
            raise TrainingError("the optimizer is kaldi_rules(...) and so is rules=: give them once")
        if isinstance(optimizer, KaldiRules):
            return rules, rules
        raise TrainingError(
            "rules=kaldi_rules(...) is the whole optimiser: pass it as the optimizer (fit(net, data, "
            "kaldi_rules(net, ...))), or wrap yours with kaldi_rules(net, optimizer=...)"
        )
    if rules is not None and not isinstance(rules, bool):
        raise TrainingError(f"rules must be None, True, False or kaldi_rules(...), got {rules!r:.60}")
    if isinstance(optimizer, KaldiRules):
        if rules is False:
            raise TrainingError(
                "the optimizer is kaldi_rules(...), but rules=False: pass a plain optax optimizer to train without "
                "Kaldi's rules"
            )
        return optimizer, optimizer
    if rules is False or not (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        return optimizer, None
    if rules is None and not carries_kaldi_rules(network):
        return optimizer, None
    wrapped = kaldi_rules(network, optimizer=optimizer)
    return wrapped, wrapped


def with_dropout(network: Any, proportions: Mapping[str, float]) -> Any:
    """`network` with these dropout proportions (component name -> proportion) in its dropout components."""
    if not proportions:
        return network

    def set_proportion(layer: Any) -> Any:
        if isinstance(layer, DROPOUT_TYPES) and layer.name in proportions:
            return evolve(layer, dropout_proportion=float(proportions[layer.name]))
        return layer

    return network.rewrite(set_proportion)


def _check_arguments(network: Any, optimizer: Any, **args: Any) -> None:
    """TrainingError for arguments of the wrong type or range (before any work is done)."""
    if not isinstance(network, Network):
        raise TrainingError(f"fit trains a symnet Network, got {type(network).__name__}")
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise TrainingError(
            f"optimizer must be an optax GradientTransformation (e.g. optax.adam(1e-3)), got {optimizer!r:.60}"
        )
    for name, least in (("batch_size", 1), ("epochs", 0), ("checkpoint_every", 0), ("seed", 0)):
        value = args[name]
        if not _integer(value, least):
            raise TrainingError(f"{name} must be an integer >= {least}, got {value!r}")
    _widths(args["chunk"])
    max_steps = args["max_steps"]
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))):
        raise TrainingError(f"max_steps must be an integer or None, got {max_steps!r}")
    for name in ("input", "output"):
        if not isinstance(args[name], str):
            raise TrainingError(f"{name} must be a string, got {args[name]!r}")
    if not isinstance(args["objective"], (str, Objective)):
        raise TrainingError(
            f"objective must be a string (one of {OBJECTIVE_NAMES}) or a symnet.train.Objective, got "
            f"{args['objective']!r:.60}"
        )
    get_objective(args["objective"])  # an unknown name refused now
    if not _integer(args["frame_subsampling_factor"], 1):
        raise TrainingError(
            f"frame_subsampling_factor must be an integer >= 1, got {args['frame_subsampling_factor']!r}"
        )
    checkpoint = args["checkpoint"]
    if checkpoint is not None:
        if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
            raise TrainingError(f"checkpoint must be a file path, got {checkpoint!r}")
        check_writable(checkpoint)  # a typo found now, not after the run
    for name in ("on_epoch", "on_step"):
        if args[name] is not None and not callable(args[name]):
            raise TrainingError(f"{name} must be a function or None, got {args[name]!r}")
    if args["run"] is not None and not isinstance(args["run"], Mapping):
        raise TrainingError(f"run must be a mapping of setting names to values, got {args['run']!r:.60}")
    changes = args["allow_changes"]
    if isinstance(changes, str) or not all(isinstance(c, str) for c in changes):
        raise TrainingError(f"allow_changes must be a sequence of field names, got {changes!r}")


def steps_per_epoch(
    network: Any, data: Any, *, batch_size: int = 64, chunk: int | Sequence[int] = 20, output: str = "output"
) -> int:
    """The minibatches `fit(network, data, batch_size=..., chunk=...)` makes of `data` in an epoch (with or
    without a mesh): the length of an epoch for a learning-rate schedule."""
    if not _integer(batch_size, 1):
        raise TrainingError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    widths = _widths(chunk)
    chunks = as_chunks(data, network, widths[-1], output)
    counts = np.unique(chunks.widths(_chunk_widths(chunks, widths)), return_counts=True)[1]
    return int(sum(-(-int(n) // batch_size) for n in counts))


def _chunk_widths(chunks: Chunks, widths: Sequence[int]) -> tuple[int, ...]:
    """The widths minibatches of `chunks` are cut down to: those of `widths` below `chunks.chunk`, and it."""
    return tuple(sorted({int(w) for w in widths if w < chunks.chunk} | {chunks.chunk}))


def _integer(value: Any, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and bool(value >= least)


def _widths(chunk: int | Sequence[int]) -> tuple[int, ...]:
    """`fit`'s `chunk` as sorted distinct widths (TrainingError unless integers >= 1)."""
    if not (_integer(chunk, 1) or (isinstance(chunk, Sequence) and chunk and all(_integer(w, 1) for w in chunk))):
        raise TrainingError(f"chunk must be an integer >= 1 or a sequence of them (chunk widths), got {chunk!r}")
    return tuple(sorted({int(w) for w in chunk})) if isinstance(chunk, Sequence) else (int(chunk),)


def _fit(
    network: Any,
    optimizer: Any,
    rules: KaldiRules | None,
    train_chunks: Chunks,
    valid_chunks: Chunks | None,
    *,
    data: tuple,
    epochs: int,
    batch_size: int,
    chunk: tuple[int, ...],
    objective: str | Objective,
    seed: int,
    checkpoint: str | None,
    checkpoint_every: int,
    progress: bool,
    max_steps: int | None,
    input: str,
    output: str,
    on_epoch: Callable[[EpochStats], None] | None,
    on_step: Callable[[StepStats], None] | None,
    run: Mapping[str, Any] | None,
    allow_changes: Sequence[str],
    parallel: DataParallel | None,
    frame_subsampling_factor: int = 1,
) -> FitResult:
    trainer = Trainer(
        network,
        optimizer,
        batch_size=batch_size,
        chunks=train_chunks,
        kind=objective,
        input=input,
        output=output,
        parallel=parallel,
        widths=chunk,
        rules=rules,
        frame_subsampling_factor=frame_subsampling_factor,
    )
    if rules is not None and rules.settings["params"] != frozenset(network.params):
        raise TrainingError("kaldi_rules(...) was made for a network with other parameters than this one")
    opt_state = optimizer.init(network.params)
    position = ckpt.Position()
    history: list[EpochStats] = []
    record = resume.record(
        train=data[0],
        valid=data[1],
        batch_size=batch_size,
        chunk=chunk[0] if len(chunk) == 1 else list(chunk),
        seed=seed,
        objective=objective if isinstance(objective, str) else objective.describe(),
        input=input,
        output=output,
        extra=run,
    )
    if rules is not None:
        record["kaldi_rules"] = rules.describe()
    if frame_subsampling_factor != 1:
        record["frame_subsampling_factor"] = frame_subsampling_factor
    batches = len(trainer.batches(train_chunks, np.arange(len(train_chunks))))
    sums = None
    if checkpoint and os.path.exists(checkpoint):
        network, opt_state, position, extra, saved = ckpt.load_run(checkpoint, network, opt_state)
        if saved is None:
            warnings.warn(
                f"{checkpoint} is a version-1 checkpoint: it does not record its run's settings, so "
                "a resume with other settings cannot be detected",
                stacklevel=3,
            )
        resume.check(checkpoint, saved, record, position, allow_changes)
        saved_history, sums = resume.check_extra(checkpoint, extra, position, batches)
        history = [EpochStats(**h) for h in saved_history]
    if parallel is not None:
        parallel.check_optimizer_state(opt_state)
        network, opt_state = parallel.replicate(network), parallel.replicate(opt_state)
    bar = _progress(progress, epochs, batches)
    try:
        return _train(
            trainer,
            network,
            opt_state,
            position,
            history,
            train_chunks,
            valid_chunks,
            bar,
            epochs=epochs,
            seed=seed,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
            max_steps=max_steps,
            on_epoch=on_epoch,
            on_step=on_step,
            sums=sums,
            run=record,
        )
    finally:
        bar.close()


def _train(
    trainer: Trainer,
    network: Any,
    opt_state: Any,
    position: ckpt.Position,
    history: list[EpochStats],
    train_chunks: Chunks,
    valid_chunks: Chunks | None,
    bar: _progress,
    *,
    epochs: int,
    seed: int,
    checkpoint: str | None,
    checkpoint_every: int,
    max_steps: int | None,
    on_epoch: Callable[[EpochStats], None] | None,
    on_step: Callable[[StepStats], None] | None,
    sums: Any,
    run: Mapping[str, Any] | None,
) -> FitResult:
    step = position.step
    base_key = jax.random.PRNGKey(seed)
    # A dropout schedule follows the fraction of the run's minibatches done before each step.
    total_steps = max(epochs * len(trainer.batches(train_chunks, np.arange(len(train_chunks)))), 1)

    def done(network: Any, steps: int) -> FitResult:
        # With a dropout schedule, the network keeps the proportions its last step trained with (test-mode
        # dropout scales by them), as Kaldi's model keeps the last proportions its scripts set.
        if trainer.rules is not None and trainer.rules.schedule is not None:
            network = with_dropout(network, trainer.rules.dropout(max(steps - 1, 0) / total_steps))
        return FitResult(network, tuple(history), opt_state)

    for epoch in range(position.epoch, epochs):
        if position.batch == 0 or epoch != position.epoch:
            network = zero_batchnorm_stats(network)  # as Kaldi's ZeroComponentStats at each training job
            if trainer.parallel is not None:
                network = trainer.parallel.replicate(network)
        order = np.random.default_rng([seed, epoch]).permutation(len(train_chunks))
        batches = trainer.batches(train_chunks, order)
        start_batch = position.batch if epoch == position.epoch else 0
        loss_sum = correct_sum = frames_sum = 0.0
        count_sum: float | None = None if trainer.sequence is None else 0.0  # a sequence objective's count
        if start_batch and sums is not None:  # resumed mid-epoch: the statistics of the steps before
            loss_sum, correct_sum, frames_sum = (float(v) for v in sums[:3])
            if count_sum is not None:
                count_sum = float(sums[3]) if len(sums) > 3 else frames_sum
        started = last = time.perf_counter()
        for b in range(start_batch, len(batches)):
            if max_steps is not None and step >= max_steps:
                return done(network, step)
            x, targets, weights = trainer.arrays(train_chunks, batches[b])
            key = jax.random.fold_in(base_key, step)  # this step's randomness (dropout masks)
            if trainer.parallel is not None:
                key = trainer.parallel.replicate(key)
            ends = trainer.ends(train_chunks, batches[b])
            rules_args = trainer.rules_args(batches[b], step / total_steps)
            extra = (rules_args,) if rules_args is not None else ()
            new_network, opt_state, loss, correct, finite, grad_norm = trainer.step(
                network, opt_state, x, targets, weights, key, ends, *extra
            )
            loss_value = float(loss)
            if not np.isfinite(loss_value):
                culprit = trainer.first_non_finite(network, train_chunks, batches[b], key)
                raise TrainingError(
                    f"the loss is {loss_value} at step {step + 1} (epoch {epoch}, minibatch {b}); "
                    f"first non-finite value: {culprit}. {_kept(checkpoint)}"
                )
            overflowed = [name for name, ok in finite.items() if not bool(ok)]
            if overflowed:
                raise TrainingError(
                    f"the update at step {step + 1} (epoch {epoch}, minibatch {b}) made parameter(s) "
                    f"{overflowed} NaN or Inf (the loss before it was {loss_value}): the learning rate is too "
                    f"large or the gradients explode. {_kept(checkpoint)}"
                )
            network = new_network
            step += 1
            frames = trainer.frames(train_chunks, batches[b])
            right, count = trainer.counts(correct, frames)
            loss_sum += loss_value * frames
            correct_sum += right
            frames_sum += frames
            if count_sum is not None:
                count_sum += count
            now = time.perf_counter()
            if on_step is not None:
                accuracy = right / max(count, 1e-9)
                on_step(StepStats(epoch, step, loss_value, accuracy, float(grad_norm), frames, now - last))
            last = now
            rate = frames_sum / max(now - started, 1e-9)
            bar.update(loss_sum / frames_sum, correct_sum / max(count_sum or frames_sum, 1e-9), rate)
            if checkpoint and checkpoint_every and step % checkpoint_every == 0:
                ckpt.save(
                    checkpoint,
                    network,
                    opt_state,
                    ckpt.Position(step, epoch, b + 1),
                    {
                        "history": [attrs.asdict(h) for h in history],
                        "sums": [loss_sum, correct_sum, frames_sum] + ([count_sum] if count_sum is not None else []),
                    },
                    run=run,
                )
        valid_loss = valid_acc = None
        if valid_chunks is not None:
            valid_loss, valid_acc = trainer.score(network, valid_chunks, max(step - 1, 0) / total_steps)
        stats = EpochStats(
            epoch,
            step,
            loss_sum / max(frames_sum, 1),
            correct_sum / max(count_sum if count_sum is not None else frames_sum, 1),
            valid_loss,
            valid_acc,
            frames_sum / max(time.perf_counter() - started, 1e-9),
        )
        history.append(stats)
        bar.epoch_done(stats)
        if on_epoch is not None:
            on_epoch(stats)
        if checkpoint:
            ckpt.save(
                checkpoint,
                network,
                opt_state,
                ckpt.Position(step, epoch + 1, 0),
                {"history": [attrs.asdict(h) for h in history]},
                run=run,
            )
    return done(network, step)


def _kept(checkpoint: str | None) -> str:
    if checkpoint and os.path.exists(checkpoint):
        return f"The last good checkpoint {checkpoint} is kept."
    return "Nothing was saved."


def zero_batchnorm_stats(network: Any) -> Any:
    """`network` with the stored statistics of its training-mode BatchNormComponents set to zero."""
    from ..components import BatchNormComponent

    names = []
    for layer in walk([layer for _, layer in network.structure.outputs]):
        if isinstance(layer, BatchNormComponent) and not layer.test_mode:
            names += [getattr(layer, field).name for field in ("count", "stats_mean", "stats_var")]
    if not names:
        return network
    values = network.values
    return network.assign({name: jnp.zeros_like(values[name]) for name in names if name in values})


def _check_data(
    network: Any,
    chunks: Chunks,
    kind: str | Objective,
    input: str,
    output: str,
    what: str = "training data",
    like: Chunks | None = None,
) -> None:
    from ..engine.graph import Graph

    kind = get_objective(kind)
    graph = Graph(dict(network.structure.outputs))
    if output not in graph.outputs:
        raise TrainingError(f"the network has no output {output!r}; it has {list(graph.outputs)}")
    if input not in graph.inputs:
        raise TrainingError(f"the network has no input {input!r}; it has {list(graph.inputs)}")
    if like is not None and (chunks.chunk, chunks.left, chunks.right) != (like.chunk, like.left, like.right):
        raise ShapeError(
            f"{what}: chunks of {chunks.chunk} frames with context ({chunks.left}, {chunks.right}), "
            f"but the training chunks have {like.chunk} frames with context ({like.left}, {like.right})"
        )
    _check_context(network, chunks, output, what)
    dim = graph.input_dims.get(input)
    if dim is not None and chunks.features.shape[-1] != dim:
        raise ShapeError(
            f"{what}: the features have dim {chunks.features.shape[-1]}, but input {input!r} has dim {dim}"
        )
    out_dim = _output_dim(network, chunks, input, output)
    targets = chunks.targets
    if isinstance(kind, Objective):
        kind.check(targets, out_dim, what, output)
        for extra in kind.extra_outputs:
            if extra not in graph.outputs:
                raise TrainingError(
                    f"the {kind.name!r} objective reads output {extra!r}, which the network does not have; "
                    f"it has {list(graph.outputs)}"
                )
            _check_context(network, chunks, extra, what)
            if (extra_dim := _output_dim(network, chunks, input, extra)) != out_dim:
                raise ShapeError(
                    f"the {kind.name!r} objective reads output {extra!r} of dim {extra_dim} beside output "
                    f"{output!r} of dim {out_dim}: they must have one dim (one value per pdf)"
                )
    elif kind == "linear":
        check_labels("linear", targets, out_dim, what, output)
    else:  # quadratic
        if targets.ndim != 3 or targets.shape[-1] != out_dim:
            raise ShapeError(
                f"{what}: the 'quadratic' objective needs a target vector of dim {out_dim} "
                f"(output {output!r}) per frame, got targets of shape {targets.shape[2:] or '()'} "
                "per frame"
            )
        if not np.issubdtype(targets.dtype, np.number) or np.issubdtype(targets.dtype, np.complexfloating):
            raise ShapeError(f"{what}: the 'quadratic' objective needs real-valued targets, got {targets.dtype}")
        finite = np.isfinite(targets)
        if not finite.all():
            raise ShapeError(f"{what}: the targets contain {targets[~finite][0]}")


def _check_context(network: Any, chunks: Chunks, output: str, what: str) -> None:
    """ShapeError unless the chunks have the input context `output` needs."""
    left, right = network.context(output)
    if chunks.left < left or chunks.right < right:
        raise ShapeError(
            f"{what}: chunks with context ({chunks.left}, {chunks.right}), but output {output!r} needs "
            f"({left}, {right}) frames of input context"
        )


def _output_dim(network: Any, chunks: Chunks, input: str, output: str) -> int:
    network = set_test_mode(network)  # the same dims, and no randomness needed
    request = ComputationRequest(
        inputs={input: IndexSet.range(n=1, t=(-chunks.left, 1 + chunks.right))},
        outputs={output: IndexSet.range(n=1, t=1)},
    )
    computation = compile(network, request)
    shape = jax.eval_shape(
        lambda n, x: computation(n, {input: x})[output],
        network,
        jax.ShapeDtypeStruct((1 + chunks.left + chunks.right, chunks.features.shape[-1]), jnp.float32),
    )
    return int(shape.shape[-1])


class _progress:
    """A tqdm bar with loss, accuracy and frames/second (silent when disabled)."""

    def __init__(self, enabled: bool, epochs: int, per_epoch: int):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=epochs * per_epoch, unit="step", file=sys.stderr, dynamic_ncols=True)

    def update(self, loss: float, accuracy: float, rate: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}", fps=f"{rate:,.0f}", refresh=False)
            self.bar.update(1)

    def epoch_done(self, stats: EpochStats) -> None:
        if self.bar is not None and stats.valid_accuracy is not None:
            self.bar.write(
                f"epoch {stats.epoch}: train loss {stats.train_loss:.3f} acc {stats.train_accuracy:.3f}, "
                f"valid loss {stats.valid_loss:.3f} acc {stats.valid_accuracy:.3f}"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
