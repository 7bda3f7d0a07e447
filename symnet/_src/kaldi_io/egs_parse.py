"""The byte-level parser of Kaldi's egs and chain egs (`symnet._src.kaldi_io.egs` reads files with it): the
example types it builds, compressed matrices decoded with Kaldi's arithmetic, and `Parse`, which reads one
archive's examples field by field and names the archive, the example and the field in every error."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from ..base.bounded import compressed_bytes, tiles
from ..base.errors import ChainError, KaldiDataError, ModelFormatError
from ..base.text import is_digits
from .binary import BinaryReader, TextReader
from .egs_index import read_index_vector
from .egs_sparse import MAX_DENSE_VALUES, PairRows, SparseRows, read_sparse_binary
from .fst import Fst, parse_fst_text

__all__ = [
    "MAX_IOS",
    "MAX_KEY_BYTES",
    "ChainExample",
    "ChainOutput",
    "NnetExample",
    "NnetIo",
    "Parse",
    "SparseRows",
    "Supervision",
    "decode_compressed",
]

#: The longest example key.
MAX_KEY_BYTES = 1 << 16
#: Kaldi's own limit on the inputs/outputs of one example.
MAX_IOS = 1_000_000
_FST_MAGIC = 2125659606
_INF = np.float32(np.inf)


def _buffer(data: Any, dtype: Any, count: int, offset: int = 0) -> np.ndarray:
    """`count` items of `dtype` at `offset` of `data` (checked by the caller); empty when `count` is 0."""
    if count == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count, offset)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@attrs.frozen(eq=False)
class NnetIo:
    """One input or output of an example: `name`, `indexes` int32 [rows, 3] (columns n, t, x), `matrix`
    float32 [rows, cols] (read-only), `storage` how the file held it (FM, DM, CM, CM2, CM3, SM; `text` or
    `text-sparse` in text archives) and, for a sparse matrix, `sparse` as read: its `matrix` is made dense
    where it is first asked for (KaldiDataError beyond `MAX_DENSE_VALUES` values), never by reading."""

    name: str
    indexes: np.ndarray
    _matrix: np.ndarray | None
    storage: str
    sparse: SparseRows | None = None
    _where: str = attrs.field(default="", repr=False)  # the file and example, for errors

    @property
    def matrix(self) -> np.ndarray:
        dense = self._matrix
        if dense is None:
            if self.sparse is None:
                raise KaldiDataError(f"{self._where}: NnetIo {self.name!r} has no matrix")
            try:
                dense = _frozen(self.sparse.toarray())
            except KaldiDataError as e:
                raise KaldiDataError(f"{self._where}, NnetIo {self.name!r}: {e}") from None
            object.__setattr__(self, "_matrix", dense)
        return dense


@attrs.frozen(eq=False)
class NnetExample:
    """One nnet3 example (NnetExample): its archive `key` and its inputs and outputs, in the file's order."""

    key: str
    io: tuple[NnetIo, ...]

    def __getitem__(self, name: str) -> NnetIo:
        for io in self.io:
            if io.name == name:
                return io
        raise KeyError(name)


@attrs.frozen(eq=False)
class Supervision:
    """Kaldi's chain::Supervision: `fsts` has one FST (or, with `e2e`, one per sequence);
    `alignment_pdfs` int32 or None."""

    weight: float
    num_sequences: int
    frames_per_sequence: int
    label_dim: int
    e2e: bool
    fsts: tuple[Fst, ...]
    alignment_pdfs: np.ndarray | None = None

    @property
    def fst(self) -> Fst:
        """The FST of a non-end-to-end supervision."""
        if self.e2e:
            raise KaldiDataError("an end-to-end supervision has one FST per sequence: use .fsts")
        return self.fsts[0]


@attrs.frozen(eq=False)
class ChainOutput:
    """One chain output (NnetChainSupervision): `name`, `indexes` int32 [rows, 3], `supervision`,
    `deriv_weights` float32 [rows] or None where the file has none."""

    name: str
    indexes: np.ndarray
    supervision: Supervision
    deriv_weights: np.ndarray | None


