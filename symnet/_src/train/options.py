"""`FitOptions`: every setting of a `fit` run in one checked, documented object.

`fit(net, data, optimizer, epochs=3, chunk=20)` is shorthand for
`fit(net, data, optimizer, FitOptions(epochs=3, chunk=20))`; the object can be
kept, varied with `attrs.evolve` and passed to several runs. Every value is
checked when the object is made (a TrainingError naming the setting), before
any work is done.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..base.errors import PlanError, ShapeError, TrainingError
from ..core.precision import Precision, get_precision
from .examples import Chunks
from .objectives import Linear, Objective, get_objective
from .streams import Corpus

if TYPE_CHECKING:
    import jax

    from ..engine.recurrence import Lowering
    from .loop import EpochStats, StepStats
    from .rules import KaldiRules

__all__ = ["chunk_widths", "DATA_AXIS", "DEFAULT_CHUNK", "FitOptions", "is_integer"]

#: Output frames per chunk that `fit` cuts sequences into when no `chunk` is given.
DEFAULT_CHUNK = 20
#: The mesh axis minibatches are split over by default (symnet._src.train.parallel).
DATA_AXIS = "data"


def is_integer(value: Any, least: int) -> bool:
    """Whether `value` is an integer (not a bool) of at least `least`."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and bool(value >= least)


def chunk_widths(chunk: int | Sequence[int]) -> tuple[int, ...]:
    """`chunk` (one width, or several as Kaldi's `--frames-per-eg=300,200,100`) as sorted distinct widths."""
    if not (is_integer(chunk, 1) or (isinstance(chunk, Sequence) and chunk and all(is_integer(w, 1) for w in chunk))):
        raise TrainingError(f"chunk must be an integer >= 1 or a sequence of them (chunk widths), got {chunk!r}")
    return tuple(sorted({int(w) for w in chunk})) if isinstance(chunk, Sequence) else (int(chunk),)


