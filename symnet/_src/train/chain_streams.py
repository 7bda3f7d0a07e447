"""Chain egs cut on the fly from a Kaldi data directory, read as `fit` trains: the stream form of `chain_examples`.

    stream = stream_chain_data("scp:data/train/feats.scp", phone_lengths, Topology.chain(phones), den,
                               num_frames="150,110,100", left_context=29, right_context=29)
    fit(network, stream.train, optimizer, objective=stream.objective,
        frame_subsampling_factor=stream.frame_subsampling_factor)

The index is made from the scp alone (each matrix's frames from its header) and the phone lengths (small, in
memory): each utterance's chunks are placed as `chain_examples` places them (Kaldi's UtteranceSplitter, seeded by
`seed` and the utterance), before any feature is read. Training then makes the chunks' egs (`chunk_example`, as
`chain_examples` makes them: the same rows, derivative weights and numerator) a window at a time on `fit`'s
reading thread, each utterance's features read by offset once a window; memory is bounded by the shuffle window
(`buffer_size` examples) as for `stream_cegs`. A window's numerators are all made before its first minibatch is
cut, so each is padded to the largest of its chunk width in the window (a power of two of arcs and of states),
and a minibatch to at least what earlier minibatches of its width were (`StreamedChainEgs`; padding adds no
path): `fit` compiles one step per chunk width for the window, where padding each minibatch to its own largest
compiled another each time a minibatch held a larger numerator (each a whole training step's compilation). A
stream trains as the same egs in memory do, and resumes bit for bit (its checkpoints keep the padding so far:
padding changes the roundoff). The numerators made are kept for the next epochs up to `NUMERATOR_CACHE_BYTES` (a
small corpus's all, a large one's first ones): making them is most of the reading thread's work.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..base.errors import KaldiDataError, SymnetError
from ..chain.graph import ChainGraph, denominator_graph, numerator_graph
from ..chain.objective import ChainOptions
from ..chain.phone_numerator import phone_numerator
from ..chain.topology import Topology
from ..kaldi_io.compress import kaldi_compressed
from ..kaldi_io.fst import Fst
from ..kaldi_io.scp import entry_rows, read_entry
from ..kaldi_io.tables import parse_spec, reading, scp_entries
from .chain_cutting import check_lengths, chunk_input, chunk_output, key_number
from .chain_egs import Held, HeldSupervision, StreamedChainEgs
from .egs_split import KaldiChunk, KaldiSplitter
from .egs_streams import DEFAULT_BUFFER_SIZE, ChainEgsStream, PrecutCorpus, stack_held
from .examples import Chunks
from .streams import file_of, file_stamps

__all__ = ["NUMERATOR_CACHE_BYTES", "ChainDataCorpus", "stream_chain_data"]

#: Bytes of chunk numerators (graph arrays and derivative weights) a stream keeps from one epoch to the next.
NUMERATOR_CACHE_BYTES = 256 << 20
#: Utterance numerators kept while their chunks' egs are made (each a few kilobytes; a window's chunks of one
#: utterance are made one after another).
UTTERANCE_NUMERATORS = 8


class ChainDataCorpus(PrecutCorpus):
    """Chain egs of a data directory's utterances, cut and made as training reads them (see the module doc)."""

    chain = True

    def __init__(
        self,
        features: str,
        phone_lengths: Mapping[str, Any],
        make: Mapping[str, Any],
        supervisions: HeldSupervision,
        *,
        buffer_size: int,
        on_error: str,
        allow_pipes: bool = False,
    ):
        kind, self.features_path = parse_spec(features, "features")
        if kind != "scp":
            raise KaldiDataError(f"features {features!r}: a stream reads each utterance by its offset, from an scp")
        self.features, self.allow_pipes, self.make, self.supervisions = features, allow_pipes, make, supervisions
        self.phone_lengths = {key: np.asarray(value) for key, value in phone_lengths.items()}
        self._entries = scp_entries(self.features_path, features, "features", allow_pipes)
        k = make["k"]
        splitter = KaldiSplitter(make["num_frames"], make["num_frames_overlap"], k)
        self.places: list[tuple[str, KaldiChunk]] = []
        keys, widths, bad = [], [], []
        for key, entry in self._entries.items():
            try:
                with reading(features, "features"):
                    rows = entry_rows(entry, self.features_path, key, allow_pipes)
                length = check_lengths(key, rows, self.phone_lengths.get(key), k)
            except KaldiDataError as e:
                if on_error != "skip":
                    raise
                bad.append((key, str(e)))
                continue
            placed = splitter.chunks(length, np.random.default_rng([make["seed"], key_number(key)]))
            if not placed:  # not bad data: nnet3-chain-get-egs, and chain_examples, leave it out with a warning
                bad.append((key, f"utterance {key!r} of {length} frames is shorter than every chunk size "
                                 f"{splitter.num_frames}"))  # fmt: skip
                continue
            for chunk in placed:
                self.places.append((key, chunk))
                keys.append(f"{key}-{chunk.first_frame}")
                widths.append(chunk.num_frames)
        super().__init__(keys, widths, window_frames=buffer_size, on_error=on_error)
        self.left, self.right = make["left_context"], make["right_context"]
        self.subsampling = k
        self._numerators: OrderedDict[str, ChainGraph] = OrderedDict()
        self._made: dict[int, Held] = {}  # chunk numerators kept for the next epochs, by position
        self._made_bytes = 0
        #: The chunks' widths, largest first (`fit` computes each minibatch at its own).
        self.kaldi_sizes = tuple(sorted(set(widths), reverse=True))
        for key, reason in bad:
            self._skip(key, reason)

    def describe(self) -> str:
        return f"chain egs cut from features {self.features!r}"

    def identity(self) -> Iterable[bytes]:
        options = {k: v for k, v in self.make.items() if k not in ("topology", "normalization")}
        yield repr((self.features, sorted(options.items()), self.make["topology"])).encode()
        for key in sorted(self.phone_lengths):
            yield key.encode() + self.phone_lengths[key].tobytes()
        files = {file_of(self._entries[key]) for key, _ in self.places}
        yield from file_stamps(f for f in files if f is not None)

    def stack(self, items: Sequence[Any]) -> Chunks:
        """A minibatch of chunks, their input rows compressed here (as Kaldi's egs hold them, where `compress`):
        on `fit`'s cutting thread, a minibatch at a time, not on the reading thread before a window's first."""
        return stack_held([self._compressed(item) for item in items], self.left, self.right)

    def _compressed(self, item: Any) -> Any:
        """An item with its input rows compressed and read back as Kaldi's egs hold them, where `compress`."""
        if not self.make["compress"]:
            return item
        (features, *rest), held = item
        return (kaldi_compressed(features), *rest), held

    def _utterance(self, key: str) -> ChainGraph:
        """The utterance's numerator (the last `UTTERANCE_NUMERATORS` kept)."""
        with self._lock:
            if key in self._numerators:
                self._numerators.move_to_end(key)
                return self._numerators[key]
        m = self.make
        graph = phone_numerator(
            self.phone_lengths[key],
            m["topology"],
            m["pdfs"],
            subsampling=m["k"],
            left_tolerance=m["left_tolerance"],
            right_tolerance=m["right_tolerance"],
        )
        with self._lock:
            self._numerators[key] = graph
            if len(self._numerators) > UTTERANCE_NUMERATORS:
                self._numerators.popitem(last=False)
        return graph

    def read(self, positions: Sequence[int]) -> Iterator[tuple[int, Any]]:
        """As `Corpus.read`, but the numerators of every chunk among `positions` are made before the first chunk is
        given, each padded (`Held.arcs`, `.states`) to the largest of its chunk width among them: `fit` reads a
        window at a time, so the window's minibatches of a width share one compiled step. The chunks' input rows
        are cut as they are given, each utterance's features read once (`fit` asks in the corpus's order)."""
        positions = [int(p) for p in positions]
        numerators = {p: self._guarded(p, self._numerator)[1] for p in positions}
        largest: dict[int, tuple[int, int]] = {}
        for held in numerators.values():
            if held is not None:
                arcs, states = largest.get(len(held.deriv_weights), (1, 1))
                largest[len(held.deriv_weights)] = (max(arcs, held.arcs), max(states, held.states))
        features = self._utterance_features()
        for position in positions:
            held = numerators[position]
            if held is None:
                yield position, None
                continue
            arcs, states = largest[len(held.deriv_weights)]
            yield self._guarded(
                position, functools.partial(self._given, x_of=features, held=held, arcs=arcs, states=states)
            )

    def sample(self) -> Any:
        """The first chunk of the largest width that is made without error (`fit` plans from it), alone."""
        features = self._utterance_features()
        for position in np.flatnonzero(self.lengths == self.lengths.max()).tolist():
            held = self._guarded(position, self._numerator)[1]
            if held is not None:
                given = functools.partial(self._given, x_of=features, held=held, arcs=held.arcs, states=held.states)
                item = self._guarded(position, given)[1]
                if item is not None:
                    return self._compressed(item)
        return super().sample()

    def _utterance_features(self) -> Callable[[int], np.ndarray]:
        """A function giving chunk `position`'s utterance's features, read when the utterance changes (a damaged
        matrix's error raised for each of its chunks)."""
        current: list[Any] = [None, None]  # key, features or the SymnetError reading them

        def features(position: int) -> np.ndarray:
            key = self.places[position][0]
            if current[0] != key:
                try:
                    current[:] = [key, self._features(key)]
                except SymnetError as e:
                    current[:] = [key, e]
            if isinstance(current[1], SymnetError):
                raise current[1]
            return current[1]

        return features

    def _features(self, key: str) -> np.ndarray:
        with reading(self.features, "features"):
            return np.asarray(read_entry(self._entries[key], self.features_path, key, self.allow_pipes), np.float32)

    def _numerator(self, position: int) -> Held:
        """Chunk `position`'s numerator and derivative weights (padded to powers of two of its own), made once
        while the cache has room."""
        with self._lock:
            made = self._made.get(position)
        if made is not None:
            return made
        key, chunk = self.places[position]
        m = self.make
        output = chunk_output(key, self._utterance(key), chunk, m["normalization"], m["k"])
        if output is None:
            raise KaldiDataError(f"utterance {key!r}, frames {chunk.first_frame} on: the numerator is empty")
        sup = output.supervision
        graph = numerator_graph(sup.fst, sup.label_dim)
        weights = chunk.output_weights.astype(np.float32)  # the eg's derivative weights
        held = Held(graph, weights, _power_of_two(graph.num_arcs), _power_of_two(graph.num_states))
        self._keep(position, held)
        return held

    def _given(self, position: int, x_of: Callable[[int], np.ndarray], held: Held, arcs: int, states: int) -> Any:
        """The item `fit` stacks, from its utterance's features (`x_of(position)`): the chunk's input rows
        (compressed by `stack`) and targets holding the number of its supervision (a
        `Held` of its own, padded to `arcs` and `states`: the supervision table forgets it with its minibatch,
        while the cache keeps the arrays)."""
        chunk = self.places[position][1]
        held = Held(held.graph, held.deriv_weights, arcs, states)
        number = self.supervisions.add(held)
        features = chunk_input(x_of(position), chunk, self.left, self.right, compress=False)  # `stack` compresses
        return (
            features,
            np.full(chunk.num_frames, number, np.int64),
            np.ones(chunk.num_frames, np.float32),
            None,
        ), held

    def _keep(self, position: int, held: Held) -> None:
        """Keep chunk `position`'s numerator for the next epochs while the cache has room."""
        graph = held.graph
        size = held.deriv_weights.nbytes + sum(
            a.nbytes for a in (graph.src, graph.dst, graph.pdf, graph.log_prob, graph.log_initial, graph.log_final)
        )
        with self._lock:
            if self._made_bytes + size <= NUMERATOR_CACHE_BYTES:
                self._made[position] = held
                self._made_bytes += size


