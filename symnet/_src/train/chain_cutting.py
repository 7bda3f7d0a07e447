"""Chain egs made on the fly from features and phone alignments, as Kaldi's `chain-get-supervision` and
`nnet3-chain-get-egs` make them on disk.

    egs = chain_examples(features, phone_lengths, topology, den, num_frames="150,110,100", left_context=29,
                         right_context=29)
    data = chain_egs(list(egs), den=den, options=ChainOptions(...), xent_output="output-xent")

For each utterance: its numerator from its phone lengths (`phone_numerator`: chain-get-supervision's, with the
tolerances), its chunks (`KaldiSplitter`: nnet3-chain-get-egs's UtteranceSplitter, drawn from NumPy's generator
seeded by `seed` and the utterance's key, so the same every run), and for each chunk a `ChainExample` as
nnet3-chain-get-egs writes it: input rows `first - left_context` to `first + size + right_context - 1` (clamped
to the utterance, ExtractRowRangeWithPadding), output frames `0, k, 2k, ...`, derivative weights the chunk's
output weights (1 / the number of chunks an output frame is in), and the chunk's numerator cut from the
utterance's and normalized (`chunk_numerator`). The input rows are compressed as nnet3-chain-get-egs compresses
them by default (`compress=True`, Kaldi's `--compress=true`: `symnet._src.kaldi_io.compress`, a byte a value
between each column's percentiles), so a network trains on the values Kaldi's trainer reads. Examples are made
lazily, an utterance at a time.

Utterances Kaldi would skip are skipped with a `SkippedDataWarning` that names them: no phone lengths, lengths
that do not add up to the features' frames, a numerator with no path (chain-get-supervision's "Failed creating
supervision"), shorter than every chunk size; a chunk whose numerator the normalization leaves empty is left out
with a warning (Kaldi warns and writes it unnormalized).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..base.errors import KaldiDataError, TrainingError
from ..chain.chunk_numerator import chunk_numerator
from ..chain.graph import ChainGraph, fst_from_arcs
from ..chain.phone_numerator import phone_numerator
from ..chain.topology import Topology
from ..kaldi_io.compress import kaldi_compressed
from ..kaldi_io.egs_parse import ChainExample, ChainOutput, NnetIo, Supervision
from ..kaldi_io.fst import Fst
from .egs_split import KaldiChunk, KaldiSplitter, placed_chunks
from .streams import SkippedDataWarning

__all__ = ["chain_examples", "check_lengths", "chunk_example", "chunk_input", "chunk_output", "key_number"]


def chain_examples(
    features: Mapping[str, Any] | Iterable[tuple[str, Any]],
    phone_lengths: Mapping[str, Any],
    topology: Topology,
    normalization: Fst | ChainGraph,
    *,
    num_frames: str | int | Sequence[int] = 150,
    num_frames_overlap: int = 0,
    frame_subsampling_factor: int = 3,
    left_context: int = 0,
    right_context: int = 0,
    left_tolerance: int = 5,
    right_tolerance: int = 5,
    pdfs: Mapping[int, Sequence[int]] | None = None,
    seed: int = 0,
    chunks: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    compress: bool = True,
) -> Iterator[ChainExample]:
    """Chain egs of each utterance's `features` ([frames, dim]; a mapping or `(key, features)` pairs, read one at a
    time) with its `phone_lengths` (`(phone, length)` pairs, `ali-to-phones --write-lengths`), as
    `nnet3-chain-get-egs` makes them (see the module docstring). `normalization`: chain-make-den-fst's
    normalization.fst, or the denominator graph (`read_denominator_graph`, `phone_lm_denominator`) it is made from.
    `num_frames`, `num_frames_overlap`, `frame_subsampling_factor`, `left_context`, `right_context`: Kaldi's
    options of those names (`--num-frames=150,110,100`: the principal size, then alternatives);
    `left_tolerance`, `right_tolerance`, `pdfs`: `phone_numerator`'s. `chunks`: per utterance, its chunks as
    `(first_frame, num_frames)` instead of drawing them (e.g. those of Kaldi's egs, to compare). `compress`: each
    eg's input rows as Kaldi's compressed egs hold them (`--compress=true`, Kaldi's default), else as given."""
    k = int(frame_subsampling_factor)
    splitter = KaldiSplitter(num_frames, num_frames_overlap, k)
    if min(left_context, right_context) < 0:
        raise TrainingError(f"left_context {left_context} and right_context {right_context} must be >= 0")
    items = features.items() if isinstance(features, Mapping) else features
    for key, value in items:
        x = np.asarray(value, np.float32)
        if x.ndim != 2 or not len(x):
            raise TrainingError(f"utterance {key!r}: features must be [frames, dim], got shape {x.shape}")
        try:
            length = check_lengths(key, len(x), phone_lengths.get(key), k)
        except KaldiDataError as e:
            _skip(str(e))
            continue
        pairs = np.asarray(phone_lengths[key])
        utterance = phone_numerator(
            pairs, topology, pdfs, subsampling=k, left_tolerance=left_tolerance, right_tolerance=right_tolerance
        )
        if not np.isfinite(utterance.log_final).any():
            _skip(f"utterance {key!r}: its phones do not fit its {length} frames with this topology (no numerator)")
            continue
        if chunks is not None:
            placed = placed_chunks(length, chunks.get(key, ()), k)
        else:
            placed = splitter.chunks(length, np.random.default_rng([seed, key_number(key)]))
        if not placed:
            _skip(f"utterance {key!r} of {length} frames is shorter than every chunk size {splitter.num_frames}")
            continue
        for chunk in placed:
            eg = chunk_example(key, x, utterance, chunk, normalization, k, left_context, right_context, compress)
            if eg is not None:
                yield eg


def check_lengths(key: str, rows: int, pairs: Any, k: int) -> int:
    """The frames of an utterance of `rows` feature rows that its chunks may cover (as nnet3-chain-get-egs: no more
    than its output frames times `k`); KaldiDataError where Kaldi makes no egs of it (no phone lengths, lengths
    that are not `(phone, length)` pairs or add up to another number of output frames)."""
    if pairs is None:
        raise KaldiDataError(f"utterance {key!r} has no phone lengths")
    a = np.asarray(pairs)
    if a.ndim != 2 or a.shape[1:] != (2,) or not np.issubdtype(a.dtype, np.integer) or not len(a):
        raise TrainingError(f"utterance {key!r}: phone lengths must be (phone, length) pairs, got shape {a.shape}")
    frames = int(a[:, 1].sum())
    if -(-frames // k) != -(-rows // k):
        raise KaldiDataError(
            f"utterance {key!r}: its phone lengths add up to {frames} frames, its features have {rows}"
        )
    return min(rows, -(-frames // k) * k)


def chunk_example(
    key: str,
    x: np.ndarray,
    utterance: ChainGraph,
    chunk: KaldiChunk,
    normalization: Fst | ChainGraph,
    k: int,
    left: int,
    right: int,
    compress: bool = True,
) -> ChainExample | None:
    """One chunk's eg, or None (with a warning) where the normalization leaves its numerator no path."""
    output = chunk_output(key, utterance, chunk, normalization, k)
    if output is None:
        return None
    t_in = np.arange(-left, chunk.num_frames + right)
    return ChainExample(
        f"{key}-{chunk.first_frame}",
        (NnetIo("input", _indexes(t_in), chunk_input(x, chunk, left, right, compress), "CM" if compress else "FM"),),
        (output,),
    )


def chunk_output(
    key: str, utterance: ChainGraph, chunk: KaldiChunk, normalization: Fst | ChainGraph, k: int
) -> ChainOutput | None:
    """A chunk eg's output: its numerator (as an FST, as egs hold it) and derivative weights; None (with a warning)
    where the normalization leaves its numerator no path."""
    first, size = chunk.first_frame, chunk.num_frames
    numerator = chunk_numerator(utterance, first // k, size // k, normalization)
    if not np.isfinite(numerator.log_final).any():
        _skip(f"utterance {key!r}, frames {first} to {first + size}: the numerator is empty after the normalization")
        return None
    t_out = np.arange(0, size, k)
    fst = fst_from_arcs(
        numerator.src,
        numerator.dst,
        numerator.pdf,
        -numerator.log_prob,
        num_states=numerator.num_states,
        start=int(np.flatnonzero(numerator.log_initial > -np.inf)[0]),
        final=-numerator.log_final,
    )
    supervision = Supervision(1.0, 1, len(t_out), numerator.num_pdfs, False, (fst,))
    return ChainOutput("output", _indexes(t_out), supervision, chunk.output_weights.astype(np.float32))


def chunk_input(x: np.ndarray, chunk: KaldiChunk, left: int, right: int, compress: bool) -> np.ndarray:
    """A chunk's input rows of utterance features `x`: its frames and `left`/`right` of context, clamped to the
    utterance (as nnet3-chain-get-egs pads with its first and last frames), compressed and read back as Kaldi's
    egs hold them where `compress`."""
    rows = x[np.clip(np.arange(chunk.first_frame - left, chunk.first_frame + chunk.num_frames + right), 0, len(x) - 1)]
    return kaldi_compressed(rows) if compress else rows


def _indexes(t: np.ndarray) -> np.ndarray:
    """Kaldi's (n, t, x) indexes of one sequence at frames `t`."""
    out = np.zeros((len(t), 3), np.int32)
    out[:, 1] = t
    return out


def key_number(key: str) -> int:
    """A stable number of an utterance's key, for its chunks' generator."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _skip(message: str) -> None:
    warnings.warn(message, SkippedDataWarning, stacklevel=3)
