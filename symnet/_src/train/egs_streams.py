"""Kaldi's egs and chain egs archives as corpora that `fit` reads as it trains, in memory bounded by a window.

    train = stream_egs("exp/nnet3/egs/egs.*.ark")
    fit(network, train, optax.adam(1e-3), checkpoint="run.ckpt")

    cegs = stream_cegs("exp/chain/egs/cegs.*.ark", den=read_fst("exp/chain/den.fst"))
    fit(network, cegs.train, optimizer, objective=cegs.objective,
        frame_subsampling_factor=cegs.frame_subsampling_factor)

The archives are indexed once (`symnet._src.kaldi_io.egs_archives`: each example's archive and offset, its
chunk width and context), every example read and checked as `egs_chunks` / `chain_egs` check it; training then
reads examples by offset on `fit`'s reading thread (`symnet._src.train.minibatches`). Each epoch shuffles within
windows of `buffer_size` examples (the memory bound of Kaldi's `nnet3-shuffle-egs --buffer-size`; a window is
blocks of consecutive examples drawn from anywhere in the archives, shuffled whole, where Kaldi's buffer swaps
examples as it reads) and makes minibatches of examples of one chunk width: recipes' mixed sizes
(`--num-frames=150,110,100`) train side by side, each minibatch computed at its width. All examples must have one
context (a minibatch's computation has one) and, for chain egs, one frame subsampling factor.

Chain egs parsed while indexing (their features, numerator graph and derivative weights) are kept for training
up to `CHAIN_EGS_CACHE_BYTES` (a small archive's all, a large one's first ones), and the others read again as
training needs them: parsing an eg (its index vectors and supervision FST) is most of the reading thread's work,
which otherwise keeps the training step waiting.

A stream's one window holding every example, in the archives' order, trains exactly as the same examples in
memory (`Chunks(*egs_chunks(...))`, `chain_egs(...)`); a run resumes mid-epoch bit for bit. A damaged example is a
`KaldiDataError` naming the archive and the byte it starts at; with `on_error="skip"` it is left out, listed in
`.skipped` and warned about (while indexing, the rest of a damaged archive with it: an archive cannot be read past
damage).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from ..base.errors import KaldiDataError, SymnetError
from ..chain.graph import ChainGraph, numerator_graph
from ..chain.objective import ChainOptions
from ..kaldi_io.egs import check_soft, eg_arrays
from ..kaldi_io.egs_archives import EgsArchives, Place
from ..kaldi_io.fst import Fst
from .chain_egs import Held, HeldChunks, HeldSupervision, StreamedChainEgs, chain_arrays
from .examples import Chunks, stack_chunks
from .streams import ON_ERROR, Corpus, file_stamps

__all__ = [
    "CHAIN_EGS_CACHE_BYTES",
    "DEFAULT_BUFFER_SIZE",
    "ChainEgsCorpus",
    "ChainEgsStream",
    "EgsCorpus",
    "PrecutCorpus",
    "stack_held",
    "stream_cegs",
    "stream_egs",
]

#: Examples shuffled together (Kaldi's recipes give nnet3-shuffle-egs --buffer-size=5000): 5,000 egs of 150
#: frames of 40-dim features are 120 MB.
DEFAULT_BUFFER_SIZE = 5000
#: Bytes of parsed chain egs a stream keeps from one epoch to the next (see the module doc).
CHAIN_EGS_CACHE_BYTES = 256 << 20

Sources = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class PrecutCorpus(Corpus):
    """A corpus of egs, each item one chunk at its own width (`lengths`) and the corpus's context; its windows are
    counted in examples (`window_frames`: the buffer size)."""

    precut = True

    def window_sizes(self) -> np.ndarray:
        """Each example counts one against the buffer size."""
        return np.ones(len(self), np.int64)

    def sample(self) -> Any:
        """The first readable example of the largest width (`fit` plans its computations from it)."""
        for _, item in self.read(np.flatnonzero(self.lengths == self.lengths.max()).tolist()):
            if item is not None:
                return item
        return super().sample()


def stack_held(items: Sequence[Any], left: int, right: int) -> HeldChunks:
    """A minibatch of streamed chain egs (`(piece, Held)` items): their chunks, holding their supervision."""
    chunks = stack_chunks([piece for piece, _ in items], left, right)
    held = tuple(held for _, held in items)
    return HeldChunks(chunks.features, chunks.targets, chunks.weights, chunks.left, chunks.right, held=held)


class EgsCorpus(PrecutCorpus):
    """nnet3 egs read as training goes: each example one chunk (its `lengths`: output frames), at the context it
    was cut with (`left`, `right`)."""

    chain = False

    def __init__(
        self, sources: Sources, *, buffer_size: int, on_error: str, soft: str = "error", output: str = "output"
    ):
        check_soft(soft)
        if on_error not in ON_ERROR:
            raise KaldiDataError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise KaldiDataError(f"buffer_size must be an integer >= 1 (examples), got {buffer_size!r}")
        self.soft, self.output = soft, output
        self.archives = EgsArchives(sources, chain=self.chain)
        self.places: list[Place] = []
        widths: list[int] = []
        bad: list[tuple[str, str]] = []
        self.context: tuple[int, int] | None = None
        first = ""
        for place, example in self.archives.index(skip=on_error == "skip"):
            try:
                if isinstance(example, KaldiDataError):
                    raise example
                width, context = self._shape(place, example)
                if self.context is not None and context != self.context:
                    raise KaldiDataError(
                        f"{place.file}: byte {place.offset}: example {place.key!r} has context {context}, but "
                        f"{first!r} has {self.context}: a stream's egs share one context (a minibatch has one)"
                    )
            except SymnetError as e:
                if on_error != "skip":
                    raise
                bad.append((place.key, str(e)))
                continue
            self.context, first = context, first or place.key
            self.places.append(place)
            widths.append(width)
        super().__init__([p.key for p in self.places], widths, window_frames=buffer_size, on_error=on_error)
        assert self.context is not None  # Corpus refuses a stream without examples
        self.left, self.right = self.context
        #: The egs' chunk widths, largest first (`fit` computes each minibatch at its own).
        self.kaldi_sizes = tuple(sorted(set(widths), reverse=True))
        for key, reason in bad:
            self._skip(key, reason)

    def describe(self) -> str:
        files = self.archives.files()
        return f"egs {files[0]!r}" + (f" and {len(files) - 1} more" if len(files) > 1 else "")

    def identity(self) -> Iterable[bytes]:
        yield repr((self.chain, self.soft, self.output, self.context)).encode()
        for place in self.places:
            yield repr((place.file, place.offset)).encode()
        yield from file_stamps([*self.archives.files(), *(p.file for p in self.places)])

    def stack(self, items: Sequence[Any]) -> Chunks:
        return stack_chunks(items, self.left, self.right)

    def _shape(self, place: Place, example: Any) -> tuple[int, tuple[int, int]]:
        """An example's width and context, checked as training will take it."""
        arrays = self._arrays(place, example)
        return len(arrays.targets), (arrays.left, arrays.right)

    def _arrays(self, place: Place, example: Any) -> Any:
        try:
            return eg_arrays(example, soft=self.soft, output=self.output)
        except KaldiDataError as e:
            raise KaldiDataError(f"{place.file}: byte {place.offset}: {e}") from None

    def _item(self, position: int) -> Any:
        place = self.places[position]
        arrays = self._arrays(place, self.archives.read(place))
        self._check_width(place, len(arrays.targets), position)
        return arrays.features, arrays.targets, arrays.weights, None

    def _check_width(self, place: Place, width: int, position: int) -> None:
        if width != self.lengths[position]:
            raise KaldiDataError(
                f"{place.file}: byte {place.offset}: example {place.key!r} has {width} frames, but the index said "
                f"{int(self.lengths[position])} (was the archive changed while training?)"
            )


