"""The minibatches of each epoch of `fit`: from chunks in memory, or planned from a `Corpus`'s index and read ahead.

Both give `Minibatch`es: minibatch `number` of the epoch, `chunks[rows]`, all of one width (`by_width`),
filled up to the batch size with weight-0 repeats; with `drop_partial` (fit's) a width's last, short minibatch
is left out of the epoch instead, as Kaldi's nnet3-merge-egs with one minibatch size discards it. With a mesh
its `rows` are only those this process's devices compute (`DataParallel.local_rows`); a stream then reads only
their sequences. In memory (`MemoryBatches`) an epoch is a permutation drawn from `(seed, epoch)`.

A stream (`StreamBatches`) is planned from its index alone, so that a resume at minibatch `b` makes exactly the
minibatches an uninterrupted run would have made next:

- its sequences are cut into blocks of consecutive ones (about `window_frames / 64` frames: reads stay mostly
  sequential) and the blocks dealt into windows of about `window_frames` frames by a draw from `seed` (a
  stream read in order: consecutive blocks), the same windows every epoch, so every epoch has the same number
  of minibatches (a learning-rate schedule can count on it), as Kaldi's egs archives are the same every epoch;
- each epoch visits the windows in an order drawn from `(seed, epoch)` (a stream read in order: in order)
  and shuffles each window's chunks with a draw of its own (window 0: the draw chunks in memory take, so that a
  stream whose one window holds all its sequences makes the minibatches of the same data in memory), then cuts
  them into minibatches of one width as in memory; a window's last minibatch of each width may be short (filled
  with weight-0 repeats, as in memory, or left out with `drop_partial`).

With `num_frames` (Kaldi's `--num-frames`) a stream's utterances are cut as `nnet3-get-egs` cuts them
(`symnet._src.train.egs_split`), each chunk at its own size and with its output weights, drawn from the seed and
the utterance; a window's chunks are then shuffled and batched by size in the same way. A precut corpus (Kaldi's
egs archives: `symnet._src.train.egs_streams`) is one chunk an item, at its own width, its windows counted in
items (`Corpus.window_sizes`); its minibatches are its own `stack` of a width's items.

Two threads work ahead of the training step: one reads the windows' sequences, one cuts each minibatch as soon as
its sequences are read; at most two windows are held at once, and `prefetch` minibatches. A window is read in
order. `StreamBatches.waited` is the time the step spent waiting for them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from ..base.errors import KaldiDataError
from .egs_split import KaldiChunk, KaldiSplitter, cut_kaldi_chunk
from .examples import Chunks, cut_chunk, stack_chunks
from .streams import Corpus

__all__ = [
    "MemoryBatches",
    "Minibatch",
    "StreamBatches",
    "by_width",
    "count_by_width",
    "filled",
    "minibatch_of",
    "window_plan",
]

#: Blocks of consecutive sequences per window (a window's reads jump this many times).
BLOCKS_PER_WINDOW = 64


@attrs.frozen(eq=False)
class Minibatch:
    """Minibatch `number` of an epoch: the chunks `chunks[rows]` computed at `width` output frames.

    `rows` is the whole minibatch filled up to the batch size (`filled`), or with a mesh this process's part of
    it; `real` says which of them count (the others are repeats, given weight 0); `count` is the number of
    chunks in the whole minibatch (Kaldi's rules' number of sequences).
    """

    number: int
    chunks: Chunks
    rows: np.ndarray
    real: np.ndarray
    count: int
    width: int


def by_width(order: np.ndarray, widths: np.ndarray, batch_size: int, drop_partial: bool = False) -> list[np.ndarray]:
    """The positions `order` cut into minibatches of `batch_size` positions of one width each (`widths[p]`:
    position p's), ordered by where their first position comes in `order`. A width's last minibatch may be
    short; with `drop_partial` it is left out (nnet3-merge-egs with one minibatch size discards it)."""
    rank = np.empty(len(widths), dtype=np.int64)
    rank[order] = np.arange(len(order))
    end = batch_size - 1 if drop_partial else 0
    out = []
    for width in np.unique(widths[order]):
        members = order[widths[order] == width]
        out += [members[start : start + batch_size] for start in range(0, len(members) - end, batch_size)]
    return sorted(out, key=lambda idx: int(rank[idx[0]]))


def count_by_width(widths: np.ndarray, batch_size: int, drop_partial: bool = False) -> int:
    """How many minibatches `by_width` cuts positions of `widths` into."""
    counts = np.unique(widths, return_counts=True)[1]
    return int(sum(n // batch_size if drop_partial else -(-n // batch_size) for n in counts.tolist()))


def filled(idx: np.ndarray, batch_size: int) -> np.ndarray:
    """`idx` filled up to `batch_size` with repeats of its chunks (a minibatch keeps one shape)."""
    pad = batch_size - len(idx)
    return np.concatenate([idx, np.resize(idx, pad)]) if pad else idx


def minibatch_of(number: int, chunks: Chunks, idx: np.ndarray, trainer: Any) -> Minibatch:
    """Minibatch `number`, `chunks[idx]` (all of one width), filled up to `trainer`'s batch size; with a mesh,
    this process's part of it."""
    rows, places = filled(idx, trainer.batch_size), np.arange(trainer.batch_size)
    parallel = getattr(trainer, "parallel", None)
    if parallel is not None:
        rows, places = parallel.local_rows(rows), parallel.local_rows(places)
    width = int(chunks.widths(trainer.widths, idx).max())
    return Minibatch(number, chunks, rows, places < len(idx), len(idx), width)


class MemoryBatches:
    """The minibatches of chunks held in memory (`shuffle=False`: in order, for validation)."""

    def __init__(self, trainer: Any, chunks: Chunks, seed: int, shuffle: bool = True, drop_partial: bool = False):
        self.trainer, self.chunks, self.seed, self.shuffle = trainer, chunks, seed, shuffle
        self.drop_partial = drop_partial
        self.waited = 0.0

    def count(self) -> int:
        return len(self.trainer.batches(self.chunks, np.arange(len(self.chunks)), self.drop_partial))

    @contextlib.contextmanager
    def epoch(self, epoch: int, start: int = 0) -> Iterator[Iterator[Minibatch]]:
        n = len(self.chunks)
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        batches = self.trainer.batches(self.chunks, order, self.drop_partial)
        yield (minibatch_of(b, self.chunks, batches[b], self.trainer) for b in range(start, len(batches)))


def window_plan(lengths: np.ndarray, window_frames: int, seed: int, random_access: bool) -> list[np.ndarray]:
    """The positions of each window's sequences, in reading order (ascending)."""
    block_frames = max(1, window_frames // BLOCKS_PER_WINDOW)
    ends = np.cumsum(lengths)
    # block i holds the sequences whose frames start in [i * block_frames, (i + 1) * block_frames)
    block_of = (ends - lengths) // block_frames
    cuts = np.flatnonzero(np.diff(block_of)) + 1
    blocks = np.split(np.arange(len(lengths)), cuts)
    order = np.random.default_rng([seed, 1 << 20]).permutation(len(blocks)) if random_access else range(len(blocks))
    windows: list[np.ndarray] = []
    members: list[np.ndarray] = []
    frames = 0
    for i in order:
        members.append(blocks[i])
        frames += int(lengths[blocks[i]].sum())
        if frames >= window_frames:
            windows.append(np.sort(np.concatenate(members)))
            members, frames = [], 0
    if members:
        windows.append(np.sort(np.concatenate(members)))
    return windows


class StreamBatches:
    """The minibatches of a `Corpus`, planned per epoch and made ahead on two threads (see the module doc)."""

    def __init__(
        self,
        trainer: Any,
        stream: Corpus,
        seed: int,
        shuffle: bool = True,
        prefetch: int = 4,
        drop_partial: bool = False,
    ):
        self.trainer, self.stream, self.seed, self.shuffle, self.prefetch = trainer, stream, seed, shuffle, prefetch
        self.drop_partial = drop_partial  # a window's short last minibatch of a width is left out (by_width)
        self.parallel = getattr(trainer, "parallel", None)  # with a mesh: read and cut this process's part only
        self.chunk, self.left, self.right = trainer.chunk, trainer.left, trainer.right
        self.windows = window_plan(stream.window_sizes(), stream.window_frames, seed, stream.random_access and shuffle)
        # Kaldi's chunks (nnet3-get-egs), drawn from (seed, utterance): the same in every epoch and every run
        self.splitter = (
            KaldiSplitter(stream.kaldi_sizes, stream.kaldi_overlap, trainer.subsampling)
            if stream.kaldi_sizes is not None and not stream.precut
            else None
        )
        # per window: its chunks as (position, start) rows, and the width each is computed at
        self.chunks: list[np.ndarray] = []
        self.widths: list[np.ndarray] = []
        sizes = np.asarray(trainer.widths, dtype=np.int64)
        for positions in self.windows:
            if stream.precut:  # one chunk an item, at its own width
                self.chunks.append(np.stack([positions, np.zeros_like(positions)], axis=1))
                self.widths.append(stream.lengths[positions])
                continue
            if self.splitter is not None:
                placed = [(p, c.first_frame, c.num_frames) for p in positions.tolist() for c in self.kaldi_chunks(p)]
                table = np.asarray(placed, dtype=np.int64).reshape(-1, 3)
                self.chunks.append(table[:, :2])
                self.widths.append(table[:, 2])
                continue
            lengths = stream.lengths[positions]
            per = -(-lengths // self.chunk)
            rows = np.repeat(positions, per)
            starts = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
            starts *= self.chunk
            frames = np.clip(stream.lengths[rows] - starts, 1, self.chunk)
            self.chunks.append(np.stack([rows, starts], axis=1))
            self.widths.append(sizes[np.minimum(np.searchsorted(sizes, frames), len(sizes) - 1)])
        self.counts = [count_by_width(w, trainer.batch_size, drop_partial) for w in self.widths]
        self.waited = 0.0  # seconds the training step waited for a minibatch

    def count(self) -> int:
        return sum(self.counts)

    def kaldi_chunks(self, position: int) -> list[KaldiChunk]:
        """Kaldi's chunks of the utterance at `position` (with `num_frames`), drawn from (seed, position)."""
        assert self.splitter is not None
        length = int(self.stream.lengths[position])
        return self.splitter.chunks(length, np.random.default_rng([self.seed, position, 1 << 21]))

    def cut(self, data: dict[int, Any], rows: np.ndarray, kaldi: dict[int, dict[int, KaldiChunk]]) -> Chunks | None:
        """The chunks at `rows` of a window's chunk table (those of utterances left out for bad data dropped);
        `kaldi` keeps the window's utterances' Kaldi chunks by first frame, drawn once."""
        if self.stream.precut:
            items = [data[p] for p, _ in rows.tolist() if p in data]
            return self.stream.stack(items) if items else None
        pieces = []
        for p, start in rows.tolist():
            if p not in data:
                continue
            features, targets = data[p]
            if self.splitter is None:
                pieces.append(cut_chunk(features, targets, start, chunk=self.chunk, left=self.left, right=self.right))
                continue
            if p not in kaldi:
                kaldi[p] = {c.first_frame: c for c in self.kaldi_chunks(p)}
            pieces.append(cut_kaldi_chunk(features, targets, kaldi[p][start], left=self.left, right=self.right))
        return stack_chunks(pieces, self.left, self.right) if pieces else None

    def local_part(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of minibatch `rows` (a window's chunk table's), the rows this process's devices compute and which of
        them count (the others fill the minibatch up to the batch size)."""
        assert self.parallel is not None
        places = self.parallel.local_rows(np.arange(self.trainer.batch_size))
        return filled(rows, self.trainer.batch_size)[places], places < len(rows)

    def needed(self, epoch: int, window: int, number: int, start: int) -> list[int]:
        """The positions of `window`'s sequences that its minibatches from `start` need (`number`: the first's
        number in the epoch): all of them, or with a mesh those of this process's part."""
        if self.parallel is None:
            return self.windows[window].tolist()
        table = self.chunks[window]
        parts = [self.local_part(rows)[0] for i, rows in enumerate(self.batches(epoch, window)) if number + i >= start]
        return np.unique(table[np.concatenate(parts), 0]).tolist() if parts else []

    def minibatch(
        self, data: dict[int, Any], window: int, rows: np.ndarray, number: int, kaldi: dict[int, dict[int, KaldiChunk]]
    ) -> Minibatch | None:
        """Minibatch `number`: the chunks at `rows` of `window`'s chunk table (None where all were left out for bad
        data: no step).

        Without a mesh a sequence left out for bad data takes its chunks out of the minibatch. With one, this
        process cuts only its devices' part, and a chunk left out keeps its place at weight 0 (a repeat of
        another of the part's), so that every process's minibatch is the one the others think it is.
        """
        table = self.chunks[window]
        if self.parallel is None:
            chunks = self.cut(data, table[rows], kaldi)
            return None if chunks is None else minibatch_of(number, chunks, np.arange(len(chunks)), self.trainer)
        local, real = self.local_part(rows)
        present = np.array([int(table[r, 0]) in data for r in local])
        if not present.any():
            raise KaldiDataError(
                f"every chunk of minibatch {number} that this process's devices compute was left out for bad "
                f"data ({self.stream.describe()}): with a mesh each process must have one to compute"
            )
        stand_in = local[np.argmax(present)]
        chunks = self.cut(data, table[np.where(present, local, stand_in)], kaldi)
        assert chunks is not None and len(chunks) == len(local)
        width = int(chunks.widths(self.trainer.widths).max())
        return Minibatch(number, chunks, np.arange(len(local)), real & present, len(rows), width)

    def window_order(self, epoch: int) -> np.ndarray:
        if self.stream.random_access and self.shuffle:
            return np.random.default_rng([self.seed, epoch]).permutation(len(self.windows))
        return np.arange(len(self.windows))

    def batches(self, epoch: int, window: int) -> list[np.ndarray]:
        """The minibatches of `window` in `epoch`: rows of its chunk table, each of one width."""
        n = len(self.chunks[window])
        # window 0 draws as chunks in memory do: a stream whose one window holds it all trains as it would in memory
        key = [self.seed, epoch] + ([window] if window else [])
        order = np.random.default_rng(key).permutation(n) if self.shuffle else np.arange(n)
        return by_width(order, self.widths[window], self.trainer.batch_size, self.drop_partial)

    @contextlib.contextmanager
    def epoch(self, epoch: int, start: int = 0) -> Iterator[Iterator[Minibatch]]:
        """The minibatches of `epoch` from `start`, made ahead on two threads that stop when the block ends (a
        minibatch whose every sequence was left out for bad data is not made: no step)."""
        stop = threading.Event()
        read: queue.Queue = queue.Queue()  # pieces of windows; two windows at most (`slots`)
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        slots = threading.Semaphore(2)
        plan = []  # (window, first minibatch number, minibatches) from the window holding `start`
        first = 0
        for w in self.window_order(epoch):
            if first + self.counts[w] > start:
                plan.append((int(w), first))
            first += self.counts[w]

        def put(q: queue.Queue, item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def reader() -> None:
            try:
                for w, number in plan:
                    while not slots.acquire(timeout=0.1):
                        if stop.is_set():
                            return
                    batches = [
                        (number + i, rows) for i, rows in enumerate(self.batches(epoch, w)) if number + i >= start
                    ]
                    order, complete = self.reading_order(epoch, w, number, start, batches)
                    piece: dict[int, Any] = {}
                    done = 0  # minibatches handed over
                    for count, (p, item) in enumerate(self.stream.read(order), start=1):
                        if item is not None:
                            piece[p] = item
                        if done < len(batches) and complete[done] <= count:
                            ahead = int(np.searchsorted(complete, count, side="right"))
                            if not put(read, (w, piece, batches[done:ahead], False)):
                                return
                            piece, done = {}, ahead
                    if not put(read, (w, piece, batches[done:], True)):
                        return
                put(read, None)
            except BaseException as e:
                put(read, e)

        def cutter() -> None:
            try:
                data: dict[int, Any] = {}
                kaldi: dict[int, dict[int, KaldiChunk]] = {}  # the window's Kaldi chunks, drawn once
                while True:
                    item = _get(read, stop)
                    if item is None:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    w, piece, batches, last = item
                    data.update(piece)
                    for number, rows in batches:
                        minibatch = self.minibatch(data, w, rows, number, kaldi)
                        if minibatch is not None and not put(ready, minibatch):
                            return
                    if last:
                        data, kaldi = {}, {}
                        slots.release()
                put(ready, None)
            except BaseException as e:
                put(ready, e)

        threads = [threading.Thread(target=f, daemon=True, name=f"symnet-{f.__name__}") for f in (reader, cutter)]
        for thread in threads:
            thread.start()

        def minibatches() -> Iterator[Minibatch]:
            while True:
                waiting = time.perf_counter()
                item = _get(ready, stop)
                self.waited += time.perf_counter() - waiting
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        try:
            yield minibatches()
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    def reading_order(
        self, epoch: int, window: int, number: int, start: int, batches: list[tuple[int, np.ndarray]]
    ) -> tuple[list[int], np.ndarray]:
        """The positions of `window`'s sequences that its `batches` (from `start`; `number`: the window's first
        minibatch's number) need, in the order they are read (ascending), and for each minibatch how many of them
        are read when its last is (so that it is cut then)."""
        table = self.chunks[window]
        # the sequences of each minibatch (with a mesh, of this process's part)
        uses = [table[rows if self.parallel is None else self.local_part(rows)[0], 0].tolist() for _, rows in batches]
        needed = self.needed(epoch, window, number, start)
        place = {p: i for i, p in enumerate(needed, start=1)}
        return needed, np.maximum.accumulate([max(place[p] for p in used) for used in uses])


def _get(q: queue.Queue, stop: threading.Event) -> Any:
    """The next item of `q`, or None once `stop` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            continue
    return None
