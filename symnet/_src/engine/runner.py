"""One runner for sequences: the request, compile, call and reshape that every way of running a network shares.

Every caller that runs a network over sequences builds index sets for the
frames it has, a ComputationRequest, compiles it (`compile`, with a
`lowering`), calls it and cuts the rows back into sequences. What the callers
vary, and all they vary:

- whole (`dense.compute_traced`, traced input): one regular request for the
  whole `[N, T, D]` batch, edge frames repeated; values stay on the device in
  the `[T, N, D]` layout (`layout='frames'`); no state, no ends.
- bucketed (`dense.compute`): sequences padded to a few bucket lengths
  (`symnet._src.engine.buckets`), a fixed number per call, each sequence cut back
  to its own frames afterwards (shifted by its padding where that goes before
  the start); with padding side `'ends'`, each sequence's `Ends`.
- chunks on their own (`dense.compute(carry_state=False)`): a chunk plus
  (left, right) context frames, edge frames clamped, time shifted by a
  multiple of the modulus so that chunks at the same phase share a program;
  recurrences restart at every chunk; no ends.
- chunks with carried state (`streaming.ChunkRunner`, behind `Stream` and
  `dense.compute(frames_per_chunk=...)`): chunk-relative time, the state of
  every recurrent node given as an extra input at negative frames and asked
  for as an extra output at the chunk's last frames.
- nnet3-compute (`symnet._src.kaldi.compute.nnet3_compute`): chunks of utterances, each chunk its
  own sequence n; output frames every `frame_subsampling_factor`-th (a stepped
  range); an i-vector as one frame; a regular request per chunk shape, or one
  irregular request (`run_each`) for networks without recurrences.
- exact (`symnet._src.kaldi.compute.exact`): each utterance its own n of an irregular
  request (`run_each`): its input frames, and the outputs at the frames they
  make computable.

So the runner takes frames and values per name and gives values per name:
`run` for regular requests (every sequence the same frames, values
`[frames, n, dim]`), `run_each` for irregular ones (per sequence its own
frames and `[frames, dim]` rows). Sequence ends are one named value (`Ends`),
given to the request only when present. Every Computation the runner calls is
recorded by an active `record()`, so which lowering ran is visible from
outside (`record().explain()`); so is every Computation `fit`'s training step
and evaluation call (`compiled`, `note`), though they call it inside their own
jitted programs rather than through `run`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import numpy as np

from ..base.errors import PlanError
from ..core.index import IndexSet, encode
from ..core.precision import Precision
from ..core.structure import NetworkLike
from .compiling import compile
from .computation import Computation
from .recurrence import Lowering
from .request import ComputationRequest

__all__ = [
    "Block",
    "clamped",
    "compiled",
    "Ends",
    "Frames",
    "host",
    "Layout",
    "note",
    "Record",
    "record",
    "request_each",
    "run",
    "run_each",
]

#: Frames `t` of every sequence: `(start, end)` for `start .. end - 1`, or a range (stepped for subsampled outputs).
Frames = tuple[int, int] | range
#: How `run` hands values to the Computation: flat rows `[T * N, D]` (host arrays) or `[T, N, D]` (device ones).
Layout = Literal["flat", "frames"]


@dataclass(frozen=True)
class Ends:
    """Each sequence's end, in the request's frames: input frames at or after `frames[n]` count as not given for
    sequence n (`ComputationRequest(sequence_ends=True)`, `symnet._src.engine.ends`)."""

    frames: tuple[int, ...]


@dataclass(frozen=True)
class Block:
    """Values of one input at `frames` of every sequence: `[len(frames), n, dim]`."""

    frames: Frames
    value: Any


@dataclass
class Record:
    """The Computations the runner called while `record()` was active, in call order (repeats kept once)."""

    computations: list[Computation] = field(default_factory=list)

    def explain(self) -> str:
        """Each Computation's `explain()`: its request, the lowering asked for and what each recurrence got."""
        return "\n".join(c.explain() for c in self.computations)


_RECORDS: list[Record] = []


@contextlib.contextmanager
def record() -> Iterator[Record]:
    """Record the Computations every runner call makes inside the block.

    >>> with record() as ran:   # doctest: +SKIP
    ...     y = net.compute(x, lowering="plain")
    >>> print(ran.explain())   # doctest: +SKIP
    """
    rec = Record()
    _RECORDS.append(rec)
    try:
        yield rec
    finally:
        _RECORDS.remove(rec)


def note(computation: Computation) -> Computation:
    """`computation`, recorded by every active `record()` (once each): what a caller that calls a Computation
    inside its own program (`fit`'s training step) says before each call."""
    for rec in _RECORDS:
        if not any(c is computation for c in rec.computations):
            rec.computations.append(computation)
    return computation


def compiled(
    network: NetworkLike, request: ComputationRequest, lowering: Lowering, precision: Precision | None = None
) -> Computation:
    """`compile(network, request, lowering, precision=precision)`, recorded (`note`) as a Computation called."""
    return note(compile(network, request, lowering, precision=precision))