def _at_least(least: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(_: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not is_integer(value, least):
            raise TrainingError(f"{attribute.name} must be an integer >= {least}, got {value!r}")

    return check


def _flag(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise TrainingError(f"{attribute.name} must be True or False, got {value!r:.60}")


def _string(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise TrainingError(f"{attribute.name} must be a string, got {value!r}")


def _callback(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not callable(value):
        raise TrainingError(f"{attribute.name} must be a function or None, got {value!r}")


def _checkpoint(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TrainingError(f"checkpoint must be a file path, got {value!r}")
    return os.fspath(value)


def _max_steps(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not is_integer(value, 0):
        raise TrainingError(f"max_steps must be an integer >= 0 or None, got {value!r}")


def _run(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise TrainingError(f"run must be a mapping of setting names to values, got {value!r:.60}")


def _changes(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(c, str) for c in value):
        raise TrainingError(f"allow_changes must be a sequence of field names, got {value!r}")
    return tuple(value)


def _lowering(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    from ..engine.recurrence import check_lowering

    try:
        check_lowering(value)
    except PlanError as e:
        raise TrainingError(str(e)) from None


def _precision(value: Any) -> Precision | None:
    try:
        return get_precision(value)
    except ShapeError as e:
        raise TrainingError(str(e)) from None


def _rules(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    from .rules import KaldiRules

    if value is not None and not isinstance(value, (bool, KaldiRules)):
        raise TrainingError(f"rules must be None, True, False or kaldi_rules(...), got {value!r:.60}")


@attrs.frozen(kw_only=True)
class FitOptions:
    """The settings of a `fit` run (each is also a keyword of `fit`).

    Attributes:
        epochs: passes over the training data.
        batch_size: chunks per minibatch (split over the devices with `mesh`).
        drop_partial: leave each width's last, short minibatch of an epoch (of a stream's window) out of
            training instead of filling it up with weight-0 repeats, as Kaldi's nnet3-merge-egs with one
            minibatch size (`--minibatch-size=64`) discards the egs that do not fill one: other chunks each
            epoch, as the order is drawn anew. Validation data are never dropped.
        chunk: output frames per chunk; several widths (`(300, 200, 100)`, Kaldi's `--frames-per-eg`) cut
            sequences into chunks of the largest and compute a chunk whose sequence ends sooner at the
            smallest width that holds it (one compiled step per width). None (the default): `Chunks`
            keep the width they were cut with (Kaldi's egs: their frames per eg), sequences are cut
            into chunks of `DEFAULT_CHUNK` (20) frames.
        objective: `"linear"` (cross-entropy of log-probability outputs and frame labels; `"xent"` is the
            same), `"quadratic"` (target vectors), `"ctc"`, `"chain"`, or a `symnet.train.Objective`; a name
            is kept as the `Objective` it names (`get_objective`).
        seed: the seed of the chunk order and of dropout masks; runs are deterministic given it.
        checkpoint: a file the run saves to at the end of every epoch (and every `checkpoint_every` steps)
            and resumes from when it exists; locked while the run lasts.
        checkpoint_every: also save every this many steps (0: at epoch ends only).
        progress: show progress: a bar on a terminal or in a notebook; in a log file or a pipe, a plain line
            every 30 s on standard error and each epoch's report on standard output.
        max_steps: stop after this many steps (a simulated interruption, for tests and time limits).
        input: the network input the features feed.
        output: the network output the objective trains.
        on_epoch: called with each epoch's `EpochStats`.
        on_step: called with each step's `StepStats` (`symnet train --metrics`).
        run: the caller's own settings (optimiser, learning rate, ...), recorded in the checkpoint so that a
            resume with other settings is refused (`symnet._src.train.resume`).
        allow_changes: run fields a resume may change.
        mesh: a `jax.sharding.Mesh` with an axis named `data_axis`: each minibatch is split over that
            axis's devices (docs/scaling.md).
        data_axis: the mesh axis name minibatches are split over.
        rules: Kaldi's training rules: None applies them when a component carries such options, True
            always, False never; `kaldi_rules(...)` gives them (see `fit`).
        frame_subsampling_factor: Kaldi's `frame-subsampling-factor` k: outputs are trained at chunk
            frames 0, k, 2k, ... (every chunk width must be a multiple of k).
        lowering: how recurrences and spliced products run (`symnet.compile`'s `lowering`: "auto", "fused" or "plain").
        precision: a mixed-precision policy (`symnet.Precision` or `"float32"`, `"bfloat16"`, `"float16"`):
            the parameters are cast to its `params` dtype and optimised in it, every step computes in its
            `compute` dtype, the objective reads float32 outputs, and a policy with a `loss_scale` (the
            `"float16"` preset) trains with dynamic loss scaling (`symnet._src.train.loss_scale`). None: the
            network's dtypes as they are (docs/precision.md).
    """

    epochs: int = attrs.field(default=1, validator=_at_least(0))
    batch_size: int = attrs.field(default=64, validator=_at_least(1))
    drop_partial: bool = attrs.field(default=False, validator=_flag)
    chunk: int | tuple[int, ...] | None = attrs.field(default=None)
    objective: Objective = attrs.field(factory=Linear, converter=get_objective)
    seed: int = attrs.field(default=0, validator=_at_least(0))
    checkpoint: str | None = attrs.field(default=None, converter=_checkpoint)
    checkpoint_every: int = attrs.field(default=0, validator=_at_least(0))
    progress: bool = True
    max_steps: int | None = attrs.field(default=None, validator=_max_steps)
    input: str = attrs.field(default="input", validator=_string)
    output: str = attrs.field(default="output", validator=_string)
    on_epoch: Callable[[EpochStats], None] | None = attrs.field(default=None, validator=_callback)
    on_step: Callable[[StepStats], None] | None = attrs.field(default=None, validator=_callback)
    run: Mapping[str, Any] | None = attrs.field(default=None, validator=_run)
    allow_changes: tuple[str, ...] = attrs.field(default=(), converter=_changes)
    mesh: jax.sharding.Mesh | None = None
    data_axis: str = attrs.field(default=DATA_AXIS, validator=_string)
    rules: KaldiRules | bool | None = attrs.field(default=None, validator=_rules)
    frame_subsampling_factor: int = attrs.field(default=1, validator=_at_least(1))
    lowering: Lowering = attrs.field(default="auto", validator=_lowering)
    precision: Precision | None = attrs.field(default=None, converter=_precision)

    def __attrs_post_init__(self) -> None:
        if self.chunk is not None:
            chunk_widths(self.chunk)

    @property
    def widths(self) -> tuple[int, ...]:
        """`chunk` as sorted distinct widths (`DEFAULT_CHUNK` where it is None: see `for_data`)."""
        return chunk_widths(DEFAULT_CHUNK if self.chunk is None else self.chunk)

    def for_data(self, data: Any) -> FitOptions:
        """These options with `chunk` decided for training on `data`: as given, else the width `Chunks` were
        cut with (so Kaldi's egs train at their frames per eg), the sizes of a corpus cut into Kaldi's chunks
        (`num_frames`), else `DEFAULT_CHUNK`."""
        sizes = data.kaldi_sizes if isinstance(data, Corpus) else None
        if self.chunk is not None:
            if sizes is not None and set(chunk_widths(self.chunk)) != set(sizes):
                raise TrainingError(
                    f"chunk={self.chunk!r}, but the corpus is cut into Kaldi's chunks of {list(sizes)} frames "
                    "(its num_frames): leave chunk out, or give those"
                )
            return self
        if sizes is not None:
            return attrs.evolve(self, chunk=tuple(sorted(set(sizes))))
        return attrs.evolve(self, chunk=data.chunk if isinstance(data, Chunks) else DEFAULT_CHUNK)

    @classmethod
    def of(cls, options: FitOptions | None, settings: Mapping[str, Any]) -> FitOptions:
        """`options` with `settings` (keywords of `fit`) applied; a TrainingError names an unknown one."""
        if options is not None and not isinstance(options, FitOptions):
            raise TrainingError(f"options must be a symnet.train.FitOptions, got {type(options).__name__}")
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TrainingError(f"fit has no setting {', '.join(map(repr, unknown))}; it has {sorted(known)}")
        return attrs.evolve(options, **settings) if options is not None else cls(**settings)