class ChainEgsCorpus(EgsCorpus):
    """Chain egs read as training goes, as `EgsCorpus`; each item's targets hold the number its supervision is
    found by (`HeldSupervision`) while its minibatch lives."""

    chain = True

    def __init__(
        self,
        sources: Sources,
        supervisions: HeldSupervision,
        *,
        buffer_size: int,
        on_error: str,
        input: str = "input",
        output: str = "output",
    ):
        self.supervisions, self.input = supervisions, input
        self.subsampling: int | None = None
        self.arcs = self.states = 0  # the largest numerator graph
        # per (archive, offset), the eg parsed: features, numerator graph, derivative weights (see the module doc)
        self._parsed: dict[tuple[str, int], tuple[np.ndarray, ChainGraph, np.ndarray]] = {}
        self._parsed_bytes = 0
        self._parsed_lock = threading.Lock()  # the reading thread parses; the sample is read on the caller's
        # (an eg left out after it was parsed, for its context, stays: never looked up, a little of the room)
        super().__init__(sources, buffer_size=buffer_size, on_error=on_error, output=output)

    def identity(self) -> Iterable[bytes]:
        yield repr(self.input).encode()
        yield from super().identity()

    def stack(self, items: Sequence[Any]) -> Chunks:
        return stack_held(items, self.left, self.right)

    def _shape(self, place: Place, example: Any) -> tuple[int, tuple[int, int]]:
        arrays = self._arrays(place, example)
        k = arrays.shape["k"]
        if self.subsampling is not None and k != self.subsampling:
            raise KaldiDataError(
                f"{place.file}: byte {place.offset}: example {place.key!r} has frame subsampling {k}, the "
                f"stream's first {self.subsampling}: a stream's egs share one"
            )
        sup = arrays.supervision
        self.subsampling = k
        self.arcs, self.states = max(self.arcs, sup.fst.num_arcs), max(self.states, sup.fst.num_states)
        if self._parsed_bytes < CHAIN_EGS_CACHE_BYTES:
            self._keep(place, (arrays.features, numerator_graph(sup.fst, sup.label_dim), arrays.deriv_weights))
        return arrays.shape["width"], (arrays.shape["left"], arrays.shape["right"])

    def _arrays(self, place: Place, example: Any) -> Any:
        try:
            return chain_arrays(example, self.input, self.output)
        except SymnetError as e:
            raise KaldiDataError(f"{place.file}: byte {place.offset}: {e}") from None

    def _item(self, position: int) -> Any:
        place = self.places[position]
        with self._parsed_lock:
            parsed = self._parsed.get((place.file, place.offset))
        if parsed is None:  # past the cache's room: read again
            arrays = self._arrays(place, self.archives.read(place))
            self._check_width(place, arrays.shape["width"], position)
            sup = arrays.supervision
            parsed = (arrays.features, numerator_graph(sup.fst, sup.label_dim), arrays.deriv_weights)
        features, graph, deriv_weights = parsed
        width = int(self.lengths[position])
        held = Held(graph, deriv_weights, self.arcs, self.states)
        number = self.supervisions.add(held)
        piece = (features, np.full(width, number, np.int64), np.ones(width, np.float32), None)
        return piece, held

    def _keep(self, place: Place, parsed: tuple[np.ndarray, ChainGraph, np.ndarray]) -> None:
        """Keep the eg at `place`, parsed, for training while the cache has room."""
        size = _parsed_size(parsed)
        with self._parsed_lock:
            if self._parsed_bytes + size <= CHAIN_EGS_CACHE_BYTES:
                self._parsed[(place.file, place.offset)] = parsed
                self._parsed_bytes += size


