"""Chain egs cut on the fly from a Kaldi data directory, read as `fit` trains: the stream form of `chain_examples`.

    stream = stream_chain_data("scp:data/train/feats.scp", phone_lengths, Topology.chain(phones), den,
                               num_frames="150,110,100", left_context=29, right_context=29)
    fit(network, stream.train, optimizer, objective=stream.objective,
        frame_subsampling_factor=stream.frame_subsampling_factor)

The index is made from the scp alone (each matrix's frames from its header) and the phone lengths (small, in
memory): each utterance's chunks are placed as `chain_examples` places them (Kaldi's UtteranceSplitter, seeded by
`seed` and the utterance), before any feature is read. Training then makes the chunks' egs (`chunk_example`, as
`chain_examples` makes them: the same rows, derivative weights and numerator) in the order the minibatches need
them, each utterance's features read by offset once a window, on `fit`'s reading thread
(`Corpus.costly_items`: the first step waits for its own egs, not the window's); memory is bounded by the shuffle
window (`buffer_size` examples) as for `stream_cegs`. Each numerator is padded to a power of two of arcs and
states, and a minibatch to at least what earlier minibatches of its width were (`StreamedChainEgs`: a few
compiled shapes, none new once an epoch has seen the largest; padding adds no path), so a stream trains as the
same egs in memory do, and resumes bit for bit (its checkpoints keep the padding so far: padding changes the
roundoff). The numerators made are kept for the next epochs up to `NUMERATOR_CACHE_BYTES` (a small corpus's all,
a large one's first ones): making them is most of the reading thread's work.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..base.errors import KaldiDataError, SymnetError
from ..chain.graph import ChainGraph, denominator_graph, numerator_graph
from ..chain.objective import ChainOptions
from ..chain.phone_numerator import phone_numerator
from ..chain.topology import Topology
from ..kaldi_io.fst import Fst
from ..kaldi_io.scp import entry_rows, read_entry
from ..kaldi_io.tables import parse_spec, reading, scp_entries
from .chain_cutting import check_lengths, chunk_example, chunk_rows, key_number
from .chain_egs import Held, HeldSupervision, StreamedChainEgs, chain_arrays
from .egs_split import KaldiChunk, KaldiSplitter
from .egs_streams import DEFAULT_BUFFER_SIZE, ChainEgsStream, PrecutCorpus, stack_held
from .examples import Chunks
from .streams import file_of, file_stamps

__all__ = ["NUMERATOR_CACHE_BYTES", "ChainDataCorpus", "stream_chain_data"]

#: Bytes of chunk numerators (graph arrays and derivative weights) a stream keeps from one epoch to the next.
NUMERATOR_CACHE_BYTES = 256 << 20
#: Utterance numerators kept while their chunks' egs are made (each a few kilobytes).
UTTERANCE_NUMERATORS = 1024


class ChainDataCorpus(PrecutCorpus):
    """Chain egs of a data directory's utterances, cut and made as training reads them (see the module doc)."""

    chain = True
    costly_items = True

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
                placed = splitter.chunks(length, np.random.default_rng([make["seed"], key_number(key)]))
                if not placed:
                    raise KaldiDataError(
                        f"utterance {key!r} of {length} frames is shorter than every chunk size {splitter.num_frames}"
                    )
            except KaldiDataError as e:
                if on_error != "skip":
                    raise
                bad.append((key, str(e)))
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
        return stack_held(items, self.left, self.right)

    def _utterance(self, key: str) -> ChainGraph:
        """The utterance's numerator (the last `UTTERANCE_NUMERATORS` kept: a window's chunks of one utterance are
        made in the order its minibatches need them, apart)."""
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
        """As `Corpus.read`, but each utterance's features are read once, when the first of its chunks among
        `positions` is made, and dropped after the last (`costly_items`: `fit` asks for a window's chunks in the
        order its minibatches need them, an utterance's apart)."""
        positions = [int(p) for p in positions]
        pending = Counter(self.places[p][0] for p in positions)
        loaded: dict[str, Any] = {}

        def make(position: int) -> Any:
            key = self.places[position][0]
            try:
                if key not in loaded:
                    try:
                        loaded[key] = self._features(key)
                    except SymnetError as e:  # raised (or the chunk left out) for each of its chunks
                        loaded[key] = e
                x = loaded[key]
                if isinstance(x, SymnetError):
                    raise x
                return self._eg(position, x)
            finally:
                pending[key] -= 1
                if not pending[key]:
                    del loaded[key]

        for position in positions:
            yield self._guarded(position, make)

    def _features(self, key: str) -> np.ndarray:
        with reading(self.features, "features"):
            return np.asarray(read_entry(self._entries[key], self.features_path, key, self.allow_pipes), np.float32)

    def _eg(self, position: int, x: np.ndarray) -> Any:
        """Chunk `position`'s eg, from its utterance's features `x`."""
        key, chunk = self.places[position]
        with self._lock:
            made = self._made.get(position)
        if made is not None:  # made in an earlier epoch: only the features' rows (as chunk_example takes them)
            # a Held of its own: the supervision table forgets it with its minibatch, while the cache keeps the arrays
            held = Held(made.graph, made.deriv_weights, made.arcs, made.states)
            features = x[chunk_rows(len(x), chunk, self.left, self.right)]
        else:
            m = self.make
            eg = chunk_example(key, x, self._utterance(key), chunk, m["normalization"], m["k"], self.left, self.right)
            if eg is None:
                raise KaldiDataError(f"utterance {key!r}, frames {chunk.first_frame} on: the numerator is empty")
            arrays = chain_arrays(eg)
            sup = arrays.supervision
            graph = numerator_graph(sup.fst, sup.label_dim)
            held = Held(graph, arrays.deriv_weights, _power_of_two(graph.num_arcs), _power_of_two(graph.num_states))
            features = arrays.features
            self._keep(position, held)
        number = self.supervisions.add(held)
        width = chunk.num_frames
        piece = (features, np.full(width, number, np.int64), np.ones(width, np.float32), None)
        return piece, held

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
) -> ChainEgsStream:
    """A data directory's features (`scp:feats.scp`) with each utterance's `(phone, length)` pairs as chain egs
    cut on the fly (`chain_examples`' arguments), read as `fit` trains, with the chain objective (`den`: the
    denominator, den.fst or a graph; `options` and `xent_output` as `stream_cegs`'s; the egs' output is
    `output`, as nnet3-chain-get-egs names it). `normalization`:
    chain-make-den-fst's normalization.fst; default: made from `den` as chain-make-den-fst makes it.
    `on_error`: "stop" (a KaldiDataError) or "skip" (left out, listed in `.train.skipped`, warned about)."""
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