@attrs.frozen(eq=False)
class ChainExample:
    """One chain example (NnetChainExample): `key`, `inputs` (NnetIo) and `outputs` (ChainOutput)."""

    key: str
    inputs: tuple[NnetIo, ...]
    outputs: tuple[ChainOutput, ...]


# ---------------------------------------------------------------------------------------------- decoding


def decode_compressed(
    kind: str, min_value: float, range_: float, rows: int, cols: int, data: Any, offset: int = 0
) -> np.ndarray:
    """A Kaldi CompressedMatrix (`kind` CM, CM2 or CM3; its data: the bytes of `data` from `offset`, after the
    16-byte header, as many as the format says) as float32 [rows, cols], with the float arithmetic of Kaldi's
    CopyToMat; decoded in blocks (`symnet._src.base.bounded.tiles`), so its scratch is a few MiB whatever the size."""
    lo, rng = np.float32(min_value), np.float32(range_)
    out = np.empty((rows, cols), np.float32)
    if kind in ("CM2", "CM3"):
        dtype, scale = ("<u2", 65535.0) if kind == "CM2" else ("u1", 255.0)
        inc = np.float32(np.float64(rng) * (1.0 / scale))
        q = _buffer(data, dtype, rows * cols, offset).reshape(rows, cols)
        for r, c in tiles(rows, cols):
            out[r, c] = lo + q[r, c].astype(np.float32) * inc
        return out
    if kind != "CM":
        raise ValueError(f"unknown compressed matrix kind {kind!r}")
    heads = _buffer(data, "<u2", 4 * cols, offset).reshape(cols, 4).astype(np.float32)
    step = rng * np.float32(1.52590218966964e-05)
    p0, p25, p75, p100 = (lo + step * heads[:, i : i + 1] for i in range(4))  # [cols, 1] each
    q = _buffer(data, "u1", rows * cols, offset + 8 * cols).reshape(cols, rows)  # stored column by column
    for c, r in tiles(cols, rows):
        out[r, c] = _percentiles(q[c, r], p0[c], p25[c], p75[c], p100[c]).T
    return out


def _percentiles(q: np.ndarray, p0: Any, p25: Any, p75: Any, p100: Any) -> np.ndarray:
    """Kaldi's CharToFloat of bytes `q` [cols, rows] between their columns' percentiles (each [cols, 1])."""
    v = q.astype(np.float32)
    low = ((p25 - p0) * v).astype(np.float64) * (1 / 64.0) + p0
    mid = ((p75 - p25) * (v - 64)).astype(np.float64) * (1 / 128.0) + p25
    high = ((p100 - p75) * (v - 192)).astype(np.float64) * (1 / 63.0) + p75
    return np.where(q <= 64, low, np.where(q <= 192, mid, high)).astype(np.float32)


