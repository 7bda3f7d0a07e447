"""What Kaldi's `nnet3-compute` does, option for option (nnet3bin/nnet3-compute.cc, nnet-am-decodable-simple.cc).

For each utterance:

1. The network is put in test mode (batch-norm uses its stored statistics,
   dropout is off). Kaldi also applies `CollapseModel`, rewrites that do not
   change the outputs, so there is nothing to do here.
2. `frames_per_chunk` is rounded up to a multiple of
   lcm(`frame_subsampling_factor`, the network's modulus).
3. The output frames (every `frame_subsampling_factor`-th) are split into
   chunks of `frames_per_chunk`; the last chunk is shorter.
4. Each chunk gets `left + extra_left_context` input frames before its first
   output frame and `right + extra_right_context` after its last (the
   `_initial`/`_final` variants, when >= 0, replace them for the first and last
   chunk), taken from the utterance with frame indices clamped to the first and
   last frame.
5. Each chunk is a separate computation whose first output frame is t = 0, so
   recurrences restart at every chunk and IfDefined/Failover see the chunk's
   padded window as what is available.
6. An i-vector, if given, is one row at Index (0, 0, 0); with online i-vectors
   the row is the one for frame `first_output + (last_output - first_output) // 2`
   divided by the period (clamped to the last row, an error if that is more than
   50 frames off).
7. Log-priors are subtracted (`use_priors`), the acoustic scale applied, and
   with `apply_exp` the exponential taken.

Products are Kaldi's float32 on every backend, not a GPU's TensorFloat-32
(kaldi/float32.py).

Where the network's outputs are local in time (`symnet._src.engine.locality`: no
recurrence, no IfDefined or Failover, no non-simple component, time moved only
by offsets), every chunk with its context gives exactly what one pass over the
whole utterance gives, so the chunks are not computed at all:
`Nnet3Computer.compute_many` lays the utterances one after another, each with
its context (edge frames repeated), as one stream, and computes it in pieces
of `LARGE_PIECE` output frames and, at its end, of `PIECE` (at most two
programs for every job), each with the context once. `--frames-per-chunk` and
the extra context options then change no output and no work. Networks with an
`ivector` input are always computed in chunks.

Otherwise chunks are independent computations, so `Nnet3Computer.compute_many` runs the
chunks of many utterances together, each chunk its own sequence n of one
request (as Kaldi's batched computer does; no descriptor or component lets
one n see another): `symnet._src.engine.chunks`, which `compute(...,
frames_per_chunk=..., carry_state=False)` runs too. Where padding cannot
change an output (`symnet._src.engine.buckets.padding_side`), a short last
chunk is padded to the full chunk size or to a bucket length where that is
shorter, after its end (with that end given to the request where recurrences
run both ways, a BLSTM, or an optional read lies outside a recurrence) or
before its start (for networks whose recurrences all run backward), and the
chunks of one shape go in calls of one size (`batches`), so that a job of any
number of utterances compiles a few programs: one per chunk shape (first,
middle, last chunk where their contexts differ). A network without
recurrences whose chunks cannot be padded computes chunks of all shapes in
one request instead. The numbers are those of one computation per chunk.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ...base.errors import ShapeError, SymnetError
from ...engine.buckets import padding_side
from ...engine.chunks import Chunk, compute_chunks, padded_chunk
from ...engine.context import modulus as graph_modulus
from ...engine.graph import Graph
from ...engine.inspect import recurrent_edges
from ...engine.locality import chunking_dependence
from ...engine.runner import Block, clamped, run, run_each
from ..text.scales import check_descriptor_scales
from .float32 import with_kaldi_float32

__all__ = [
    "BATCH_FRAMES",
    "BATCH_UTTERANCES",
    "check_ivector_options",
    "ComputeJob",
    "ComputeOptions",
    "LARGE_PIECE",
    "modulus",
    "nnet3_compute",
    "Nnet3Computer",
    "PIECE",
]

#: Output frames of one piece of the stream of utterances (networks local in time): one call, one program.
PIECE = 1024
#: A long stream's pieces (`_piece_sizes`): a 4-times longer piece recomputes its context a quarter as often
#: (benchmarks/kaldi_job.py's compiled pass: 12.22 s with pieces of 1024 frames, 11.91 s with these).
LARGE_PIECE = 4096
#: A `ComputeJob` of a network computed in chunks computes the chunks of this many utterances (or frames) together.
BATCH_UTTERANCES, BATCH_FRAMES = 64, 20000


@attrs.frozen
class ComputeOptions:
    """nnet3-compute's options (Kaldi's names with dashes turned into underscores)."""

    frames_per_chunk: int = 50
    extra_left_context: int = 0
    extra_right_context: int = 0
    extra_left_context_initial: int = -1
    extra_right_context_final: int = -1
    frame_subsampling_factor: int = 1
    acoustic_scale: float = 1.0
    apply_exp: bool = False

    def __attrs_post_init__(self) -> None:
        if self.frames_per_chunk < 1 or self.frame_subsampling_factor < 1:
            raise SymnetError("--frames-per-chunk and --frame-subsampling-factor must be > 0")
        if self.extra_left_context < 0 or self.extra_right_context < 0:
            raise SymnetError("--extra-left-context and --extra-right-context must be >= 0")


def modulus(network: Any) -> int:
    """The network's shift-invariance modulus (Kaldi's Nnet::Modulus): lcm of Round moduli and Switch sizes."""
    return graph_modulus(Graph(dict(network.structure.outputs)))


class Nnet3Computer:
    """nnet3-compute for one network and one set of options: call it on an utterance, or `compute_many`.

    Test mode, the context and the chunk size are worked out once; chunks of one
    shape share one compiled computation.
    """

    def __init__(self, network: Any, options: ComputeOptions = ComputeOptions(), *, priors: np.ndarray | None = None):
        from ...components import set_test_mode

        check_descriptor_scales(network)
        self.network = set_test_mode(network, True)
        self.options = options
        self.log_priors = None if priors is None else np.log(np.asarray(priors, dtype=np.float32))
        self.graph = Graph(dict(self.network.structure.outputs))
        if "output" not in self.graph.outputs:
            raise SymnetError(
                f"nnet3-compute reads the output node 'output'; this network has {list(self.graph.outputs)}"
            )
        self.left, self.right = self.network.context("output")
        step = math.lcm(options.frame_subsampling_factor, graph_modulus(self.graph))
        self.frames_per_chunk = step * -(-options.frames_per_chunk // step)
        self.recurrent = bool(recurrent_edges(self.graph))
        self.side = padding_side(self.graph, with_ends=True)
        self.modulus = graph_modulus(self.graph)
        #: Why chunks can change an output (`chunking_dependence`), or None: then utterances are computed whole.
        self.chunking = chunking_dependence(self.graph)
        if self.chunking is None and set(self.graph.inputs) != {"input"}:
            self.chunking = f"the network has inputs {sorted(self.graph.inputs)}, not 'input' alone"

    def __call__(
        self,
        features: np.ndarray,
        *,
        ivector: np.ndarray | None = None,
        online_ivectors: np.ndarray | None = None,
        online_ivector_period: int = 0,
    ) -> np.ndarray:
        """The `output` for one utterance `[T, D]`, as nnet3-compute writes it."""
        return self.compute_many(
            [features],
            ivectors=None if ivector is None else [ivector],
            online_ivectors=None if online_ivectors is None else [online_ivectors],
            online_ivector_period=online_ivector_period,
        )[0]

    @with_kaldi_float32
    def compute_many(
        self,
        features: Sequence[np.ndarray],
        *,
        ivectors: Sequence[np.ndarray] | None = None,
        online_ivectors: Sequence[np.ndarray] | None = None,
        online_ivector_period: int = 0,
    ) -> list[np.ndarray]:
        """The `output` of each utterance (`features[i]` `[T_i, D]`, with `ivectors[i]` or
        `online_ivectors[i]` where given), as nnet3-compute writes it; all chunks computed together, or the
        utterances whole where chunks change nothing (`chunking` is None)."""
        check_ivector_options(ivectors is not None, online_ivectors is not None, online_ivector_period)
        for i, given in enumerate((ivectors, online_ivectors)):
            if given is not None and len(given) != len(features):
                what = ("ivectors", "online_ivectors")[i]
                raise SymnetError(f"{len(features)} utterances but {len(given)} {what}")
        utterances = [
            self.checked(
                feats,
                None if ivectors is None else ivectors[i],
                None if online_ivectors is None else online_ivectors[i],
            )
            for i, feats in enumerate(features)
        ]
        if not utterances:
            return []
        if self.chunking is None:
            stream = _Stream(self)
            done = [pair for i, feats in enumerate(utterances) for pair in stream.add(i, feats)] + stream.finish()
            raw = [value for _, value in done]
        else:
            raw = self._chunked(utterances, ivectors, online_ivectors, online_ivector_period)
        outputs = [self.finished(value) for value in raw]
        return [out if out.base is None else out.copy() for out in outputs]  # arrays of their own, not views

    def checked(self, features: Any, ivector: Any = None, online_ivectors: Any = None) -> np.ndarray:
        """One utterance's features as float32, checked against the network's inputs (a ShapeError if not)."""
        feats = np.asarray(features, dtype=np.float32)
        if feats.ndim != 2 or len(feats) == 0:
            raise ShapeError(f"features must be a non-empty [T, D] matrix, got shape {feats.shape}")
        _check_dims(self.graph, feats, ivector, online_ivectors)
        return feats

    def job(self, online_ivector_period: int = 0) -> ComputeJob:
        """A job of any number of utterances, added one at a time (`ComputeJob`): what `symnet compute` runs."""
        return ComputeJob(self, online_ivector_period)

    def finished(self, value: np.ndarray) -> np.ndarray:
        """The network's output as nnet3-compute writes it: log-priors subtracted, scaled, exponentiated."""
        if self.log_priors is not None:
            value = value - self.log_priors[None, :]
        if self.options.acoustic_scale != 1.0:  # x * 1.0 is x: no pass over the output for nothing
            value = value * self.options.acoustic_scale
        return np.exp(value) if self.options.apply_exp else value

    def _chunked(
        self,
        utterances: list[np.ndarray],
        ivectors: Sequence[np.ndarray] | None,
        online_ivectors: Sequence[np.ndarray] | None,
        online_ivector_period: int,
    ) -> list[np.ndarray]:
        """Each utterance's output from its chunks, each chunk computed on its own (nnet3-compute's way)."""
        chunks: list[Chunk] = []
        for i, feats in enumerate(utterances):
            chunks += self._chunks(
                i,
                len(feats),
                None if ivectors is None else ivectors[i],
                None if online_ivectors is None else online_ivectors[i],
                online_ivector_period,
            )
        if self.side is None and not self.recurrent and len({(c.frames, c.left, c.right) for c in chunks}) > 1:
            pieces = self._irregular(chunks, utterances)  # no recurrence: chunks of every shape in one request
        else:  # a few chunk shapes, each in calls of one size
            pieces = compute_chunks(
                self.network,
                "output",
                chunks,
                {"input": utterances},
                side=self.side,
                modulus=self.modulus,
                subsampling=self.options.frame_subsampling_factor,
            )
        by_utterance: list[list[np.ndarray]] = [[] for _ in utterances]
        for chunk, piece in zip(chunks, pieces, strict=True):  # in order: each utterance's chunks from its first frame
            by_utterance[chunk.sequence].append(piece)
        return [np.concatenate(parts, axis=0) for parts in by_utterance]

    def _chunks(
        self, utterance: int, num_frames: int, ivector: np.ndarray | None, online: np.ndarray | None, period: int
    ) -> list[Chunk]:
        options, f = self.options, self.options.frame_subsampling_factor
        num_subsampled = -(-num_frames // f)
        per_chunk = self.frames_per_chunk // f
        out = []
        for start in range(0, num_subsampled, per_chunk):
            count = min(num_subsampled - start, per_chunk)
            first_out = start * f
            extra_left, extra_right = options.extra_left_context, options.extra_right_context
            if first_out == 0 and options.extra_left_context_initial >= 0:
                extra_left = options.extra_left_context_initial
            if start + count == num_subsampled and options.extra_right_context_final >= 0:
                extra_right = options.extra_right_context_final
            row = _ivector(ivector, online, period, first_out, (count - 1) * f)
            chunk = padded_chunk(
                utterance,
                first_out,
                count,
                frames_per_chunk=per_chunk,
                left=self.left + extra_left,
                right=self.right + extra_right,
                side=self.side,
                modulus=self.modulus,
                subsampling=f,
                rows=None if row is None else {"ivector": row.astype(np.float32)},
            )
            out.append(chunk)
        return out

    def _irregular(self, chunks: list[Chunk], utterances: list[np.ndarray]) -> list[np.ndarray]:
        """Chunks of several shapes (never padded) as the sequences of one request (networks without
        recurrences)."""
        f = self.options.frame_subsampling_factor
        inputs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"input": []}
        for c in chunks:
            t = np.arange(-c.left, (c.count - 1) * f + c.right + 1)
            inputs["input"].append((t, clamped(utterances[c.sequence], c.first + t)))
            if "ivector" in c.rows:  # i-vectors are given for every utterance or for none
                inputs.setdefault("ivector", []).append((np.zeros(1, np.int64), c.rows["ivector"][None]))
        out: list[np.ndarray] = run_each(self.network, inputs, {"output": [np.arange(c.count) * f for c in chunks]})[
            "output"
        ]
        return out