def _parsed_size(parsed: tuple[np.ndarray, ChainGraph, np.ndarray]) -> int:
    """The bytes of a parsed chain eg's arrays."""
    features, graph, deriv_weights = parsed
    arrays = (features, deriv_weights, graph.src, graph.dst, graph.pdf, graph.log_prob, graph.log_initial)
    return sum(a.nbytes for a in (*arrays, graph.log_final))


@attrs.frozen(eq=False)
class ChainEgsStream:
    """What `stream_cegs` (and `stream_chain_data`) returns: the examples as a corpus `train` (and `valid`, or
    None), the `objective` that finds their numerators, and the egs' `frame_subsampling_factor` (for `fit`)."""

    train: Corpus
    valid: Corpus | None
    objective: StreamedChainEgs
    frame_subsampling_factor: int


def stream_egs(
    sources: Sources,
    *,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    on_error: str = "stop",
    soft: str = "error",
    output: str = "output",
) -> EgsCorpus:
    """nnet3 egs archives (an archive, `ark:`, `scp:`, a glob such as `egs.*.ark`, or a list of them) as a corpus
    `fit` reads as it trains, shuffled within windows of `buffer_size` examples (see the module doc). Each example
    is taken as `egs_chunks` takes it (`soft`, `output`); `on_error`: "stop" (a KaldiDataError) or "skip" (the
    example is left out, listed in `.skipped` and warned about)."""
    return EgsCorpus(sources, buffer_size=buffer_size, on_error=on_error, soft=soft, output=output)


def stream_cegs(
    sources: Sources,
    den: Fst | ChainGraph,
    *,
    valid: Sources | None = None,
    options: ChainOptions | None = None,
    input: str = "input",
    output: str = "output",
    xent_output: str | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    on_error: str = "stop",
) -> ChainEgsStream:
    """Chain egs archives (as `stream_egs` takes them; `valid`: other archives, e.g. valid_diagnostic.cegs) as
    corpora `fit` reads as it trains, with the chain objective that trains on them exactly as on `chain_egs(...)`
    of the same egs in memory (`den`, `options`, `input`, `output`, `xent_output`: `chain_egs`'s)."""
    supervisions = HeldSupervision()

    def corpus(what: Sources) -> ChainEgsCorpus:
        return ChainEgsCorpus(
            what, supervisions, buffer_size=buffer_size, on_error=on_error, input=input, output=output
        )

    train = corpus(sources)
    held_out = corpus(valid) if valid is not None else None
    if held_out is not None and held_out.subsampling != train.subsampling:
        raise KaldiDataError(
            f"{held_out.describe()} have frame subsampling {held_out.subsampling}, {train.describe()} "
            f"{train.subsampling}: they must have one"
        )
    objective = StreamedChainEgs(
        den=den, options=options or ChainOptions(), xent_output=xent_output, supervisions=supervisions
    )
    assert train.subsampling is not None  # set by the first example
    return ChainEgsStream(train, held_out, objective, train.subsampling)
