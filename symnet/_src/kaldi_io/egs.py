"""Kaldi's nnet3 egs (`egs.*.ark`: NnetExample) and chain egs (`cegs.*.ark`: NnetChainExample), read safely.

What is read, as Kaldi's src/nnet3/nnet-example.cc, nnet-chain-example.cc,
nnet-common.cc (Index vectors), matrix/compressed-matrix.cc, sparse-matrix.cc
and chain/chain-supervision.cc write it, binary and text (`ark,t`):

- every `NnetIo`: its name, its Indexes `(n, t, x)` (binary: Kaldi's compact
  one-byte-delta encoding), its matrix: full (`FM`, `DM`), compressed (`CM`,
  `CM2`, `CM3`, decoded with Kaldi's float arithmetic, so the values are
  Kaldi's to the bit) or sparse (`SM`: posterior targets);
- every chain output (`NnetChainSupervision`): name, Indexes, the
  `chain::Supervision` (weight, sequences, frames per sequence, label dim, the
  FST: OpenFst's `compact_acceptor` binary format, or Kaldi's text FST;
  end-to-end FSTs, one per sequence; alignment pdfs) and the derivative weights.

Every count and size is checked against the bytes left before anything is
allocated, and what is built is bounded by the bytes too: Index vectors are
decoded vectorised (`egs_index`), compressed matrices in blocks, sparse
matrices kept as their pairs (`egs_sparse`). Every unknown token, format or
flag is refused: errors are `KaldiDataError`s naming the archive, the example
key and the field (for an example an scp line names: the file, the offset and
what was expected, never what the file holds there). A supervision weight must
be finite and >= 0.
Refused: FSTs with symbol tables or aligned (`--fst_align`) data, FST types
other than `compact_acceptor` over `standard` arcs, the pre-2016 `<DW>` deriv
weights, non-regular files (stdin, pipes).

The supervision FST is a `symnet.chain.Fst` (the arrays the chain objective
reads; `symnet.chain.numerator_graph` makes its numerator graph): `start`;
arc k goes from `src[k]` to `dst[k]` (int32) with `ilabel[k] == olabel[k]`
(int32, pdf + 1: 1..label_dim; an acceptor) and `weight[k]` (float32, OpenFst
tropical cost: -log of the arc's probability; 0 on most arcs, the
normalization FST's cost on the first ones); arcs are in the file's order,
grouped by source state in increasing state order; `final[s]` (float32) is
the final cost of state s, +inf where s is not final. An empty FST (no start
state) is refused. A non-end-to-end supervision of `num_sequences` sequences
has one FST whose paths have `num_sequences * frames_per_sequence` labels,
sequence (Kaldi's concatenation); an end-to-end one has one FST per sequence.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..base.errors import KaldiDataError, ModelFormatError
from ..base.safe_read import open_regular, read_file
from ..base.text import is_digits
from .egs_parse import (
    ChainExample,
    ChainOutput,
    NnetExample,
    NnetIo,
    Parse,
    SparseRows,
    Supervision,
    decode_compressed,
)

__all__ = [
    "ChainExample",
    "ChainOutput",
    "EgArrays",
    "EgsChunks",
    "NnetExample",
    "NnetIo",
    "SparseRows",
    "Supervision",
    "decode_compressed",
    "eg_arrays",
    "egs_chunks",
    "read_cegs",
    "read_egs",
]


# ---------------------------------------------------------------------------------------------- files


def open_archive(path: str) -> Any:
    """The bytes of a regular file, memory-mapped (empty bytes for an empty file); opened once, and what was
    opened checked (a file swapped for a FIFO or a link to a device is refused, never read)."""
    try:
        f, st = open_regular(path, KaldiDataError, "egs archive")
        with f:
            if st.st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise KaldiDataError(f"cannot read {path}: {e.strerror or e}") from None


#: The most archives an egs scp keeps open at once: the least recently used is closed (and opened again if
#: a later line names it), so an scp may name more archives than `ulimit -n`.
MAX_OPEN_ARCHIVES = 8
#: The largest egs scp read (lines `key file:offset`: far more than any real one).
MAX_SCP_BYTES = 1 << 30


class Archives:
    """The archives an egs scp names, mapped on demand, at most MAX_OPEN_ARCHIVES at once."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, Any] = OrderedDict()

    def __getitem__(self, name: str) -> Any:
        data = self._open.pop(name, None)
        if data is None:
            data = open_archive(name)
            while len(self._open) >= MAX_OPEN_ARCHIVES:
                _close(self._open.popitem(last=False)[1])
        self._open[name] = data
        return data

    def close(self) -> None:
        while self._open:
            _close(self._open.popitem()[1])


