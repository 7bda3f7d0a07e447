"""Kaldi archive and scp entries read with every size checked before it is read, and nothing run unasked.

kaldiio reads what a file says: a matrix header's row and column counts
decide how much it reads and allocates, an entry starting with `PKL` is
unpickled, and an scp entry ending in `|` is run as a shell command. This
module reads the same Kaldi objects (binary float and double matrices and
vectors, int32 vectors, compressed matrices `CM`/`CM2`/`CM3`, text matrices and
vectors; and Kaldi's posteriors, `read_posterior`) but

- reads the header first and refuses sizes beyond what is left in the file
  (or, on a stream, beyond `MAX_ENTRY_BYTES`) before reading the data;
- refuses pickle, NumPy and audio entries (they are not Kaldi tables);
- bounds keys (`MAX_KEY_BYTES`) and scp lines (`MAX_LINE_BYTES`);
- runs an scp entry that is a command (`... |`, `| ...`) only with
  `allow_pipes=True`, and opens only regular files otherwise.

The bytes of a binary entry are then decoded by kaldiio, so the values are
exactly kaldiio's (a compressed matrix with kaldiio's own decoding, block by
block: `decode_compressed`); text entries are parsed here, with a whole block per
`bytes.split` (kaldiio reads them a byte at a time: `benchmarks/text_ark.py`),
to kaldiio's values and types, except that a vector is int32 only if every
value is an integer (kaldiio looks at the first, and fails on Kaldi's
`[ 0 0.5 ]`), and a value that is not a number is named with its place.
Errors are `KaldiDataError`s naming the file, the entry and the field; for a
file and offset an scp line chose, they show no byte or token read there.
The rspecifier the user types (`ark:cmd |`, `scp:-`) is opened as kaldiio
opens it: that command is the user's own.

The parts: this module (objects, and archives of them), `ark_stream` (the bounded reader and the limits),
`posterior` (Kaldi's posteriors) and `scp` (scp files and the entries they name).
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np

from ..base.bounded import compressed_bytes, tiles
from .ark_stream import MAX_KEY_BYTES, MAX_LINE_BYTES, _int32, _Reader

__all__ = ["ark_offsets", "decode_compressed", "iter_ark", "read_object"]


_ENTRY_READAHEAD = 1 << 12  # reading one object by offset: enough for a header
_NOT_KALDI = {
    b"PKL": "a pickle",
    b"NPY": "a NumPy array",
    b"AUDIO": "audio",
    b"RIFF": "a wav file",
    b"fLaC": "a flac file",
}


def _binary_entry(r: _Reader, key: str | None) -> bytes:
    """The bytes of one binary object (from its `\\0B`)."""
    out = r.read(2, key, "the binary marker")
    if r.peek(1) == b"\x04":  # an int32 vector: its length, then a size byte and 4 bytes per element
        data, length = _int32(r, key, "the vector length")
        return out + data + r.read(5 * length, key, f"an int32 vector of {length} elements")
    token, found = r.read_until(b" ", 4, key, "the object type")
    name = token.rstrip(b" ").decode("latin-1")
    if not found or name not in ("FM", "FV", "DM", "DV", "CM", "CM2", "CM3"):
        raise r.error(
            key,
            f"unknown binary object type {r.shown(name)} (Kaldi's are FM, FV, DM, DV, CM, CM2, CM3 and int32 vectors)",
        )
    out += token
    if name.startswith("CM"):
        header = r.read(16, key, "the compressed matrix header")
        rows, cols = struct.unpack("<ii", header[8:16])
        if rows < 0 or cols < 0:
            raise r.error(key, f"a compressed matrix of {rows} x {cols}")
        size = compressed_bytes(name, rows, cols)
        return out + header + r.read(size, key, f"a compressed {rows} x {cols} matrix")
    width = 4 if name[0] == "F" else 8
    data, rows = _int32(r, key, "the row count")
    out += data
    if name[1] == "V":
        return out + r.read(width * rows, key, f"a vector of {rows}")
    data, cols = _int32(r, key, "the column count")
    return out + data + r.read(width * rows * cols, key, f"a {rows} x {cols} matrix")


def _text_entry(r: _Reader, key: str | None) -> bytes:
    """The bytes of one text object as kaldiio reads it: `[ ... ]` and the byte after, or one line."""
    out = bytearray()
    while r.peek(1) in (b" ", b"\n"):
        out += r.byte()
        if len(out) > MAX_LINE_BYTES:
            raise r.error(key, f"more than {MAX_LINE_BYTES} blanks before the object")
    if not r.peek(1):
        raise r.error(key, "nothing after the utterance id")
    cap = r.available()
    if r.peek(1) == b"[":
        rest, found = r.read_until(b"]", cap, key, "a text matrix")
        if not found:
            raise r.error(key, "a text matrix '[' without its ']'")
        return bytes(out + rest + r.byte())
    return bytes(out + r.read_until(b"\n", cap, key, "a text vector")[0])


def read_object(fd: IO[bytes], where: str, key: str | None, quote: bool = True) -> np.ndarray:
    """One Kaldi object (matrix or vector) from `fd`, sizes checked before reading (`key`: for messages); a
    binary one is read with little look-ahead (its data goes straight into its array). With `quote=False`
    (a file and offset an scp line chose) an error shows no byte or token read there."""
    return _read_object(_Reader(fd, where, _ENTRY_READAHEAD, quote), key)


def _read_object(r: _Reader, key: str | None) -> np.ndarray:
    import kaldiio.matio

    head = r.peek(5)
    for magic, kind in _NOT_KALDI.items():
        if head.startswith(magic):
            raise r.error(key, f"the entry is {kind}, not a Kaldi matrix or vector (symnet never reads those)")
    if not head.startswith(b"\0B"):
        return _parse_text(_text_entry(r, key), r, key)
    if head[2:] in (b"FM ", b"DM ", b"FV ", b"DV "):
        return _read_dense(r, key)
    data = _binary_entry(r, key)
    if data[2:4] == b"CM":
        return decode_compressed(data)
    try:
        value = kaldiio.matio.read_kaldi(io.BytesIO(data))
    except Exception as e:  # kaldiio's asserts and ValueErrors on malformed data
        reason = f" ({_reason(e)})" if r.quote else ""
        raise r.error(key, f"not a valid Kaldi matrix or vector{reason}") from None
    if not isinstance(value, np.ndarray):
        raise r.error(key, f"a {type(value).__name__}, not a matrix or vector")
    return value


def _read_dense(r: _Reader, key: str | None) -> np.ndarray:
    """A binary float or double matrix or vector, its size checked against the file, read straight into its array
    (kaldiio's values: little-endian float32 or float64)."""
    head = r.peek(15)
    name = head[2:4].decode("latin-1")
    if (shape := _matrix_header(head)) is not None:  # the usual case, unpacked at once
        r.pos += 15
        return _dense_data(r, key, name, *shape)
    r.read(5, key, "the object type")
    rows = _int32(r, key, "the row count")[1]
    cols = _int32(r, key, "the column count")[1] if name[1] == "M" else None
    return _dense_data(r, key, name, rows, cols)


def _matrix_header(head: bytes) -> tuple[int, int] | None:
    """`(rows, cols)` of the 15-byte header of a binary float or double matrix (`\\0BFM `, then two int32s with
    their size bytes), or None where the bytes are something else."""
    if len(head) < 15 or head[:2] != b"\0B" or head[2:5] not in (b"FM ", b"DM ") or head[5] != 4 or head[10] != 4:
        return None
    rows, cols = struct.unpack_from("<i", head, 6)[0], struct.unpack_from("<i", head, 11)[0]
    return (rows, cols) if rows >= 0 and cols >= 0 else None


def _dense_data(r: _Reader, key: str | None, name: str, rows: int, cols: int | None) -> np.ndarray:
    """The data of a dense object of type `name` (`cols` None: a vector) after its header."""
    dtype = np.dtype("<f4" if name[0] == "F" else "<f8")
    shape = (rows,) if cols is None else (rows, cols)
    size = dtype.itemsize * rows * (1 if cols is None else cols)
    what = f"a vector of {rows}" if cols is None else f"a {rows} x {cols} matrix"
    r.check_size(size, key, what)
    value = np.empty(shape, dtype)
    r.read_into(_bytes_of(value), key, what)
    return value


def _parse_text(data: bytes, r: _Reader, key: str | None) -> np.ndarray:
    """A text object as kaldiio reads it: `[ ... ]` with rows on lines is a float32 matrix; a vector (`[ ... ]`
    on one line, or an unbracketed line such as an alignment) is int32 if every value is an integer, else
    float32 (an unbracketed line only if its first value has a '.', as kaldiio; else it is an int32 vector)."""
    text = data.strip(b" \n")
    if not text.startswith(b"["):
        words = text.split()
        if _all_integers(words) or not (words and b"." in words[0]):
            return _numbers(words, np.int32, r, key, "an unbracketed line (an int32 vector, such as an alignment)")
        return _numbers(words, np.float32, r, key, "a text vector")
    if not text.endswith(b"]"):
        raise r.error(key, "a text matrix or vector must end its ']' with a newline")
    body = text[1:-1]
    if b"\n" not in body:
        words = body.split()
        return _numbers(words, np.int32 if _all_integers(words) else np.float32, r, key, "a text vector")
    counts = [len(line.split()) for line in body.split(b"\n")]
    counts = [c for c in counts if c]
    if any(c != counts[0] for c in counts):
        row = next(i for i, c in enumerate(counts) if c != counts[0])
        raise r.error(key, f"a text matrix: row {row + 1} has {counts[row]} values, row 1 has {counts[0]}")
    values = _numbers(body.split(), np.float32, r, key, "a text matrix")
    return values.reshape(len(counts), counts[0] if counts else 0)


def _all_integers(words: list[bytes]) -> bool:
    return bool(words) and all(_INT_WORD.match(w.decode("latin-1")) for w in words)


def _numbers(words: list[bytes], dtype: type, r: _Reader, key: str | None, what: str) -> np.ndarray:
    """`words` as an array of `dtype`; a word that is not such a number is an error naming it and its place."""
    pattern = _INT_WORD if dtype is np.int32 else None
    try:
        if pattern is not None:
            values = np.array([int(w) if pattern.match(w.decode("latin-1")) else None for w in words], dtype=np.int64)
            if len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
                raise OverflowError
            return values.astype(np.int32)
        return np.array(words, dtype=np.bytes_).astype(dtype) if words else np.zeros(0, dtype)
    except (ValueError, TypeError, OverflowError):
        kind = "an int32" if dtype is np.int32 else "a number"
        bad = next((i for i, w in enumerate(words) if not _is_number(w, dtype)), None)
        if bad is None:
            raise r.error(key, f"{what}: a value is not {kind}") from None
        raise r.error(
            key, f"{what}: value {bad + 1} of {len(words)}, {r.shown(words[bad][:40].decode('latin-1'))}, is not {kind}"
        ) from None


def _is_number(word: bytes, dtype: type) -> bool:
    text = word.decode("latin-1")
    if dtype is np.int32:
        return bool(_INT_WORD.match(text)) and -(2**31) <= int(text) < 2**31
    try:
        float(text)
    except ValueError:
        return False
    return True


_INT_WORD = re.compile(r"[+-]?[0-9]+\Z")


def _reason(error: BaseException) -> str:
    """kaldiio's error in words (its asserts have no text worth showing)."""
    if isinstance(error, AssertionError):
        return "a malformed field"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def iter_ark(
    fd: IO[bytes], where: str, read: Callable[[_Reader, str | None], Any] = _read_object
) -> Iterator[tuple[str, Any]]:
    """`(key, array)` for every entry of a Kaldi archive (blanks before a key are skipped, as in Kaldi); `read`
    reads one object (`_read_posterior` for posteriors)."""
    r = _Reader(fd, where)
    while (key := _next_key(r)) is not None:
        yield key, read(r, key)


def ark_offsets(fd: IO[bytes], where: str) -> Iterator[tuple[str, int]]:
    """`(key, offset)` of every entry of a Kaldi archive (its object starts `offset` bytes after where `fd` was),
    each object's size checked and skipped, not decoded: an index for reading entries later by offset."""
    r = _Reader(fd, where)
    while (key := _next_key(r)) is not None:
        offset = r.consumed()
        if r.peek(2) == b"\0B":
            _binary_entry(r, key)
        else:
            _text_entry(r, key)
        yield key, offset


def _next_key(r: _Reader) -> str | None:
    """The next entry's key (blanks before it skipped, as in Kaldi), or None at the end of the archive."""
    while r.peek(1) in (b" ", b"\n", b"\r", b"\t"):
        r.byte()
    if not r.peek(1):
        return None
    token, found = r.read_until(b" ", MAX_KEY_BYTES, None, "an utterance id")
    if not found:
        raise r.error(None, f"the file ends after the utterance id {token[:40]!r}")
    try:
        return token[:-1].decode("utf-8")
    except UnicodeDecodeError:
        raise r.error(None, f"utterance id {token[:40]!r} is not UTF-8") from None


def decode_compressed(data: bytes) -> np.ndarray:
    """A binary compressed matrix (`\\0BCM `, `CM2 ` or `CM3 `, its header and all its data) as kaldiio decodes
    it (its header classes, so the values are kaldiio's), in blocks of `symnet._src.base.bounded.tiles`: the scratch
    stays a few MiB, where kaldiio's own decode takes about 24 bytes a value."""
    from kaldiio.compression_header import GlobalHeader, PerColHeader

    kind = data[2 : data.index(b" ", 2)].decode("latin-1")
    start = 3 + len(kind)
    lo, span, rows, cols = struct.unpack_from("<ffii", data, start)
    header = GlobalHeader(kind, lo, span, rows, cols)
    out = np.empty((rows, cols), np.float32)
    if kind != "CM":
        dtype = "<u2" if kind == "CM2" else "u1"
        q = np.frombuffer(data, dtype, rows * cols, start + 16).reshape(rows, cols)
        for r, c in tiles(rows, cols):
            out[r, c] = header.uint_to_float(q[r, c])
        return out
    heads = header.uint_to_float(np.frombuffer(data, "<u2", 4 * cols, start + 16).astype(np.float32))
    heads = heads.reshape(cols, 4, 1)
    q = np.frombuffer(data, "u1", rows * cols, start + 16 + 8 * cols).reshape(cols, rows)
    for c, r in tiles(cols, rows):
        percentiles = PerColHeader(heads[c, 0], heads[c, 1], heads[c, 2], heads[c, 3])
        out[r, c] = percentiles.char_to_float(q[c, r]).T
    return out


def _bytes_of(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, writable in place (of an empty array: none)."""
    if not array.size:
        return memoryview(bytearray())
    return memoryview(array).cast("B")  # type: ignore[arg-type]
