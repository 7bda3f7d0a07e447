"""`fit`: train a network on sequences with an optax optimiser, one jitted step per minibatch.

Data is cut into fixed-size chunks with the network's context
(`symnet.train.examples`), so every minibatch is one regular request: one
compiled computation, slice-only row movement. Each step runs forward, the
objective, `tape.backward` and the optax update in one `jax.jit`. Runs are
deterministic given the seed, and a run resumed from a checkpoint continues
bit-identically.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Sequence

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..engine import ComputationRequest, compile
from ..errors import ShapeError, SymnetError
from ..index import IndexSet
from . import checkpoint as ckpt
from .examples import Chunks, make_chunks
from .objectives import objective


class TrainingError(SymnetError, RuntimeError):
    """Training cannot go on: a diverging loss, data the network cannot take."""


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
class FitResult:
    network: Any
    history: tuple[EpochStats, ...]
    opt_state: Any


def as_chunks(data: Any, network: Any, chunk: int, output: str) -> Chunks:
    """Chunks from a `Chunks`, a `symnet.datasets.Dataset`, or a `(features, targets)` pair of lists."""
    if isinstance(data, Chunks):
        return data
    if hasattr(data, "features") and hasattr(data, "labels"):
        features, targets = data.features, data.labels
    elif isinstance(data, tuple) and len(data) == 2:
        features, targets = data
    else:
        raise ShapeError(f"cannot train on {type(data).__name__}: give a Dataset, Chunks or (features, targets)")
    left, right = network.context(output)
    return make_chunks(features, targets, chunk=chunk, left=left, right=right)


class Trainer:
    """The compiled pieces of one training setup: request, step, evaluation."""

    def __init__(self, network: Any, optimizer: optax.GradientTransformation, *, batch_size: int,
                 chunks: Chunks, kind: str, input: str, output: str):
        self.optimizer = optimizer
        self.kind, self.input, self.output = kind, input, output
        self.batch_size = batch_size
        self.chunk, left, right = chunks.chunk, chunks.left, chunks.right
        request = ComputationRequest(
            inputs={input: IndexSet.range(n=batch_size, t=(-left, self.chunk + right))},
            outputs={output: IndexSet.range(n=batch_size, t=self.chunk)},
        )
        self.computation = compile(network, request)
        self.structure = network.structure

        def step(network, opt_state, x, targets, weights):
            tape = self.computation.forward(network, {input: x})[output]
            loss, correct, delta = objective(kind, tape.value, targets, weights)
            grads = tape.backward(delta)
            updates, opt_state = optimizer.update(grads, opt_state, network.params)
            return network.replace(params=optax.apply_updates(network.params, updates)), opt_state, loss, correct

        def evaluate(network, x, targets, weights):
            value = self.computation(network, {input: x})[output]
            loss, correct, _ = objective(kind, value, targets, weights)
            return loss, correct

        self.step = jax.jit(step, donate_argnums=(1,))
        self.evaluate = jax.jit(evaluate)

    def batches(self, chunks: Chunks, order: np.ndarray) -> list[np.ndarray]:
        """Minibatch indexes in `order`; `arrays` fills the last one up to keep one shape."""
        out = []
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out.append(idx)
        return out

    def arrays(self, chunks: Chunks, idx: np.ndarray):
        pad = self.batch_size - len(idx)
        weights_scale = np.ones(self.batch_size, dtype=np.float32)
        if pad:
            weights_scale[len(idx):] = 0.0
            idx = np.concatenate([idx, np.resize(idx, pad)])
        x, targets, weights = chunks.minibatch(idx)
        weights = weights * np.tile(weights_scale, self.chunk)
        return jnp.asarray(x), jnp.asarray(targets), jnp.asarray(weights)

    def score(self, network: Any, chunks: Chunks) -> tuple[float, float]:
        """(loss, frame accuracy) over all of `chunks`."""
        total_loss, total_correct, total = 0.0, 0.0, 0.0
        for idx in self.batches(chunks, np.arange(len(chunks))):
            x, targets, weights = self.arrays(chunks, idx)
            loss, correct = self.evaluate(network, x, targets, weights)
            frames = float(weights.sum())
            total_loss += float(loss) * frames
            total_correct += float(correct)
            total += frames
        return total_loss / max(total, 1.0), total_correct / max(total, 1.0)

    def first_non_finite(self, network: Any, x: jax.Array) -> str:
        """The first node (operands before users) whose value is NaN or Inf, by walking the Tape."""
        tape = self.computation.forward(network, {self.input: x})[self.output]
        for node in tape.nodes():
            if not bool(jnp.isfinite(node.value).all()):
                layer = node.layer
                name = getattr(layer, "name", None)
                label = f"node {name!r}" if isinstance(name, str) else repr(layer)[:80]
                return f"{label} (built at {layer.where})"
        return "no node (the objective itself)"


def fit(
    network: Any,
    train: Any,
    optimizer: optax.GradientTransformation,
    *,
    valid: Any = None,
    epochs: int = 1,
    batch_size: int = 64,
    chunk: int = 20,
    objective: str = "linear",
    seed: int = 0,
    checkpoint: str | None = None,
    checkpoint_every: int = 0,
    progress: bool = True,
    max_steps: int | None = None,
    input: str = "input",
    output: str = "output",
    on_epoch: Callable[[EpochStats], None] | None = None,
) -> FitResult:
    """Train `network` on `train`; return the trained network and per-epoch statistics.

    `train`/`valid`: a `symnet.datasets.Dataset`, `Chunks`, or `(features, targets)`.
    With `checkpoint` (a file path) the run saves there at the end of every epoch
    (and every `checkpoint_every` steps) and resumes from it if it exists.
    `max_steps` stops early (a simulated interruption, for tests and time limits).
    """
    train_chunks = as_chunks(train, network, chunk, output)
    valid_chunks = as_chunks(valid, network, chunk, output) if valid is not None else None
    _check_data(network, train_chunks, objective, input, output)
    trainer = Trainer(network, optimizer, batch_size=batch_size, chunks=train_chunks,
                      kind=objective, input=input, output=output)
    opt_state = optimizer.init(network.params)
    position = ckpt.Position()
    history: list[EpochStats] = []
    if checkpoint and os.path.exists(checkpoint):
        network, opt_state, position, extra = ckpt.load(checkpoint, network, opt_state)
        history = [EpochStats(**h) for h in extra.get("history", [])]
    bar = _progress(progress, epochs, len(trainer.batches(train_chunks, np.arange(len(train_chunks)))))
    step = position.step
    for epoch in range(position.epoch, epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(train_chunks))
        batches = trainer.batches(train_chunks, order)
        start_batch = position.batch if epoch == position.epoch else 0
        loss_sum = correct_sum = frames_sum = 0.0
        started = time.perf_counter()
        for b in range(start_batch, len(batches)):
            if max_steps is not None and step >= max_steps:
                bar.close()
                return FitResult(network, tuple(history), opt_state)
            x, targets, weights = trainer.arrays(train_chunks, batches[b])
            new_network, opt_state, loss, correct = trainer.step(network, opt_state, x, targets, weights)
            loss_value = float(loss)
            if not np.isfinite(loss_value):
                culprit = trainer.first_non_finite(network, x)
                raise TrainingError(
                    f"the loss is {loss_value} at step {step + 1} (epoch {epoch}, minibatch {b}); "
                    f"first non-finite value: {culprit}. The last good checkpoint is kept."
                )
            network = new_network
            step += 1
            frames = float(weights.sum())
            loss_sum += loss_value * frames
            correct_sum += float(correct)
            frames_sum += frames
            rate = frames_sum / max(time.perf_counter() - started, 1e-9)
            bar.update(loss_sum / frames_sum, correct_sum / frames_sum, rate)
            if checkpoint and checkpoint_every and step % checkpoint_every == 0:
                ckpt.save(checkpoint, network, opt_state, ckpt.Position(step, epoch, b + 1),
                          {"history": [attrs.asdict(h) for h in history]})
        valid_loss = valid_acc = None
        if valid_chunks is not None:
            valid_loss, valid_acc = trainer.score(network, valid_chunks)
        stats = EpochStats(epoch, step, loss_sum / max(frames_sum, 1), correct_sum / max(frames_sum, 1),
                           valid_loss, valid_acc, frames_sum / max(time.perf_counter() - started, 1e-9))
        history.append(stats)
        bar.epoch_done(stats)
        if on_epoch is not None:
            on_epoch(stats)
        if checkpoint:
            ckpt.save(checkpoint, network, opt_state, ckpt.Position(step, epoch + 1, 0),
                      {"history": [attrs.asdict(h) for h in history]})
    bar.close()
    return FitResult(network, tuple(history), opt_state)


def _check_data(network: Any, chunks: Chunks, kind: str, input: str, output: str) -> None:
    from ..engine.graph import Graph

    graph = Graph(dict(network.structure.outputs))
    if output not in graph.outputs:
        raise TrainingError(f"the network has no output {output!r}; it has {list(graph.outputs)}")
    if input not in graph.inputs:
        raise TrainingError(f"the network has no input {input!r}; it has {list(graph.inputs)}")
    dim = graph.input_dims.get(input)
    if dim is not None and chunks.features.shape[-1] != dim:
        raise ShapeError(f"the features have dim {chunks.features.shape[-1]}, but input {input!r} has dim {dim}")
    if kind == "linear":
        out_dim = _output_dim(network, chunks, input, output)
        labels = chunks.targets
        if not np.issubdtype(labels.dtype, np.integer):
            raise ShapeError(f"the 'linear' objective needs integer labels, got {labels.dtype}")
        bad = (labels < 0) | (labels >= out_dim)
        if bad.any():
            raise ShapeError(
                f"label {int(labels[bad][0])} is out of range for output {output!r} of dim {out_dim}"
            )


def _output_dim(network: Any, chunks: Chunks, input: str, output: str) -> int:
    request = ComputationRequest(
        inputs={input: IndexSet.range(n=1, t=(-chunks.left, 1 + chunks.right))},
        outputs={output: IndexSet.range(n=1, t=1)},
    )
    computation = compile(network, request)
    shape = jax.eval_shape(
        lambda n, x: computation(n, {input: x})[output],
        network, jax.ShapeDtypeStruct((1 + chunks.left + chunks.right, chunks.features.shape[-1]), jnp.float32),
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
            self.bar.write(f"epoch {stats.epoch}: train loss {stats.train_loss:.3f} acc {stats.train_accuracy:.3f}, "
                           f"valid loss {stats.valid_loss:.3f} acc {stats.valid_accuracy:.3f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