def _close(data: Any) -> None:
    """Unmap an archive (one whose arrays are still in use is unmapped when they go)."""
    if isinstance(data, mmap.mmap):
        with contextlib.suppress(BufferError):
            data.close()


def egs_specifier(spec: str | os.PathLike[str]) -> tuple[str, str]:
    """`(kind, path)`: `ark` or `scp`, from `ark:`/`ark,t:`/`scp:` prefixes (a bare path is an archive)."""
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise KaldiDataError(f"an egs path must be a str or path, got {type(spec).__name__}")
    head, sep, tail = text.partition(":")
    if sep and head.split(",")[0] in ("ark", "scp"):
        options = set(head.split(",")[1:]) - {"t", "b", "o", "s", "cs", "p"}
        if options:
            raise KaldiDataError(f"{text}: unknown rspecifier options {sorted(options)}")
        if tail == "-" or "|" in tail:
            raise KaldiDataError(f"{text}: egs are read from files only (no stdin, no commands)")
        return head.split(",")[0], tail
    return "ark", text


def read_egs(spec: str | os.PathLike[str]) -> Iterator[NnetExample]:
    """The examples of an nnet3 egs archive (`egs.1.ark`, `ark:egs.1.ark`, `ark,t:egs.txt`; binary and text
    entries both) or scp (`scp:egs.scp`, lines `key file:offset`), in the file's order."""
    yield from _read(spec, chain=False)


def read_cegs(spec: str | os.PathLike[str]) -> Iterator[ChainExample]:
    """The examples of a chain egs archive (`cegs.1.ark`) or scp, as `read_egs`."""
    yield from _read(spec, chain=True)


def _read(spec: str | os.PathLike[str], chain: bool) -> Iterator[Any]:
    kind, path = egs_specifier(spec)
    if kind == "ark":
        for _, example in Parse(open_archive(path), path).entries(chain):
            yield example
        return
    try:
        lines = read_file(path, MAX_SCP_BYTES, error=KaldiDataError, what="egs scp").decode("utf-8", "replace")
    except FileNotFoundError as e:
        raise KaldiDataError(f"cannot read {path}: {e.strerror or e}") from None
    archives = Archives()
    try:
        for number, line in enumerate(lines.splitlines(), 1):
            if line.strip():
                yield _scp_example(line, f"{path}:{number}", archives, chain)
    finally:
        archives.close()


def _scp_example(line: str, where: str, archives: Archives, chain: bool) -> Any:
    """The example an scp line (`where`: its file and line) names."""
    key, name, offset = scp_place(line, where)
    return example_at(archives, name, offset, key, chain, where)


def scp_place(line: str, where: str) -> tuple[str, str, int]:
    """`(key, file, offset)` of an egs scp line (`where`: its file and line)."""
    parts = line.split(None, 1)
    if len(parts) != 2:
        raise KaldiDataError(f"{where}: an scp line is 'key file:offset', got {line[:80]!r}")
    key, entry = parts
    name, _, offset = entry.strip().rpartition(":")
    if "\0" in entry:
        raise KaldiDataError(f"{where}: example {key!r}: the file name has a NUL byte")
    if "|" in entry or not name or not is_digits(offset):
        raise KaldiDataError(f"{where}: example {key!r}: expected file:offset, got {entry[:80]!r}")
    return key, name, int(offset)


def example_at(archives: Archives, name: str, offset: int, key: str, chain: bool, where: str) -> Any:
    """The example `key` at byte `offset` of archive `name` (`where`: what chose the place, e.g. an scp line).
    The file and the offset were chosen beforehand, so an error names them, the field and what was expected,
    but never what the file holds there."""
    data = archives[name]
    if offset > len(data):
        raise KaldiDataError(f"{where}: example {key!r}: offset {offset} is past the end of {name}")
    parse = Parse(data, name, quote=False)
    parse.key = key
    r = parse.reader(offset)
    try:
        return parse.chain_example(r) if chain else parse.example(r)
    except (ModelFormatError, KaldiDataError) as e:
        raise unreadable(parse, e, offset, chain, f" ({where})") from None


def unreadable(parse: Parse, error: Exception, offset: int, chain: bool, where: str = "") -> KaldiDataError:
    """The error of an example `parse` could not read at byte `offset`: the archive, the byte, the key, the field
    and what was expected (the readers' words), never what the file holds there."""
    expected = getattr(error, "expected", None)
    field = f", {parse.field}" if parse.field else ""
    kind = "chain example" if chain else "nnet3 example"
    return KaldiDataError(
        f"{parse.where}: byte {offset}: example {parse.key!r}{where}{field}: not a readable {kind}"
        f"{f'; expected {expected}' if expected else ''} (what the file holds there is not shown)"
    )


