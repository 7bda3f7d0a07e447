"""Corpora larger than memory: sequences that `fit` reads from disk as it trains on them.

A `Corpus` is an index of a corpus (each sequence's key and number of frames) and a way to read sequences by
their position in it. `fit` plans every epoch from the index alone (`symnet._src.train.batch_plan`) and reads
what the coming minibatches need on a background thread, so its memory is bounded by the shuffle window
(`window_frames`), not by the corpus:

    train = stream_kaldi_data("scp:data/train/feats.scp", "ark:exp/ali/pdf.ark")
    fit(network, train, optax.adam(1e-3), checkpoint="run.ckpt")

- `stream_kaldi_data`: a Kaldi data directory's features (`scp:`; each matrix's frames read from its header,
  the matrix when a minibatch needs it) with alignments or target matrices (an `scp:`, or an archive indexed
  once by offset; a piped archive is read into memory, as it can be read only once).
- `stream_sequences`: any source of `(features, targets)` or `(key, features, targets)`: a function that
  returns a fresh iterator each time (or a re-iterable such as a list). One pass indexes the lengths; every
  epoch then reads it in order, so it is shuffled within windows only.

Bad data found while training (a damaged entry, a length mismatch, values that are not finite) is a
`KaldiDataError` naming the table, the utterance and the entry (file and offset), or, with `on_error="skip"`,
the sequence is left out of its minibatches, listed in `Corpus.skipped` and warned about: never a silent change.
A missing alignment is found when the stream is made, as `read_kaldi_data` finds it (`skip_missing`).
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..base.errors import KaldiDataError, ShapeError, SymnetError
from ..base.text import is_digits
from ..kaldi_io.ark import ark_offsets
from ..kaldi_io.scp import entry_rows, is_command, read_entry
from ..kaldi_io.tables import Table, parse_spec, reading, scp_entries
from .egs_split import parse_num_frames
from .examples import Chunks
from .kaldi_data import Utterance, _ids, check_subsampling, checked_utterance

__all__ = ["DEFAULT_WINDOW_FRAMES", "SkippedDataWarning", "Corpus", "stream_kaldi_data", "stream_sequences"]

#: Frames read and shuffled together (a window; `fit` reads the next while training on one): 2^18 frames of
#: 80-dim float32 features are 84 MB.
DEFAULT_WINDOW_FRAMES = 1 << 18

ON_ERROR = ("stop", "skip")


class SkippedDataWarning(UserWarning):
    """A sequence left out of training: bad data (`on_error="skip"`), or one Kaldi makes no egs of (shorter than
    every chunk size)."""


class Corpus:
    """A corpus `fit` reads as it trains: `keys`, `lengths` (frames) and `read`, which gives sequences by position.

    `random_access`: sequences can be read in any order (windows are then visited in a new order each epoch),
    else only in the stream's order. `window_frames`: the frames of the sequences shuffled together.
    `precut`: each item is one chunk already, at its own width and context (Kaldi's egs: `symnet._src.train.
    egs_streams`), which `stack` makes minibatches of; else items are sequences that `fit` cuts into chunks.
    """

    random_access = True
    precut = False

    def __init__(self, keys: Sequence[str], lengths: Sequence[int], *, window_frames: int, on_error: str):
        if on_error not in ON_ERROR:
            raise KaldiDataError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if isinstance(window_frames, bool) or not isinstance(window_frames, int) or window_frames < 1:
            raise KaldiDataError(f"window_frames must be an integer >= 1, got {window_frames!r}")
        if not len(keys):
            raise KaldiDataError(f"{self.describe()}: no sequences in it")
        self.keys = tuple(keys)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.lengths.setflags(write=False)
        self.window_frames = window_frames
        self.on_error = on_error
        #: Kaldi's `--num-frames` (principal size first) and `--num-frames-overlap` where the corpus is cut into
        #: chunks as `nnet3-get-egs` cuts them (`symnet._src.train.egs_split`); None: fit's own chunks.
        self.kaldi_sizes: tuple[int, ...] | None = None
        self.kaldi_overlap = 0
        #: `(key, reason)` of every sequence left out (bad data under `on_error="skip"`, or too short for
        #: every chunk size), in the order found.
        self.skipped: list[tuple[str, str]] = []
        self._first: Utterance | None = None
        self._lock = threading.RLock()  # reads come from fit's reading thread and from `sample`

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    def describe(self) -> str:
        """The stream in words, for messages."""
        return type(self).__name__

    def identity(self) -> Iterable[bytes]:
        """What the stream's digest covers besides its keys and lengths (subclasses: file names, sizes, times)."""
        return ()

    def digest(self) -> str:
        """A digest of what defines the stream for a resume: its keys, lengths, window and sources."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((type(self).__name__, self.window_frames, self.kaldi_sizes, self.kaldi_overlap)).encode())
        h.update("\n".join(self.keys).encode())
        h.update(self.lengths.tobytes())
        for part in self.identity():
            h.update(part)
        return h.hexdigest()

    def cut_as_kaldi(self, num_frames: str | int | Sequence[int] | None, num_frames_overlap: int = 0) -> Corpus:
        """This corpus cut into chunks as Kaldi's `nnet3-get-egs --num-frames=... --num-frames-overlap=...` cuts
        utterances (None: as `fit` cuts them, chunks of its `chunk` frames)."""
        if num_frames is None:
            if num_frames_overlap:
                raise KaldiDataError("num_frames_overlap without num_frames: it is an option of Kaldi's chunks")
            return self
        sizes = parse_num_frames(num_frames)
        if isinstance(num_frames_overlap, bool) or not isinstance(num_frames_overlap, int):
            raise KaldiDataError(f"num_frames_overlap must be an integer, got {num_frames_overlap!r}")
        if not 0 <= num_frames_overlap < sizes[0]:
            raise KaldiDataError(
                f"num_frames_overlap {num_frames_overlap} must be >= 0 and below the principal size {sizes[0]}"
            )
        self.kaldi_sizes, self.kaldi_overlap = sizes, num_frames_overlap
        return self

    def window_sizes(self) -> np.ndarray:
        """What each sequence counts against `window_frames`: its frames."""
        return self.lengths

    def read(self, positions: Sequence[int]) -> Iterator[tuple[int, Any]]:
        """`(position, item)` of each position in the order given: a sequence's `(features float32 [T, D],
        targets)` (a precut corpus: what `stack` takes); `(position, None)` for one left out for bad data
        (`on_error="skip"`)."""
        for position in positions:
            yield self._guarded(int(position), self._item)

    def _guarded(self, position: int, make: Callable[[int], Any]) -> tuple[int, Any]:
        """`(position, make(position))`; with `on_error="skip"`, `(position, None)` where it raises a SymnetError
        (the sequence left out and counted), else the error."""
        try:
            return position, make(position)
        except SymnetError as e:
            if self.on_error == "stop":
                raise
            self._skip(self.keys[position], str(e))
            return position, None

    def sample(self) -> Any:
        """The first item that reads without error (for the checks `fit` makes before it trains)."""
        for _, item in self.read(range(len(self))):
            if item is not None:
                return item
        raise KaldiDataError(f"{self.describe()}: every sequence was left out for bad data")

    def stack(self, items: Sequence[Any]) -> Chunks:
        """A minibatch of a precut corpus's items, all of one width."""
        raise NotImplementedError

    def _item(self, position: int) -> Any:
        return self._checked(position, *self._load(position))

    def _load(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _checked(self, position: int, features: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = self.keys[position]
        features, targets = self._check(key, features, targets)
        if len(features) != self.lengths[position]:
            raise KaldiDataError(
                f"{self.describe()}: utterance {key!r} has {len(features)} frames, but the index said "
                f"{int(self.lengths[position])} (was a file changed while training?)"
            )
        with self._lock:
            if self._first is None:
                self._first = Utterance(key, features.shape[1], targets.shape[1:])
        return features, targets

    def _check(self, key: str, features: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return checked_utterance(key, features, targets, "stream_sequences", "stream_sequences", self._first)

    def _skip(self, key: str, reason: str) -> None:
        with self._lock:
            self.skipped.append((key, reason))
        warnings.warn(f"left out utterance {key!r}: {reason}", SkippedDataWarning, stacklevel=2)


class KaldiCorpus(Corpus):
    """Features from a Kaldi scp (each matrix read when needed) and targets from an scp or an archive."""

    def __init__(
        self,
        features: str,
        targets: str,
        *,
        skip_missing: bool,
        allow_pipes: bool,
        frame_subsampling_factor: int,
        window_frames: int,
        on_error: str,
    ):
        self.features, self.targets, self.allow_pipes = features, targets, allow_pipes
        self.frame_subsampling_factor = frame_subsampling_factor
        kind, self.features_path = parse_spec(features, "features")
        if kind != "scp":
            raise KaldiDataError(
                f"features {features!r}: a stream reads each utterance by its offset, from an scp (a data "
                "directory's feats.scp); make one with Kaldi's copy-feats ark:in.ark ark,scp:out.ark,out.scp, "
                "or read the archive into memory with read_kaldi_data"
            )
        self._feature_entries = scp_entries(self.features_path, features, "features", allow_pipes)
        self._targets = _TargetTable(targets, allow_pipes)
        missing = [key for key in self._feature_entries if key not in self._targets]
        if missing and (not skip_missing or len(missing) == len(self._feature_entries)):
            common = "" if len(missing) < len(self._feature_entries) else " (no utterance id in common)"
            raise KaldiDataError(
                f"targets {targets!r} have no entry for {len(missing)} of the {len(self._feature_entries)} "
                f"utterances of features {features!r}{common}: {_ids(missing)}"
                + ("" if skip_missing or common else "; pass skip_missing=True to leave them out")
            )
        #: Utterances without targets, left out (`skip_missing=True`), as `KaldiData.skipped`.
        self.missing = tuple(missing)
        keys, lengths, bad = [], [], []
        for key in self._feature_entries:
            if key not in self._targets:
                continue
            try:
                with reading(features, "features"):
                    lengths.append(entry_rows(self._feature_entries[key], self.features_path, key, allow_pipes))
                keys.append(key)
            except KaldiDataError as e:
                if on_error != "skip":
                    raise
                bad.append((key, str(e)))
        super().__init__(keys, lengths, window_frames=window_frames, on_error=on_error)
        for key, reason in bad:
            self._skip(key, reason)

    def describe(self) -> str:
        return f"features {self.features!r} with targets {self.targets!r}"

    def split(self, fraction: float) -> tuple[KaldiCorpus, KaldiCorpus]:
        """`(train, held_out)` as `KaldiData.split` makes them: the last `fraction` of the utterances by id held out
        (at least one), the rest kept, each a stream of its own."""
        if not 0 < fraction < 1:
            raise KaldiDataError(f"the held-out fraction must be between 0 and 1, got {fraction!r}")
        if len(self) < 2:
            raise KaldiDataError(f"cannot hold out a fraction of {len(self)} utterance(s)")
        order = sorted(range(len(self)), key=lambda i: self.keys[i])
        held = max(1, round(fraction * len(self)))
        return self._subset(sorted(order[: len(self) - held])), self._subset(sorted(order[len(self) - held :]))

    def _subset(self, positions: Sequence[int]) -> KaldiCorpus:
        part = copy.copy(self)
        part.keys = tuple(self.keys[i] for i in positions)
        part.lengths = self.lengths[list(positions)]
        part.lengths.setflags(write=False)
        part.skipped, part._first, part._lock = [], None, threading.RLock()
        return part

    def identity(self) -> Iterable[bytes]:
        yield repr((self.features, self.targets, self.frame_subsampling_factor)).encode()
        for key in self.keys:
            yield self._feature_entries[key].encode()
        files = {file_of(self._feature_entries[key]) for key in self.keys} | {self._targets.path}
        yield from file_stamps(f for f in files if f is not None)

    def _load(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        key = self.keys[position]
        with reading(self.features, "features"):
            features = read_entry(self._feature_entries[key], self.features_path, key, self.allow_pipes)
        return features, self._targets[key]

    def _check(self, key: str, features: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return checked_utterance(
            key, features, targets, self.features, self.targets, self._first, self.frame_subsampling_factor
        )


class _TargetTable:
    """Targets by key: an scp's entries, an archive's offsets (read by offset when asked for), or, for an archive
    that is a command's output (readable once), the values themselves."""

    def __init__(self, spec: str, allow_pipes: bool):
        self.spec, self.allow_pipes = spec, allow_pipes
        kind, self.path = parse_spec(spec, "targets")
        self.entries: dict[str, str] = {}
        self.values: dict[str, np.ndarray] = {}
        if kind == "scp":
            self.entries = scp_entries(self.path, spec, "targets", allow_pipes)
        elif is_command(self.path) or self.path == "-" or not os.path.isfile(self.path):
            self.values = dict(Table(spec, "targets", allow_pipes))
        else:
            with reading(spec, "targets"), open(self.path, "rb") as f:
                for key, offset in ark_offsets(f, self.path):
                    if key in self.entries:
                        raise KaldiDataError(f"targets {spec!r}: utterance {key!r} appears twice")
                    self.entries[key] = f"{self.path}:{offset}"

    def __contains__(self, key: str) -> bool:
        return key in self.entries or key in self.values

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.values:
            return self.values[key]
        with reading(self.spec, "targets"):
            value: np.ndarray = read_entry(self.entries[key], self.path, key, self.allow_pipes)
        return value


def file_of(entry: str) -> str | None:
    """The file an scp entry reads (None for a command)."""
    if is_command(entry):
        return None
    name, _, tail = entry.rpartition(":")
    return name if name and is_digits(tail.split("[", 1)[0]) else entry


def file_stamps(names: Iterable[str]) -> Iterator[bytes]:
    """Each file's name, size and modification time (None where it cannot be read), sorted by name: what a
    stream's digest covers of its files, so a resume notices one that changed."""
    for name in sorted(set(names)):
        try:
            st = os.stat(name)
            yield repr((name, st.st_size, st.st_mtime_ns)).encode()
        except OSError:
            yield repr((name, None)).encode()


class SequenceCorpus(Corpus):
    """Sequences from a function that makes a fresh iterator of them (read in order, indexed by one pass)."""

    random_access = False

    def __init__(self, make: Callable[[], Iterable[Any]], *, window_frames: int, on_error: str):
        self._make = make
        self._iterator: Iterator[tuple[str, np.ndarray, np.ndarray]] | None = None
        self._next = 0  # the position the iterator gives next
        h = hashlib.blake2b(digest_size=16)
        keys, lengths = [], []
        for key, features, targets in self._items():
            if features.ndim != 2 or not len(features):
                raise ShapeError(f"sequence {key!r}: features must be [T, D] with T > 0, got shape {features.shape}")
            keys.append(key)
            lengths.append(len(features))
            for array in (features, targets):
                array = np.ascontiguousarray(array)
                h.update(repr((array.dtype.str, array.shape)).encode())
                h.update(array.data.cast("B"))
        self._content = h.hexdigest().encode()
        super().__init__(keys, lengths, window_frames=window_frames, on_error=on_error)

    def identity(self) -> Iterable[bytes]:
        yield self._content

    def _items(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        items = self._make()
        iterator = iter(items)
        for i, item in enumerate(iterator):
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise ShapeError(
                    f"sequence {i}: a stream's items are (features, targets) or (key, features, targets), got "
                    f"{type(item).__name__}"
                )
            key, features, targets = (str(i), *item) if len(item) == 2 else (str(item[0]), item[1], item[2])
            try:
                yield key, np.asarray(features), np.asarray(targets)
            except (ValueError, TypeError) as e:
                raise ShapeError(f"sequence {key!r}: its features and targets must be arrays ({e})") from None

    def read(self, positions: Sequence[int]) -> Iterator[tuple[int, Any]]:
        with self._lock:  # one reader at a time: the iterator is shared
            yield from super().read(positions)

    def _load(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        if self._iterator is None or position < self._next:  # back to the start: a fresh iterator
            self._iterator, self._next = self._items(), 0
        for _ in range(position - self._next):
            next(self._iterator)
        key, features, targets = next(self._iterator, (None, None, None))
        self._next = position + 1
        if key != self.keys[position]:
            raise KaldiDataError(
                f"sequence {position} is {key!r}, but it was {self.keys[position]!r} when the stream was indexed: "
                "its source must give the same sequences each time"
            )
        assert features is not None and targets is not None  # a sequence was found
        return features, targets


def stream_kaldi_data(
    features: str,
    targets: str,
    *,
    skip_missing: bool = False,
    allow_pipes: bool = False,
    frame_subsampling_factor: int = 1,
    window_frames: int = DEFAULT_WINDOW_FRAMES,
    on_error: str = "stop",
    num_frames: str | int | Sequence[int] | None = None,
    num_frames_overlap: int = 0,
) -> Corpus:
    """A Kaldi corpus that `fit` reads as it trains: `read_kaldi_data`'s arguments and checks, in memory bounded
    by `window_frames` (see the module doc). `features` is an `scp:`; `on_error`: "stop" (a KaldiDataError) or
    "skip" (the utterance is left out, listed in `.skipped` and warned about). With `num_frames` (Kaldi's
    `--num-frames`, e.g. "150,110,100") and `num_frames_overlap`, utterances are cut into chunks as
    `nnet3-get-egs` cuts them, on the fly."""
    check_subsampling(frame_subsampling_factor)
    return KaldiCorpus(
        features,
        targets,
        skip_missing=skip_missing,
        allow_pipes=allow_pipes,
        frame_subsampling_factor=frame_subsampling_factor,
        window_frames=window_frames,
        on_error=on_error,
    ).cut_as_kaldi(num_frames, num_frames_overlap)


def stream_sequences(
    source: Callable[[], Iterable[Any]] | Iterable[Any],
    *,
    window_frames: int = DEFAULT_WINDOW_FRAMES,
    on_error: str = "stop",
    num_frames: str | int | Sequence[int] | None = None,
    num_frames_overlap: int = 0,
) -> Corpus:
    """A stream of `(features [T, D], targets)` or `(key, features, targets)` items from `source`: a function
    returning a fresh iterator of them (a generator function), or a re-iterable. One iterator (a generator
    object) can be read only once, and `fit` reads the stream once to index it and once per epoch: it is refused.
    `num_frames` and `num_frames_overlap`: Kaldi's chunks, as in `stream_kaldi_data`.
    """
    if isinstance(source, Iterator):
        raise ShapeError(
            "stream_sequences takes a function that returns a fresh iterator (e.g. the generator function, or "
            "lambda: make_examples()), not an iterator: an iterator can be read only once, and fit reads the "
            "stream once to index it and once per epoch"
        )
    make = source if callable(source) else (lambda: source)
    corpus = SequenceCorpus(make, window_frames=window_frames, on_error=on_error)
    return corpus.cut_as_kaldi(num_frames, num_frames_overlap)