class Parse:
    """Reads one archive's examples with `binary.BinaryReader` / `TextReader`; `field` names what is read."""

    def __init__(self, data: Any, where: str, quote: bool = True):
        self.data, self.where = data, where
        self.quote = quote  # False: never name what the file holds (an scp chose the file and the offset)
        self.key = ""
        self.field = ""
        self.start = 0  # the byte where the example being read starts (its object, once its key is read)
        self.text: str | None = None

    def named(self, field: str, name: str) -> str:
        """`field`, with the name the file gives it where the file's contents may be shown."""
        return f"{field} ({name!r})" if self.quote else field

    def fail(self, message: str) -> KaldiDataError:
        field = f", {self.field}" if self.field else ""
        return KaldiDataError(f"{self.place()}{field}: {message}")

    def place(self) -> str:
        """The archive and the example being read."""
        return f"{self.where}, example {self.key!r}" if self.key else self.where

    # one object

    def reader(self, pos: int) -> BinaryReader | TextReader:
        if self.data[pos : pos + 2] == b"\0B":
            return BinaryReader(self.data, pos + 2, file=self.where)
        if self.text is None:  # text archives: decoded once, one character a byte
            self.text = bytes(self.data).decode("latin-1")
        return TextReader(self.text, pos, file=self.where)

    def entries(self, chain: bool) -> Iterator[tuple[int, Any]]:
        """`(offset, example)` of every example of the archive, in order (`offset`: where the example's object
        starts, after its key, as an scp line names it)."""
        data, pos, n = self.data, 0, len(self.data)
        while True:
            while pos < n and data[pos] in b" \t\r\n":
                pos += 1
            if pos >= n:
                return
            end = data.find(b" ", pos, pos + MAX_KEY_BYTES + 1)
            self.key, self.field, self.start = "", "", pos
            if end < 0:
                raise self.fail(f"byte {pos}: no key followed by a space (at most {MAX_KEY_BYTES} bytes)")
            try:
                self.key = bytes(data[pos:end]).decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail(f"byte {pos}: the key is not UTF-8") from None
            self.start = end + 1
            r = self.reader(end + 1)
            try:
                yield end + 1, self.chain_example(r) if chain else self.example(r)
            except ModelFormatError as e:
                if not self.quote:
                    raise  # the caller names the place, and what was expected, never the file's contents
                raise self.fail(str(e).removeprefix(f"{self.where}: ")) from None
            pos = r.pos

    def count(self, r: BinaryReader | TextReader, what: str, low: int, high: int, per: int = 0) -> int:
        """An int32 in low..high; with `per`, also at most what is left over `per` bytes an item."""
        value = r.read_int(what)
        if per:
            left = (len(r.text) if isinstance(r, TextReader) else len(r.data)) - r.pos
            if value > left // per:
                raise self.fail(f"{what} is {value}, more than {left} bytes left can hold (damaged or crafted)")
        if not low <= value <= high:
            raise self.fail(f"{what} is {value}, expected {low} to {high}")
        return value

    # nnet3

    def example(self, r: BinaryReader | TextReader) -> NnetExample:
        self.field = "header"
        r.expect_token("<Nnet3Eg>")
        r.expect_token("<NumIo>")
        size = self.count(r, "the number of inputs and outputs", 1, MAX_IOS)
        ios = tuple(self.nnet_io(r, i) for i in range(size))
        self.field = "end"
        r.expect_token("</Nnet3Eg>")
        return NnetExample(self.key, ios)

    def nnet_io(self, r: BinaryReader | TextReader, i: int) -> NnetIo:
        self.field = f"NnetIo {i}"
        r.expect_token("<NnetIo>")
        name = r.read_token("the NnetIo name")
        self.field = self.named(f"NnetIo {i}", name)
        indexes = self.indexes(r)
        matrix, storage, sparse = self.general_matrix(r)
        rows = sparse.num_rows if sparse is not None else len(matrix) if matrix is not None else 0
        if rows != len(indexes):
            raise self.fail(f"{len(indexes)} indexes but a matrix of {rows} rows")
        r.expect_token("</NnetIo>")
        return NnetIo(name, indexes, matrix, storage, sparse, where=self.place())

    def indexes(self, r: BinaryReader | TextReader) -> np.ndarray:
        r.expect_token("<I1V>")
        if isinstance(r, TextReader):
            size = self.count(r, "the number of indexes", 0, 2**31 - 1, per=10)  # '<I1> 0 0 0 '
            out = np.zeros((size, 3), np.int32)
            for k in range(size):
                r.expect_token("<I1>")
                out[k] = (r.read_int("index n"), r.read_int("index t"), r.read_int("index x"))
            return _frozen(out)
        size = self.count(r, "the number of indexes", 0, 2**31 - 1, per=1)  # at least a byte each
        indexes, r.pos = read_index_vector(r.data, r.pos, size, self.fail)
        return _frozen(indexes)

    def dense_cap(self, rows: int, cols: int) -> None:
        if rows * cols > MAX_DENSE_VALUES:
            raise self.fail(f"a {rows} x {cols} matrix is more than {MAX_DENSE_VALUES} values")

    def general_matrix(self, r: BinaryReader | TextReader) -> tuple[np.ndarray | None, str, SparseRows | None]:
        """The matrix, its storage, and for a sparse one its pairs (and no matrix: it is made dense on use)."""
        start = r.skip_ws()
        if isinstance(r, TextReader):
            if r.peek() == "r":
                return None, "text-sparse", self.sparse_text(r)
            return _frozen(np.asarray(r.read_matrix("the matrix"), np.float32)), "text", None
        token = r.peek_array_token()
        if token in ("CM", "CM2", "CM3"):
            r.read_token(token)
            if len(r.data) - r.pos < 16:
                raise self.fail(f"the {token} header needs 16 bytes, {len(r.data) - r.pos} left")
            lo, rng, rows, cols = struct.unpack_from("<ffii", r.data, r.pos)
            r.pos += 16
            if cols == 0:  # Kaldi: an empty matrix, whatever the rows say
                return _frozen(np.zeros((0, 0), np.float32)), token, None
            if rows < 0 or cols < 0:
                raise self.fail(f"a compressed matrix of {rows} x {cols}")
            size = compressed_bytes(token, rows, cols)
            if size > len(r.data) - r.pos:
                raise self.fail(f"a {token} {rows} x {cols} matrix needs {size} bytes, {len(r.data) - r.pos} left")
            self.dense_cap(rows, cols)
            out = decode_compressed(token, lo, rng, rows, cols, r.data, r.pos)
            r.pos += size
            return _frozen(out), token, None
        if r.peek() == ord("S"):
            r.expect_token("SM")
            rows = self.count(r, "the rows of a sparse matrix", 0, 9_999_999, per=13)
            sparse, r.pos = read_sparse_binary(r.data, r.pos, rows, self.fail)
            return None, "SM", sparse
        if token not in ("FM", "DM"):
            got = r.peek_token()[:20] if r.peek() >= 0 else "the end of the file"
            raise self.fail(f"byte {start}: expected a matrix (FM, DM, CM, CM2, CM3 or SM), got {got!r}")
        matrix = r.read_matrix("the matrix")
        self.dense_cap(*matrix.shape)
        return _frozen(np.asarray(matrix, np.float32)), token, None

    def sparse_text(self, r: TextReader) -> SparseRows:
        word, _ = r.read_word("rows=N")
        if not word.startswith("rows=") or not is_digits(word[5:]):
            raise self.fail(f"expected rows=N to start a sparse matrix, got {word[:20]!r}")
        rows = int(word[5:])
        if rows > (len(r.text) - r.pos) // 8:  # 'dim=1 [ ] ' at least
            raise self.fail(f"a sparse matrix of {rows} rows in {len(r.text) - r.pos} characters")
        dim, pairs = 0, PairRows(rows)
        for row in range(rows):
            word, _ = r.read_word(f"dim=N of sparse row {row}")
            if not word.startswith("dim=") or not is_digits(word[4:]) or int(word[4:]) >= 2**31:
                raise self.fail(f"sparse row {row}: expected dim=N, got {word[:20]!r}")
            if row and int(word[4:]) != dim:
                raise self.fail(f"sparse row {row} has dim {int(word[4:])}, row 0 dim {dim}")
            dim = int(word[4:])
            content, _, _ = r.bracket(f"sparse row {row}")
            words = content.split()
            if len(words) % 2:
                raise self.fail(f"sparse row {row}: an odd number of words in [ {content[:40]} ]")
            try:
                row_cols = [int(w) for w in words[::2]]
                row_values = [float(w) for w in words[1::2]]
            except ValueError:
                raise self.fail(f"sparse row {row}: expected column value pairs, got [ {content[:40]} ]") from None
            if any(not 0 <= c < 2**31 for c in row_cols):
                raise self.fail(f"sparse row {row}: a column beyond int32")
            pairs.add(row, row_cols, row_values)
        return pairs.sparse(dim, self.fail)

    # chain

    def chain_example(self, r: BinaryReader | TextReader) -> ChainExample:
        self.field = "header"
        r.expect_token("<Nnet3ChainEg>")
        r.expect_token("<NumInputs>")
        size = self.count(r, "the number of inputs", 1, MAX_IOS)
        inputs = tuple(self.nnet_io(r, i) for i in range(size))
        self.field = "outputs"
        r.expect_token("<NumOutputs>")
        size = self.count(r, "the number of outputs", 1, MAX_IOS)
        outputs = tuple(self.chain_output(r, i) for i in range(size))
        self.field = "end"
        r.expect_token("</Nnet3ChainEg>")
        return ChainExample(self.key, inputs, outputs)

    def chain_output(self, r: BinaryReader | TextReader, i: int) -> ChainOutput:
        self.field = f"chain output {i}"
        r.expect_token("<NnetChainSup>")
        name = r.read_token("the output name")
        self.field = self.named(f"chain output {i}", name)
        indexes = self.indexes(r)
        supervision = self.supervision(r, self.field)
        token = r.read_token("<DW2> or </NnetChainSup>")
        deriv: np.ndarray | None = None
        if token == "<DW>":
            raise self.fail("<DW> deriv weights (Kaldi's format before 2016, stored as chars) are not read")
        if token == "<DW2>":
            self.field = f"{self.named(f'chain output {i}', name)} deriv weights"
            deriv = _frozen(np.asarray(r.read_vector("the deriv weights"), np.float32))
            r.expect_token("</NnetChainSup>")
        elif token != "</NnetChainSup>":
            raise self.fail(f"expected <DW2> or </NnetChainSup>, got {token[:20]!r}")
        rows = supervision.num_sequences * supervision.frames_per_sequence
        if len(indexes) != rows:
            raise self.fail(
                f"{len(indexes)} indexes for {supervision.num_sequences} sequences of "
                f"{supervision.frames_per_sequence} frames"
            )
        if deriv is not None and len(deriv) == 0:
            deriv = None
        if deriv is not None and len(deriv) != rows:
            raise self.fail(f"{len(deriv)} deriv weights for {rows} frames")
        return ChainOutput(name, indexes, supervision, deriv)

    def supervision(self, r: BinaryReader | TextReader, where: str) -> Supervision:
        self.field = f"{where} supervision"
        r.expect_token("<Supervision>")
        r.expect_token("<Weight>")
        weight = float(r.read_real("the supervision weight"))
        if not math.isfinite(weight) or weight < 0:
            raise self.fail(f"the supervision weight is {weight}, not a finite number >= 0")
        r.expect_token("<NumSequences>")
        num = self.count(r, "the number of sequences", 1, MAX_IOS)
        r.expect_token("<FramesPerSeq>")
        frames = self.count(r, "the frames per sequence", 1, 2**31 - 1)
        r.expect_token("<LabelDim>")
        label_dim = self.count(r, "the label dim", 1, 2**31 - 1)
        r.expect_token("<End2End>")
        e2e = r.read_bool("<End2End>")
        if e2e:
            r.expect_token("<Fsts>")
            fsts = tuple(self.fst(r, f"{where} FST {k}", label_dim) for k in range(num))
            r.expect_token("</Fsts>")
        else:
            fsts = (self.fst(r, f"{where} FST", label_dim),)
        self.field = f"{where} supervision"
        pdfs = None
        if r.peek_token() == "<AlignmentPdfs>":
            r.expect_token("<AlignmentPdfs>")
            pdfs = r.read_int_vector("the alignment pdfs")
        r.expect_token("</Supervision>")
        return Supervision(weight, num, frames, label_dim, e2e, fsts, pdfs)

    def fst(self, r: BinaryReader | TextReader, field: str, label_dim: int) -> Fst:
        self.field = field
        fst = self.fst_text(r) if isinstance(r, TextReader) else self.fst_binary(r)
        if fst.num_arcs and (fst.ilabel.min() < 1 or fst.ilabel.max() > label_dim):
            bad = int(fst.ilabel.min() if fst.ilabel.min() < 1 else fst.ilabel.max())
            raise self.fail(f"an arc label {bad} outside 1..{label_dim} (pdf + 1)")
        return fst

    def fst_binary(self, r: BinaryReader) -> Fst:
        data = r.data

        def take(fmt: str, what: str) -> Any:
            size = struct.calcsize(fmt)
            if size > len(data) - r.pos:
                raise self.fail(f"the FST's {what} needs {size} bytes, {len(data) - r.pos} left")
            value = struct.unpack_from(fmt, data, r.pos)
            r.pos += size
            return value[0] if len(value) == 1 else value

        def string(what: str) -> str:
            length = take("<i", f"{what} length")
            if not 0 <= length <= 256 or length > len(data) - r.pos:
                raise self.fail(f"the FST's {what} has length {length}")
            value = bytes(data[r.pos : r.pos + length]).decode("latin-1")
            r.pos += length
            return value

        if take("<i", "magic number") != _FST_MAGIC:
            raise self.fail("not an OpenFst binary FST (bad magic number)")
        kind, arc = string("type"), string("arc type")
        if kind != "compact_acceptor" or arc != "standard":
            raise self.fail(f"an FST of type {kind!r} over {arc!r} arcs (Kaldi writes compact_acceptor, standard)")
        version, flags, _props, start, states, arcs = take("<iiQqqq", "header")
        if version not in (1, 2):
            raise self.fail(f"a compact_acceptor FST of version {version} (symnet reads versions 1 and 2)")
        if flags & 3:
            raise self.fail("an FST with symbol tables (Kaldi's supervision FSTs have none)")
        if flags & 4:
            raise self.fail("an FST written aligned (--fst_align): not read")
        if not 0 <= states <= (len(data) - r.pos) // 4 - 1 or not -1 <= start < max(states, 0) or arcs < 0:
            raise self.fail(f"an FST header of {states} states, start {start}, {arcs} arcs (damaged?)")
        bounds = _buffer(data, "<u4", states + 1, r.pos).astype(np.int64)
        r.pos += 4 * (states + 1)
        total = int(bounds[-1])
        if bounds[0] != 0 or (np.diff(bounds) < 0).any() or 12 * total > len(data) - r.pos:
            raise self.fail(f"the FST's state table is damaged ({total} elements, {len(data) - r.pos} bytes left)")
        elems = _buffer(data, [("label", "<i4"), ("weight", "<f4"), ("next", "<i4")], total, r.pos)
        r.pos += 12 * total
        owner = np.repeat(np.arange(states, dtype=np.int32), np.diff(bounds))
        is_final = elems["label"] == -1
        first = np.zeros(total, bool)
        first[bounds[:-1][np.diff(bounds) > 0]] = True
        if (is_final & ~first).any():
            raise self.fail("a final weight that is not the first element of its state (damaged FST)")
        final = np.full(states, _INF, np.float32)
        final[owner[is_final]] = elems["weight"][is_final]
        arc = ~is_final
        if int(arc.sum()) != arcs:
            raise self.fail(f"the FST header says {arcs} arcs, its data has {int(arc.sum())}")
        dst = elems["next"][arc]
        if len(dst) and (dst.min() < 0 or dst.max() >= states):
            raise self.fail(f"an FST arc to state {int(dst.max() if dst.max() >= states else dst.min())} of {states}")
        labels = _frozen(elems["label"][arc].astype(np.int32))
        return self.make_fst(
            start=int(start),
            final=_frozen(final),
            src=_frozen(owner[arc].copy()),
            dst=_frozen(dst.astype(np.int32)),
            ilabel=labels,
            olabel=labels,
            weight=_frozen(elems["weight"][arc].astype(np.float32)),
        )

    def make_fst(self, **arrays: Any) -> Fst:
        try:
            return Fst(**arrays)
        except ChainError as e:
            raise self.fail(str(e)) from None

    def fst_text(self, r: TextReader) -> Fst:
        text = r.text
        while r.pos < len(text) and text[r.pos] in " \t\r\v\f":
            r.pos += 1
        if r.peek() != "\n":
            raise self.fail("a text FST must start on a new line")
        r.pos += 1
        end = text.find("\n\n", r.pos - 1)
        if end < 0:
            raise self.fail("a text FST without the empty line that ends it")
        lines = text[r.pos : end + 1].splitlines() if end + 1 > r.pos else []
        r.pos = end + 2
        try:
            fst = parse_fst_text("\n".join(lines), name="the FST")
        except ChainError as e:
            raise self.fail(str(e)) from None
        different = np.flatnonzero(fst.ilabel != fst.olabel)
        if len(different):
            k = int(different[0])
            raise self.fail(f"FST arc {k}: labels {fst.ilabel[k]} and {fst.olabel[k]} differ (not an acceptor)")
        for array in (fst.final, fst.src, fst.dst, fst.ilabel, fst.olabel, fst.weight):
            _frozen(array)
        return fst
