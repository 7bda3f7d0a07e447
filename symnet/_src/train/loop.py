"""`fit`: train a network on sequences with an optax optimiser, one jitted step per minibatch.

Data is cut into fixed-size chunks with the network's context
(`symnet._src.train.examples`), so every minibatch is one regular request: one
compiled computation, slice-only row movement (with several chunk widths, one
per width: a chunk whose sequence ends early is computed at the smallest width
that holds it). Each step (`symnet._src.train.trainer`) runs forward, the
objective, `tape.backward` and the optax update in one `jax.jit`. The loop
reads a step's loss and checks only after it has dispatched the next step, so
the host's work on a minibatch overlaps the device's on the one before (within
an epoch, and up to each checkpoint). Runs are deterministic given the seed,
and a run resumed from a checkpoint continues bit-identically. The run's
settings are one `FitOptions`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..base.atomic import check_writable
from ..base.errors import TrainingError
from ..base.host_memory import tune_host_memory
from ..core.layer import evolve
from ..core.walk import walk
from ..network import Network
from . import checkpoint as ckpt
from . import loss_scale, resume
from .blas_threads import one_blas_thread
from .component_rules import carries_kaldi_rules
from .dropout_schedule import DROPOUT_TYPES
from .examples import Chunks
from .fit_data import as_chunks, check_data, output_dim, used_widths
from .minibatches import MemoryBatches, StreamBatches, count_by_width
from .objectives import Chain, Objective
from .options import FitOptions, chunk_widths
from .parallel import DataParallel
from .rules import KaldiRules, kaldi_rules, zero_repair_statistics
from .setups import trainer_for
from .streams import Corpus
from .trainer import Trainer

__all__ = ["EpochStats", "fit", "FitResult", "steps_per_epoch", "StepStats", "with_dropout", "zero_batchnorm_stats"]


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
    on, the seconds since the previous step's results were read (compilation included; the loop reads a step's
    results once the next step is dispatched), and of those the seconds it waited for its minibatch (a `Corpus`'s
    reading threads; 0 for data in memory)."""

    epoch: int
    step: int
    loss: float
    accuracy: float
    grad_norm: float
    frames: float
    seconds: float
    waited: float = 0.0


@attrs.frozen
class FitResult:
    """What `fit` returns: the trained network, per-epoch statistics, the optimiser state, and the settings."""

    network: Any
    history: tuple[EpochStats, ...]
    opt_state: Any
    options: FitOptions = attrs.field(factory=FitOptions)