# ---------------------------------------------------------------------------------------------- training data


class EgsChunks(NamedTuple):
    """nnet3 egs as the arrays of `symnet.train.Chunks` (same fields, same order: `Chunks(*egs_chunks(...))`):
    features [num, left + chunk + right, dim], targets [num, chunk] (int32 pdf), weights [num, chunk]."""

    features: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    left: int
    right: int


class EgArrays(NamedTuple):
    """One nnet3 example as training arrays: features [left + frames + right, dim], targets [frames] (int32
    pdf), weights [frames], and its context."""

    features: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    left: int
    right: int


def egs_chunks(examples: Sequence[NnetExample], *, soft: str = "error", output: str = "output") -> EgsChunks:
    """Examples of nnet3-get-egs (one `input`, one sparse `output` of posteriors, at the input's frame rate)
    as training chunks (each as `eg_arrays` makes it). Refused, naming the example: examples of different
    sizes."""
    check_soft(soft)
    if not examples:
        raise KaldiDataError("no examples")
    feats, targets, weights = [], [], []
    shape: tuple[int, int, int] | None = None
    for eg in examples:
        arrays = eg_arrays(eg, soft=soft, output=output)
        here = (arrays.left, len(arrays.targets), arrays.right)
        if shape is not None and here != shape:
            raise KaldiDataError(f"example {eg.key!r}: (left, frames, right) {here} differs from {shape}")
        shape = here
        feats.append(arrays.features)
        targets.append(arrays.targets)
        weights.append(arrays.weights)
    assert shape is not None
    return EgsChunks(np.stack(feats), np.stack(targets), np.stack(weights), shape[0], shape[2])


def check_soft(soft: str) -> None:
    """A KaldiDataError unless `soft` is "error" or "max"."""
    if soft not in ("error", "max"):
        raise KaldiDataError(f"soft must be 'error' or 'max', got {soft!r}")


def eg_arrays(eg: NnetExample, *, soft: str = "error", output: str = "output") -> EgArrays:
    """One example of nnet3-get-egs (one `input`, one sparse `output` of posteriors, at the input's frame rate)
    as training arrays. A frame's target is its pdf and its weight the posterior's total; a frame with
    several pdfs is an error, or with `soft="max"` its largest one (weight: the total). Frames with no
    pdf get weight 0. Refused, naming the example: other inputs (ivectors), a sparse input, subsampled
    outputs, merged examples (n > 0)."""
    check_soft(soft)
    names = [io.name for io in eg.io]
    extra = sorted(set(names) - {"input", output})
    if extra or names.count("input") != 1 or names.count(output) != 1:
        raise KaldiDataError(
            f"example {eg.key!r}: has {names}; training chunks take one 'input' and one "
            f"{output!r} (other inputs such as ivectors are not used by fit)"
        )
    x, y = eg["input"], eg[output]
    if x.sparse is not None:  # its dense form could be far larger than the file: features never are sparse
        raise KaldiDataError(f"example {eg.key!r}: the input is a sparse matrix, not features")
    if (x.indexes[:, [0, 2]] != 0).any() or (y.indexes[:, [0, 2]] != 0).any():
        raise KaldiDataError(f"example {eg.key!r}: merged examples (n or x not 0) are not chunks")
    t_in, t_out = x.indexes[:, 1], y.indexes[:, 1]
    if (np.diff(t_in) != 1).any() or (np.diff(t_out) != 1).any():
        raise KaldiDataError(
            f"example {eg.key!r}: frames not consecutive (a subsampled output?); "
            f"fit trains outputs at the input's frame rate"
        )
    if y.sparse is None:
        raise KaldiDataError(f"example {eg.key!r}: output {output!r} is a {y.storage} matrix, not posteriors")
    left, right = int(t_out[0] - t_in[0]), int(t_in[-1] - t_out[-1])
    if left < 0 or right < 0:
        raise KaldiDataError(f"example {eg.key!r}: output frames {t_out[0]}..{t_out[-1]} outside the input's")
    sp = y.sparse
    counts = np.diff(sp.offsets)
    if soft == "error" and (counts > 1).any():
        row = int(np.argmax(counts > 1))
        raise KaldiDataError(
            f"example {eg.key!r}: output frame {row} has {counts[row]} pdfs (soft targets); "
            f"pass soft='max' to train on the largest"
        )
    target, weight = sp.argmax_and_sum()  # as np.argmax and sum of the dense rows, never made dense
    return EgArrays(x.matrix, target, weight, left, right)