def _indexes(frames: Frames, n: int) -> IndexSet:
    return IndexSet.range(n=n, t=frames if isinstance(frames, range) else range(*frames))


def _count(frames: Frames) -> int:
    return len(frames) if isinstance(frames, range) else frames[1] - frames[0]


def host(value: Any) -> Any:
    """A concrete array as numpy (slicing it compiles nothing); a traced one (under jax.grad) as it is."""
    return value if isinstance(value, jax.core.Tracer) else np.asarray(value)


def run(
    network: NetworkLike,
    inputs: Mapping[str, Block],
    outputs: Mapping[str, Frames],
    *,
    ends: Ends | None = None,
    lowering: Lowering = "auto",
    layout: Layout = "flat",
    precision: Precision | None = None,
) -> dict[str, Any]:
    """Outputs `{name: [len(frames), n, dim]}` of one regular request: every sequence has the input `frames` of
    each block and wants the output `frames` given.

    `ends` gives each sequence its end (a request with sequence ends).
    `layout='flat'` hands the Computation flat rows (each value on the device
    with `jax.device_put`) and gives host values (numpy, or tracers under
    `jax.grad`); `layout='frames'` hands the values as they are, `[T, N, D]`,
    and gives device values (traced input inside `jax.jit`). `precision` is
    the Computation's mixed-precision policy (`compile`).
    """
    if not inputs:
        raise PlanError("run: no inputs")
    n = next(iter(inputs.values())).value.shape[1]
    for name, block in inputs.items():
        if block.value.shape[:2] != (_count(block.frames), n):
            raise PlanError(
                f"run: input {name!r} has shape {tuple(block.value.shape)}, its frames {block.frames} of {n} "
                "sequences need [frames, n, dim]"
            )
    if ends is not None and len(ends.frames) != n:
        raise PlanError(f"run: {len(ends.frames)} ends for {n} sequences")
    request = ComputationRequest(
        inputs={k: _indexes(b.frames, n) for k, b in inputs.items()},
        outputs={k: _indexes(t, n) for k, t in outputs.items()},
        sequence_ends=ends is not None,
    )
    computation = compiled(network, request, lowering, precision)
    if layout == "frames":
        values = {k: b.value for k, b in inputs.items()}
    else:
        values = {k: jax.device_put(b.value.reshape(-1, b.value.shape[-1])) for k, b in inputs.items()}
    result = computation(network, values, ends=None if ends is None else list(ends.frames))
    if layout == "frames":
        return dict(result)
    return {k: host(result[k]).reshape(_count(t), n, -1) for k, t in outputs.items()}


def run_each(
    network: NetworkLike,
    inputs: Mapping[str, Sequence[tuple[np.ndarray, np.ndarray]]],
    outputs: Mapping[str, Sequence[np.ndarray]],
    *,
    lowering: Lowering = "auto",
) -> dict[str, list[np.ndarray]]:
    """Outputs of one irregular request, sequence j its own n with its own frames: `inputs[name][j]` is
    (frames `t`, rows `[len(t), dim]`), `outputs[name][j]` the frames wanted; gives `[len(t), dim]` per
    output and sequence. An output no sequence wants is left out of the request and of the result."""
    wanted = {k: ts for k, ts in outputs.items() if any(len(t) for t in ts)}
    if not wanted:
        raise PlanError("run_each: no output frames wanted")
    request = request_each({k: [t for t, _ in v] for k, v in inputs.items()}, wanted)
    matrices = {k: jax.device_put(np.concatenate([rows for _, rows in v])) for k, v in inputs.items()}
    result = compiled(network, request, lowering)(network, matrices)
    out = {}
    for name, ts in wanted.items():
        counts = [len(t) for t in ts]
        out[name] = np.split(np.asarray(result[name]), np.cumsum(counts)[:-1])
    return out


def request_each(
    inputs: Mapping[str, Sequence[np.ndarray]], outputs: Mapping[str, Sequence[np.ndarray]]
) -> ComputationRequest:
    """The irregular request `run_each` makes: sequence j has input frames `inputs[name][j]` and wants output
    frames `outputs[name][j]` (an output without frames is left out)."""

    def keys(per_sequence: Sequence[np.ndarray]) -> IndexSet:
        parts = [
            encode(np.full(len(t), j), np.asarray(t, np.int64), np.zeros(len(t), np.int64))
            for j, t in enumerate(per_sequence)
            if len(t)
        ]
        return IndexSet(np.concatenate(parts))

    return ComputationRequest(
        inputs={k: keys(ts) for k, ts in inputs.items()},
        outputs={k: keys(ts) for k, ts in outputs.items() if any(len(t) for t in ts)},
    )


def clamped(sequence: np.ndarray, frames: np.ndarray, length: int | None = None) -> np.ndarray:
    """Rows of `sequence` at `frames`, its first and last frames (of its first `length`) repeated outside it:
    the edge convention of nnet3-compute."""
    last = len(sequence) if length is None else min(length, len(sequence))
    rows: np.ndarray = sequence[np.clip(frames, 0, last - 1)]
    return rows