class ComputeJob:
    """nnet3-compute over utterances added one at a time, in order: each output is given back, with the key
    it was added with, as soon as it is computed, so a job of any length holds a few pieces' outputs at once.
    An output may be a read-only view of a computed piece (no copy): `np.array(output)` gives one to modify.

    A network local in time (`Nnet3Computer.chunking` is None) is one stream over the whole job, computed in
    pieces of `LARGE_PIECE` output frames and, at its end, of `PIECE` (`_Stream`): what `compute_many` gives
    for all the utterances in one call. Otherwise the chunks of `BATCH_UTTERANCES` utterances (or
    `BATCH_FRAMES` frames) are computed together (`Nnet3Computer.compute_many`). An error names the key of
    the utterance at fault.
    """

    def __init__(self, computer: Nnet3Computer, online_ivector_period: int = 0):
        self.computer = computer
        self.online_ivector_period = online_ivector_period
        self._stream = _Stream(computer) if computer.chunking is None else None
        self._batch: list[tuple[Any, np.ndarray, Any, Any]] = []

    @with_kaldi_float32
    def add(
        self,
        key: Any,
        features: np.ndarray,
        *,
        ivector: np.ndarray | None = None,
        online_ivectors: np.ndarray | None = None,
    ) -> list[tuple[Any, np.ndarray]]:
        """Add the utterance `key` (`features` `[T, D]`, with its `ivector` or `online_ivectors` where the
        network reads them); the `(key, output)` of every utterance done, in the order they were added."""
        try:
            check_ivector_options(ivector is not None, online_ivectors is not None, self.online_ivector_period)
            feats = self.computer.checked(features, ivector, online_ivectors)
        except SymnetError as e:
            raise type(e)(f"utterance {key}: {e}") from None
        if self._stream is not None:
            return self._finished(self._stream.add(key, feats))
        self._batch.append((key, feats, ivector, online_ivectors))
        if len(self._batch) >= BATCH_UTTERANCES or sum(len(b[1]) for b in self._batch) >= BATCH_FRAMES:
            return self._flush()
        return []

    @with_kaldi_float32
    def finish(self) -> list[tuple[Any, np.ndarray]]:
        """The `(key, output)` of every utterance not yet given back: the end of the job."""
        if self._stream is not None:
            return self._finished(self._stream.finish())
        return self._flush()

    def _finished(self, done: list[tuple[Any, np.ndarray]]) -> list[tuple[Any, np.ndarray]]:
        return [(key, self.computer.finished(value)) for key, value in done]

    def _flush(self) -> list[tuple[Any, np.ndarray]]:
        """The batch's chunks computed together; where that fails, each utterance alone, to name the one at fault."""
        batch, self._batch = self._batch, []
        if not batch:
            return []
        computer, period = self.computer, self.online_ivector_period
        try:
            outs = computer.compute_many(
                [feats for _, feats, _, _ in batch],
                ivectors=None if batch[0][2] is None else [b[2] for b in batch],
                online_ivectors=None if batch[0][3] is None else [b[3] for b in batch],
                online_ivector_period=period,
            )
        except SymnetError:
            outs = []
            for key, feats, ivector, online in batch:
                try:
                    outs.append(computer(feats, ivector=ivector, online_ivectors=online, online_ivector_period=period))
                except SymnetError as e:
                    raise type(e)(f"utterance {key}: {str(e).splitlines()[0]}") from None
        return [(key, out) for (key, *_), out in zip(batch, outs, strict=True)]