def _power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


def stream_chain_data(
    features: str,
    phone_lengths: Mapping[str, Any],
    topology: Topology,
    den: Fst | ChainGraph,
    *,
    normalization: Fst | ChainGraph | None = None,
    num_frames: str | int | Sequence[int] = 150,
    num_frames_overlap: int = 0,
    frame_subsampling_factor: int = 3,
    left_context: int = 0,
    right_context: int = 0,
    left_tolerance: int = 5,
    right_tolerance: int = 5,
    pdfs: Mapping[int, Sequence[int]] | None = None,
    seed: int = 0,
    options: ChainOptions | None = None,
    xent_output: str | None = None,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    on_error: str = "stop",
    allow_pipes: bool = False,
    compress: bool = True,
) -> ChainEgsStream:
    """A data directory's features (`scp:feats.scp`) with each utterance's `(phone, length)` pairs as chain egs
    cut on the fly (`chain_examples`' arguments), read as `fit` trains, with the chain objective (`den`: the
    denominator, den.fst or a graph; `options` and `xent_output` as `stream_cegs`'s; the egs' output is
    `output`, as nnet3-chain-get-egs names it). `normalization`:
    chain-make-den-fst's normalization.fst; default: made from `den` as chain-make-den-fst makes it. `compress`:
    each eg's input rows as Kaldi's compressed egs hold them (nnet3-chain-get-egs's default), else as read.
    `on_error`: bad data is a KaldiDataError ("stop") or left out ("skip"), listed in `.train.skipped` and warned
    about. An utterance shorter than every chunk size is left out either way, listed and warned about, as
    nnet3-chain-get-egs (and `chain_examples`) leave it out."""
    pdf_map = dict(topology.monophone_pdfs() if pdfs is None else pdfs)
    num_pdfs = 1 + max(max(v) for v in pdf_map.values())
    if normalization is None:
        normalization = den if isinstance(den, ChainGraph) else denominator_graph(den, num_pdfs)
    make = {
        "topology": topology,
        "normalization": normalization,
        "pdfs": pdf_map,
        "k": int(frame_subsampling_factor),
        "num_frames": num_frames,
        "num_frames_overlap": num_frames_overlap,
        "left_context": int(left_context),
        "right_context": int(right_context),
        "left_tolerance": left_tolerance,
        "right_tolerance": right_tolerance,
        "seed": seed,
        "compress": bool(compress),
    }
    if min(left_context, right_context) < 0:
        raise KaldiDataError(f"left_context {left_context} and right_context {right_context} must be >= 0")
    supervisions = HeldSupervision()
    train = ChainDataCorpus(
        features, phone_lengths, make, supervisions, buffer_size=buffer_size, on_error=on_error, allow_pipes=allow_pipes
    )
    objective = StreamedChainEgs(
        den=den, options=options or ChainOptions(), xent_output=xent_output, supervisions=supervisions
    )
    return ChainEgsStream(train, None, objective, train.subsampling)