def fit(
    network: Network,
    train: Any,
    optimizer: optax.GradientTransformation,
    options: FitOptions | None = None,
    *,
    valid: Any = None,
    **settings: Any,
) -> FitResult:
    """Train `network` on `train`; return the trained network and per-epoch statistics.

    `train`/`valid`: a `symnet.datasets.Dataset`, `Chunks`, or `(features, targets)`.
    The run's settings are a `FitOptions` (`options`), or its fields as keywords
    (`fit(net, data, opt, epochs=3)` is `fit(net, data, opt, FitOptions(epochs=3))`; keywords beside
    `options` replace its fields). See `FitOptions` for each setting.

    With `options.checkpoint` the run saves there at the end of every epoch (and every
    `checkpoint_every` steps) and resumes from it if it exists. The checkpoint records what defines
    the run (batch size, chunk, seed, objective, a digest of the data, and `run`: the caller's own
    settings such as the optimiser and learning rate, which `fit` cannot see inside `optimizer`); a
    resume with other settings is a CheckpointError naming them, unless they are in `allow_changes`
    (see `symnet._src.train.resume`). While the run lasts the checkpoint is locked: a second run on it is
    refused.
    With `mesh` each minibatch is split over the mesh's `data_axis` devices, `batch_size / devices`
    chunks each, and the parameters and optimiser state are replicated (`symnet._src.train.parallel`;
    docs/scaling.md). With several processes every process calls `fit` with the same arguments and data.
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
    options = FitOptions.of(options, settings).for_data(train)
    tune_host_memory()
    if not isinstance(network, Network):
        raise TrainingError(f"fit trains a symnet Network, got {type(network).__name__}")
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise TrainingError(
            f"optimizer must be an optax GradientTransformation (e.g. optax.adam(1e-3)), got {optimizer!r:.60}"
        )
    if options.checkpoint is not None:
        check_writable(options.checkpoint)  # a typo found now, not after the run
    optimizer, chosen = _with_rules(network, optimizer, options.rules)
    o = options
    parallel = DataParallel(o.mesh, o.batch_size, o.data_axis) if o.mesh is not None else None
    widths = o.widths
    resolved = o.objective
    outputs = (o.output, *resolved.extra_outputs)
    train_chunks = as_chunks(train, network, widths[-1], outputs)
    valid_chunks = as_chunks(valid, network, widths[-1], outputs) if valid is not None else None
    check_data(network, train_chunks, resolved, o.input, o.output)
    if valid_chunks is not None:
        check_data(network, valid_chunks, resolved, o.input, o.output, "validation data", like=train_chunks)
    k = o.frame_subsampling_factor
    if isinstance(resolved, Chain):  # its denominator graph for the output (from a den.fst or the alignments)
        if isinstance(train, Corpus) and resolved.den is None:
            raise TrainingError(
                "the 'chain' objective on a stream needs its denominator graph given (Chain(den=...): a den.fst "
                "or a ChainGraph): symnet makes one from the alignments only when they are all in memory"
            )
        dim = output_dim(network, train_chunks, o.input, o.output)
        resolved = resolved.for_output(train_chunks.targets, train_chunks.weights, dim, k)
    used = used_widths(train_chunks, widths)  # the chunks' own width, and those below it of `chunk`
    if k > 1 and any(w % k for w in used):
        raise TrainingError(
            f"frame_subsampling_factor={k}: the chunk widths {used} must be multiples of it (Kaldi's "
            "frames-per-eg are), so that every chunk's outputs are at frames 0, k, 2k, ... of its sequence"
        )
    # One BLAS thread: the step's small LAPACK calls (natural gradient's) run faster without OpenBLAS's own threads.
    with ckpt.lock(o.checkpoint) if o.checkpoint else contextlib.nullcontext(), one_blas_thread():
        return _fit(network, optimizer, chosen, train_chunks, valid_chunks, (train, valid), o, resolved, parallel)


def _batches(
    trainer: Trainer, data: Any, chunks: Chunks | None, seed: int, shuffle: bool = True, drop_partial: bool = False
) -> Any:
    """The minibatch source of `data` (its `chunks` when it is held in memory; see `symnet._src.train.minibatches`)."""
    if isinstance(data, Corpus):
        return StreamBatches(trainer, data, seed, shuffle=shuffle, drop_partial=drop_partial)
    assert chunks is not None
    return MemoryBatches(trainer, chunks, seed, shuffle=shuffle, drop_partial=drop_partial)


def _with_rules(network: Network, optimizer: Any, rules: KaldiRules | bool | None) -> tuple[Any, KaldiRules | None]:
    """`fit`'s optimiser and Kaldi's rules (None: none) for its (checked) `optimizer` and `rules` arguments."""
    if isinstance(rules, KaldiRules):
        if isinstance(optimizer, KaldiRules) and optimizer is not rules:
            raise TrainingError("the optimizer is kaldi_rules(...) and so is rules=: give them once")
        if isinstance(optimizer, KaldiRules):
            return rules, rules
        raise TrainingError(
            "rules=kaldi_rules(...) is the whole optimiser: pass it as the optimizer (fit(net, data, "
            "kaldi_rules(net, ...))), or wrap yours with kaldi_rules(net, optimizer=...)"
        )
    if isinstance(optimizer, KaldiRules):
        if rules is False:
            raise TrainingError(
                "the optimizer is kaldi_rules(...), but rules=False: pass a plain optax optimizer to train without "
                "Kaldi's rules"
            )
        return optimizer, optimizer
    if rules is False or (rules is None and not carries_kaldi_rules(network)):
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


def steps_per_epoch(
    network: Any,
    data: Any,
    *,
    batch_size: int = 64,
    chunk: int | Sequence[int] | None = None,
    output: str = "output",
    seed: int = 0,
    frame_subsampling_factor: int = 1,
    drop_partial: bool = False,
) -> int:
    """The minibatches `fit(network, data, batch_size=..., chunk=..., drop_partial=...)` makes of `data` in an
    epoch (with or without a mesh; of a `Corpus`, every epoch's, planned with `seed`, and for Kaldi's chunks cut
    at `frame_subsampling_factor`): the length of an epoch for a learning-rate schedule."""
    widths = (
        FitOptions(
            chunk=None if chunk is None else chunk_widths(chunk), batch_size=batch_size, drop_partial=drop_partial
        )
        .for_data(data)
        .widths
    )
    chunks = as_chunks(data, network, widths[-1], output)
    used = used_widths(chunks, widths)
    if isinstance(data, Corpus):
        plan = _Plan(batch_size, chunks.chunk, chunks.left, chunks.right, used, frame_subsampling_factor)
        return StreamBatches(plan, data, seed, drop_partial=drop_partial).count()
    return count_by_width(chunks.widths(used), batch_size, drop_partial)


@attrs.frozen
class _Plan:
    """What `StreamBatches` reads of a Trainer, for counting minibatches without one."""

    batch_size: int
    chunk: int
    left: int
    right: int
    widths: tuple[int, ...]
    subsampling: int


def _fit(
    network: Network,
    optimizer: Any,
    rules: KaldiRules | None,
    train_chunks: Chunks,
    valid_chunks: Chunks | None,
    data: tuple[Any, Any],
    options: FitOptions,
    objective: Objective,
    parallel: DataParallel | None,
) -> FitResult:
    """The run itself, on checked data (`objective`: the options' one, resolved for the data)."""
    o = options
    c = train_chunks
    # The setup's Trainer (its compiled step and evaluation) is kept for the next fit of the same setup.
    setup: tuple[Any, ...] = (network.structure, o.batch_size, c.chunk, c.left, c.right, c.ends is not None)
    setup += (o.input, o.output, tuple(o.widths), o.frame_subsampling_factor, o.lowering, o.precision, o.mesh)
    setup += (o.data_axis,)
    trainer = trainer_for(
        setup,
        (optimizer, rules, objective),
        lambda: Trainer(
            network,
            optimizer,
            batch_size=o.batch_size,
            chunks=train_chunks,
            objective=objective,
            input=o.input,
            output=o.output,
            parallel=parallel,
            widths=o.widths,
            rules=rules,
            frame_subsampling_factor=o.frame_subsampling_factor,
            lowering=o.lowering,
            precision=o.precision,
        ),
    )
    if rules is not None and rules.settings["params"] != frozenset(network.params):
        raise TrainingError("kaldi_rules(...) was made for a network with other parameters than this one")
    policy = o.precision
    if policy is not None:  # parameters kept and optimised in the policy's params dtype
        network = network.replace(params={k: _as_float(v, policy.params) for k, v in network.params.items()})
    opt_state = optimizer.init(network.params)
    if policy is not None and policy.loss_scale is not None:
        opt_state = loss_scale.init(opt_state, policy)
    position = ckpt.Position()
    history: list[EpochStats] = []
    widths = o.widths
    record = resume.record(
        train=data[0],
        valid=data[1],
        batch_size=o.batch_size,
        chunk=widths[0] if len(widths) == 1 else list(widths),
        seed=o.seed,
        objective=objective.describe(),
        input=o.input,
        output=o.output,
        extra=o.run,
    )
    if rules is not None:
        record["kaldi_rules"] = rules.describe()
    if o.frame_subsampling_factor != 1:
        record["frame_subsampling_factor"] = o.frame_subsampling_factor
    if policy is not None:
        record["precision"] = str(policy)
    if o.drop_partial:
        record["drop_partial"] = True
    train_batches = _batches(trainer, data[0], train_chunks, o.seed, drop_partial=o.drop_partial)
    valid_batches = _batches(trainer, data[1], valid_chunks, o.seed, shuffle=False) if data[1] is not None else None
    batches = train_batches.count()
    if batches == 0 and o.drop_partial:
        raise TrainingError(
            f"drop_partial=True leaves no minibatch: no chunk width has batch_size={o.batch_size} chunks "
            f"(of {len(train_chunks)}){' in a window' if isinstance(data[0], Corpus) else ''}"
        )
    sums = None
    checkpoint = o.checkpoint
    if checkpoint and os.path.exists(checkpoint):
        network, opt_state, position, extra, saved = ckpt.load_run(checkpoint, network, opt_state)
        if saved is None:
            warnings.warn(
                f"{checkpoint} is a version-1 checkpoint: it does not record its run's settings, so "
                "a resume with other settings cannot be detected",
                stacklevel=3,
            )
        resume.check(checkpoint, saved, record, position, o.allow_changes)
        saved_history, sums = resume.check_extra(checkpoint, extra, position, batches)
        trainer.objective.resume(extra.get("objective", {}), checkpoint)
        history = [EpochStats(**h) for h in saved_history]
    if parallel is not None:
        parallel.check_optimizer_state(loss_scale.inner(opt_state))
        network, opt_state = parallel.replicate(network), parallel.replicate(opt_state)
    bar = _progress(o.progress, o.epochs, batches)
    try:
        return _train(
            trainer, network, opt_state, position, history, train_batches, valid_batches, bar, o, sums, record
        )
    finally:
        bar.close()


def _train(
    trainer: Trainer,
    network: Any,
    opt_state: Any,
    position: ckpt.Position,
    history: list[EpochStats],
    train_batches: Any,
    valid_batches: Any,
    bar: _progress,
    options: FitOptions,
    sums: Any,
    run: Mapping[str, Any] | None,
) -> FitResult:
    epochs, seed, checkpoint, checkpoint_every = (
        options.epochs,
        options.seed,
        options.checkpoint,
        options.checkpoint_every,
    )
    max_steps, on_epoch, on_step = options.max_steps, options.on_epoch, options.on_step
    step = position.step
    base_key = jax.random.PRNGKey(seed)
    # A dropout schedule follows the fraction of the run's minibatches done before each step.
    total_steps = max(epochs * train_batches.count(), 1)

    def done(network: Any, steps: int) -> FitResult:
        # With a dropout schedule, the network keeps the proportions its last step trained with (test-mode
        # dropout scales by them), as Kaldi's model keeps the last proportions its scripts set.
        if trainer.rules is not None and trainer.rules.schedule is not None:
            network = with_dropout(network, trainer.rules.dropout(max(steps - 1, 0) / total_steps))
        return FitResult(network, tuple(history), opt_state, options)

    for epoch in range(position.epoch, epochs):
        if position.batch == 0 or epoch != position.epoch:
            network = zero_batchnorm_stats(network)  # as Kaldi's ZeroComponentStats at each training job
            opt_state = zero_repair_statistics(opt_state)  # and its nonlinearities' self-repair statistics
            if trainer.parallel is not None:
                network = trainer.parallel.replicate(network)
        start_batch = position.batch if epoch == position.epoch else 0
        tally = _StepSums.resumed(sums if start_batch else None, trainer.objective.per_frame)
        tally.started = tally.last = time.perf_counter()
        tally.waited_before = train_batches.waited
        in_flight: _InFlight | None = None  # the step dispatched last, its results not yet read
        stopped = False
        with train_batches.epoch(epoch, start_batch) as minibatches:
            for minibatch in minibatches:
                if max_steps is not None and step >= max_steps:
                    stopped = True
                    break
                x, targets, weights = trainer.arrays(minibatch)
                key = jax.random.fold_in(base_key, step)  # this step's randomness (dropout masks)
                if trainer.parallel is not None:
                    key = trainer.parallel.replicate(key)
                ends = trainer.ends(minibatch)
                rules_args = trainer.rules_args(minibatch, step / total_steps)
                extra = (rules_args,) if rules_args is not None else ()
                new_network, opt_state, *results = trainer.step(
                    network, opt_state, x, targets, weights, key, ends, *extra
                )
                # The previous step's results are read while this one computes: the host's work for a
                # minibatch overlaps the device's for the one before. A failed check raises before any
                # network or state after the failing step is kept.
                if in_flight is not None:
                    tally.settle(in_flight, trainer, train_batches, bar, on_step, checkpoint)
                step += 1
                in_flight = _InFlight(epoch, step, minibatch, key, network, *results)
                network = new_network
                if checkpoint and checkpoint_every and step % checkpoint_every == 0:
                    tally.settle(in_flight, trainer, train_batches, bar, on_step, checkpoint)
                    in_flight = None
                    ckpt.save(
                        checkpoint,
                        network,
                        opt_state,
                        ckpt.Position(step, epoch, minibatch.number + 1),
                        {
                            "history": [attrs.asdict(h) for h in history],
                            "sums": tally.saved(),
                            "objective": trainer.objective.run_state(),
                        },
                        run=run,
                    )
            if in_flight is not None:
                tally.settle(in_flight, trainer, train_batches, bar, on_step, checkpoint)
        if stopped:
            return done(network, step)
        valid_loss = valid_acc = None
        if valid_batches is not None:
            valid_loss, valid_acc = trainer.score(network, valid_batches, max(step - 1, 0) / total_steps)
        stats = EpochStats(
            epoch,
            step,
            tally.loss / max(tally.frames, 1),
            tally.correct / max(tally.count if tally.count is not None else tally.frames, 1),
            valid_loss,
            valid_acc,
            tally.frames / max(time.perf_counter() - tally.started, 1e-9),
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
                {"history": [attrs.asdict(h) for h in history], "objective": trainer.objective.run_state()},
                run=run,
            )
    return done(network, step)


@attrs.frozen
class _InFlight:
    """A dispatched training step whose results the loop has not read yet: what checking them needs."""

    epoch: int
    step: int  # steps done once it is
    minibatch: Any
    key: jax.Array
    network: Any  # the network the step started from (to find a non-finite loss's first culprit)
    loss: jax.Array
    correct: Any
    finite: dict[str, jax.Array]
    grad_norm: jax.Array
    weight: jax.Array


@attrs.define
class _StepSums:
    """An epoch's running sums of the steps read so far (loss and correct weighted by frames; a sequence
    objective's own count), and the times `on_step` reports."""

    loss: float = 0.0
    correct: float = 0.0
    frames: float = 0.0
    count: float | None = None  # a sequence objective's count; None for a per-frame objective
    started: float = 0.0  # when the epoch started
    last: float = 0.0  # when the previous step was read
    waited_before: float = 0.0

    @classmethod
    def resumed(cls, saved: Any, per_frame: bool) -> _StepSums:
        """New sums, or those a mid-epoch checkpoint saved (`saved()`)."""
        sums = cls(count=None if per_frame else 0.0)
        if saved is not None:
            sums.loss, sums.correct, sums.frames = (float(v) for v in saved[:3])
            if sums.count is not None:
                sums.count = float(saved[3]) if len(saved) > 3 else sums.frames
        return sums

    def saved(self) -> list[float]:
        return [self.loss, self.correct, self.frames] + ([self.count] if self.count is not None else [])

    def settle(
        self, done: _InFlight, trainer: Trainer, batches: Any, bar: Any, on_step: Any, checkpoint: str | None
    ) -> None:
        """Read step `done`'s results: raise `TrainingError` on a non-finite loss or update, else add them up
        and report the step."""
        loss_value = float(done.loss)
        where = f"step {done.step} (epoch {done.epoch}, minibatch {done.minibatch.number})"
        if not np.isfinite(loss_value):
            culprit = trainer.first_non_finite(done.network, done.minibatch, done.key)
            raise TrainingError(
                f"the loss is {loss_value} at {where}; first non-finite value: {culprit}. {_kept(checkpoint)}"
            )
        overflowed = [name for name, ok in done.finite.items() if not bool(ok)]
        if overflowed:
            raise TrainingError(
                f"the update at {where} made parameter(s) {overflowed} NaN or Inf (the loss before it was "
                f"{loss_value}): the learning rate is too large or the gradients explode. {_kept(checkpoint)}"
            )
        frames = float(done.weight)
        right, count = trainer.counts(done.correct, frames)
        self.loss += loss_value * frames
        self.correct += right
        self.frames += frames
        if self.count is not None:
            self.count += count
        now = time.perf_counter()
        if on_step is not None:
            waited, self.waited_before = batches.waited - self.waited_before, batches.waited
            accuracy = right / max(count, 1e-9)
            norm = float(done.grad_norm)
            on_step(StepStats(done.epoch, done.step, loss_value, accuracy, norm, frames, now - self.last, waited))
        self.last = now
        rate = self.frames / max(now - self.started, 1e-9)
        bar.update(self.loss / self.frames, self.correct / max(self.count or self.frames, 1e-9), rate)


def _as_float(value: Any, dtype: Any) -> Any:
    """A floating parameter in `dtype`; another as it is."""
    return value.astype(dtype) if jnp.issubdtype(value.dtype, jnp.floating) else value


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


class _progress:
    """Progress: on a terminal a tqdm bar with loss, accuracy and frames/second (and each epoch's report with
    validation on standard output); elsewhere (a log file, a pipe) a plain line every `PLAIN_SECONDS` on standard
    error and each epoch's report on standard output, since a bar's carriage-return frames make a log unreadable;
    nothing when disabled."""

    PLAIN_SECONDS = 30.0

    def __init__(self, enabled: bool, epochs: int, per_epoch: int, stream: Any = None):
        self.bar = None
        self.stream = stream if stream is not None else sys.stderr
        self.plain = enabled and not _is_terminal(self.stream)
        self.total, self.done, self.last = epochs * per_epoch, 0, time.perf_counter()
        self.latest = self.shown = ""  # the newest step line, and the last one printed
        if enabled and not self.plain:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, unit="step", file=self.stream, dynamic_ncols=True)

    def update(self, loss: float, accuracy: float, rate: float) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}", fps=f"{rate:,.0f}", refresh=False)
            self.bar.update(1)
        elif self.plain:
            self.latest = f"step {self.done}/{self.total}: loss {loss:.3f} acc {accuracy:.3f}, {rate:,.0f} frames/s"
            if time.perf_counter() - self.last >= self.PLAIN_SECONDS:
                self._line(self.latest)

    def epoch_done(self, stats: EpochStats) -> None:
        text = f"epoch {stats.epoch}: train loss {stats.train_loss:.3f} acc {stats.train_accuracy:.3f}"
        if stats.valid_accuracy is not None:
            text += f", valid loss {stats.valid_loss:.3f} acc {stats.valid_accuracy:.3f}"
        if self.bar is not None and stats.valid_accuracy is not None:
            self.bar.write(text)
        elif self.plain:  # on standard output, where the bar's `write` puts its epoch report
            self._line(f"{text} (step {self.done}/{self.total}, {stats.frames_per_second:,.0f} frames/s)", sys.stdout)

    def _line(self, text: str, stream: Any = None) -> None:
        print(text, file=stream or self.stream, flush=True)
        self.last = time.perf_counter()
        if stream is None:
            self.shown = text

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.plain and self.latest and self.latest != self.shown:  # where the run ended
            self._line(self.latest)


def _is_terminal(stream: Any) -> bool:
    """Whether `stream` shows a bar as a bar: a terminal, or a notebook's output (tqdm draws a widget there)."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        return False
    return "ipykernel" in sys.modules and type(stream).__module__.startswith("ipykernel")