class _Stream:
    """A job's utterances one after another, each with its context (edge frames repeated), computed in pieces
    as soon as a large piece's input frames are there, and in pieces of `_piece_sizes` at the end (networks
    local in time).

    Utterance frame t is the stream's frame `start + t`, `start` a multiple of lcm(frame_subsampling_factor,
    modulus), so that rounding and switches see t as a chunk would; input row r holds stream frame r - left.
    Frames between utterances (zeros) make outputs no utterance keeps. An utterance's output is given back as
    soon as its rows are computed: a view of its piece where it lies in one (no copy), the rows of its pieces
    joined otherwise.
    """

    def __init__(self, computer: Nnet3Computer):
        self.network = computer.network
        self.left, self.right = computer.left, computer.right
        self.f = computer.options.frame_subsampling_factor
        self.step = math.lcm(self.f, computer.modulus)
        self.large = self.step * -(-LARGE_PIECE // self.step)
        self.start = 0  # input row of the next utterance's first row (its first frame of left context)
        self.first = 0  # stream frame of the next piece's first output frame, = the input row it starts from
        self.rows: list[np.ndarray] = []  # input rows from row `first` on
        self.pending: deque[tuple[Any, int, int]] = deque()  # (key, first output row, rows) not given back
        self.results: dict[int, np.ndarray] = {}  # output row of a piece's first row -> the piece's output rows

    def add(self, key: Any, feats: np.ndarray) -> list[tuple[Any, np.ndarray]]:
        left, f = self.left, self.f
        count = -(-len(feats) // f)
        end = self.start + left + (count - 1) * f + self.right + 1  # rows start .. end - 1: frames -left .. of feats
        rows = np.empty((end - self.start, feats.shape[1]), np.float32)
        real = min(len(feats), len(rows) - left)
        rows[:left] = feats[0]
        rows[left : left + real] = feats[:real]
        rows[left + real :] = feats[real - 1]
        self._append(self.start - (self.first + self.count), feats.shape[1])
        self.rows.append(rows)
        self.pending.append((key, self.start // f, count))
        self.start = self.step * -(-end // self.step)
        done = []
        while self.count >= self.large + left + self.right:
            done += self._piece(self.large)
        return done

    def finish(self) -> list[tuple[Any, np.ndarray]]:
        if not self.pending:
            return []
        _, row, count = self.pending[-1]
        frames = (row + count - 1) * self.f + 1 - self.first  # to the last utterance's last output frame
        return [pair for size in _piece_sizes(frames, self.step) for pair in self._piece(size)]

    @property
    def count(self) -> int:
        """Input rows there are from row `first` on."""
        return sum(len(rows) for rows in self.rows)

    def _append(self, zeros: int, dim: int) -> None:
        if zeros > 0:
            self.rows.append(np.zeros((zeros, dim), np.float32))

    def _piece(self, size: int) -> list[tuple[Any, np.ndarray]]:
        """Compute the piece of `size` output frames from `first`; the utterances it completes."""
        left, right, f = self.left, self.right, self.f
        self._append(size + left + right - self.count, self.rows[-1].shape[1])
        rows = np.concatenate(self.rows) if len(self.rows) > 1 else self.rows[0]
        block = Block((-left, size + right), rows[: size + left + right, None])
        out = run(self.network, {"input": block}, {"output": range(0, size, f)})["output"]
        self.results[self.first // f] = out[:, 0]
        self.rows = [rows[size:]]
        self.first += size
        done = []
        while self.pending and self.pending[0][1] + self.pending[0][2] <= self.first // f:
            key, row, count = self.pending.popleft()
            done.append((key, _rows(self.results, row, count)))
        needed = self.pending[0][1] if self.pending else self.first // f
        for row in [row for row, rows in self.results.items() if row + len(rows) <= needed]:
            del self.results[row]
        return done


def nnet3_compute(
    network: Any,
    features: np.ndarray,
    options: ComputeOptions = ComputeOptions(),
    *,
    priors: np.ndarray | None = None,
    **ivectors: Any,
) -> np.ndarray:
    """One utterance through `Nnet3Computer(network, options, priors=priors)`."""
    return Nnet3Computer(network, options, priors=priors)(features, **ivectors)


def _ivector(ivector: Any, online: Any, period: int, first_out: int, num_out: int) -> np.ndarray | None:
    if ivector is not None:
        return np.asarray(ivector, dtype=np.float32).reshape(-1)
    if online is None:
        return None
    frame = first_out + num_out // 2
    row = frame // period
    if row >= len(online):
        if (row - (len(online) - 1)) * period > 50:
            raise SymnetError(
                f"could not get an i-vector for frame {frame}: only {len(online)} rows at "
                f"--online-ivector-period={period} (mismatched period?)"
            )
        row = len(online) - 1
    return np.asarray(online[row], dtype=np.float32)


def _piece_sizes(frames: int, step: int) -> list[int]:
    """The stream's pieces (output frames each, multiples of `step`) covering `frames` output frames: pieces of
    `LARGE_PIECE` while a whole one is filled, then pieces of `PIECE`; at most two programs per job.

    Every piece recomputes the network's context, and the last one is padded: large pieces recompute the
    context less often, small ones at the end keep the padding under `PIECE` frames, and a short job (one
    utterance) computes no more than with small pieces alone."""
    small, large = step * -(-PIECE // step), step * -(-LARGE_PIECE // step)
    sizes = [large] * (frames // large)
    return sizes + [small] * -(-(frames - sum(sizes)) // small)


def _rows(pieces: Mapping[int, np.ndarray], start: int, count: int) -> np.ndarray:
    """Rows `start .. start + count - 1` of pieces laid one after another (`pieces[row]`: the piece whose first
    row is `row`): a view of the piece where they lie in one, joined otherwise."""
    parts = [
        rows[max(start - row, 0) : start + count - row]
        for row, rows in pieces.items()
        if row < start + count and row + len(rows) > start
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def check_ivector_options(ivectors: bool, online: bool, period: int) -> None:
    """A SymnetError for i-vectors given both ways, or online i-vectors without their period."""
    if ivectors and online:
        raise SymnetError("give --ivectors or --online-ivectors, not both")
    if online and period <= 0:
        raise SymnetError("--online-ivectors needs --online-ivector-period > 0")


def _check_dims(graph: Graph, features: np.ndarray, ivector: Any, online: Any) -> None:
    dim = graph.input_dims.get("input")
    if dim is not None and features.shape[1] != dim:
        raise ShapeError(f"the network expects 'input' features of dim {dim}, but these have dim {features.shape[1]}")
    has_ivector = "ivector" in graph.inputs
    given = ivector is not None or online is not None
    if has_ivector != given:
        raise ShapeError(
            "the network "
            + ("takes" if has_ivector else "has no")
            + " 'ivector' input, but i-vectors "
            + ("were not given" if has_ivector else "were given")
        )
    if has_ivector:
        width = np.shape(ivector)[-1] if ivector is not None else np.shape(online)[-1]
        want = graph.input_dims.get("ivector")
        if want is not None and width != want:
            raise ShapeError(f"the network expects i-vectors of dim {want}, but these have dim {width}")
