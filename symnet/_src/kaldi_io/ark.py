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
"""

from __future__ import annotations

import io
import os
import re
import stat
import struct
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

import numpy as np

from ..bounded import compressed_bytes, tiles
from ..errors import KaldiDataError, SymnetError
from ..safe_read import open_regular
from ..text import ascii_int, is_digits

__all__ = [
    "ark_offsets",
    "entry_rows",
    "is_command",
    "iter_ark",
    "iter_scp",
    "MAX_ENTRY_BYTES",
    "MAX_KEY_BYTES",
    "MAX_LINE_BYTES",
    "MAX_POSTERIOR_FRAMES",
    "open_spec",
    "parse_scp_line",
    "PIPE_HINT",
    "Posterior",
    "read_entry",
    "read_object",
    "read_posterior",
]

#: The most bytes one entry read from a stream (a pipe, stdin) may have: far more than any utterance.
MAX_ENTRY_BYTES = 1 << 31
#: The longest utterance id (Kaldi's keys are short words).
MAX_KEY_BYTES = 1 << 16
#: The longest line of an scp file.
MAX_LINE_BYTES = 1 << 20

_CHUNK = 1 << 20
_READAHEAD = 1 << 16
_ENTRY_READAHEAD = 1 << 12  # reading one object by offset: enough for a header
_NOT_KALDI = {
    b"PKL": "a pickle",
    b"NPY": "a NumPy array",
    b"AUDIO": "audio",
    b"RIFF": "a wav file",
    b"fLaC": "a flac file",
}


#: What an error says instead of the bytes of a file an scp line chose (the file and the offset).
_HIDDEN = "what the file holds there is not shown: the scp line chose the file and the offset"

PIPE_HINT = "an entry that runs a command; pass allow_pipes=True (symnet's --allow-pipes) to run it"


def is_command(value: str) -> bool:
    """Whether kaldiio would run `value` (an scp entry or file name) as a shell command."""
    return "|" in value


class _Reader:
    """Bounded reads from a binary file, with look-ahead; `left` is what is left in a regular file (else None).

    Reads ahead in blocks of `_READAHEAD` bytes (on a pipe: what is there, `read1`), so scanning a text
    archive for its delimiters costs a `bytes.find` per block, not a Python call per byte.
    """

    def __init__(self, fd: IO[bytes], where: str, readahead: int = _READAHEAD, quote: bool = True):
        self.fd, self.where, self.readahead = fd, where, readahead
        self.quote = quote  # False: an scp chose the file and the offset, so no error shows what is there
        self.buffer, self.pos = b"", 0  # bytes read ahead; buffer[pos:] is not consumed yet
        self.left: int | None = None
        self._consumed = 0  # bytes read from `fd` so far (`tell`)
        self._read_some = getattr(fd, "read1", fd.read)
        try:
            st = os.fstat(fd.fileno())
            if stat.S_ISREG(st.st_mode):
                self.left = st.st_size - fd.tell()
        except (OSError, AttributeError, io.UnsupportedOperation, ValueError):
            self.left = None

    def error(self, key: str | None, message: str) -> KaldiDataError:
        at = f", utterance {key!r}" if key is not None else ""
        note = "" if self.quote else f" ({_HIDDEN})"
        return KaldiDataError(f"{self.where}{at}: {message}{note}")

    def shown(self, text: str | bytes) -> str:
        """`text` read from the file, quoted for an error where the file's contents may be shown."""
        return repr(text) if self.quote else "(not shown)"

    def _account(self, data: bytes) -> bytes:
        self._consumed += len(data)
        if self.left is not None:
            self.left -= len(data)
        return data

    def _buffered(self) -> int:
        return len(self.buffer) - self.pos

    def consumed(self) -> int:
        """Bytes consumed since the reader was made (read ahead but not consumed: not counted)."""
        return self._consumed - self._buffered()

    def _fill(self, n: int) -> int:
        """Read ahead until `n` bytes are buffered or the file ends; the number buffered."""
        while self._buffered() < n:
            part = self._account(self._read_some(max(n - self._buffered(), self.readahead)))
            if not part:
                break
            self.buffer, self.pos = self.buffer[self.pos :] + part, 0
        return self._buffered()

    def available(self) -> int:
        """The most bytes that can still come: what is left of a regular file, else MAX_ENTRY_BYTES."""
        return self._buffered() + (self.left if self.left is not None else MAX_ENTRY_BYTES)

    def peek(self, n: int) -> bytes:
        """Up to `n` next bytes, not consumed."""
        self._fill(n)
        return self.buffer[self.pos : self.pos + n]

    def read(self, n: int, key: str | None, what: str) -> bytes:
        """Exactly `n` bytes, read in chunks (memory grows with the data there, not with what a header says)."""
        self.check_size(n, key, what)
        take = min(n, self._buffered())
        parts, got = [self.buffer[self.pos : self.pos + take]], take
        self.pos += take
        while got < n:
            part = self._account(self.fd.read(min(_CHUNK, n - got)))
            if not part:
                raise self.error(key, f"{what}: the file ends after {got} of {n} bytes")
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def check_size(self, n: int, key: str | None, what: str) -> None:
        """An error unless `n` more bytes can come (a header's sizes, checked before anything is allocated)."""
        if n > self.available():
            left = (
                f"only {self.available()} bytes are left in the file"
                if self.left is not None
                else f"more than {MAX_ENTRY_BYTES} bytes for one entry"
            )
            raise self.error(key, f"{what} needs {n} bytes, but {left} (a damaged or crafted header)")

    def read_into(self, out: memoryview, key: str | None, what: str) -> None:
        """Fill `out` (whose size the caller checked against `available`) with the next bytes, without copies."""
        n = len(out)
        take = min(n, self._buffered())
        out[:take] = self.buffer[self.pos : self.pos + take]
        self.pos += take
        got = take
        while got < n:
            read = self.fd.readinto(out[got:]) if hasattr(self.fd, "readinto") else None
            if read is None:  # a file object without readinto
                part = self.fd.read(min(_CHUNK, n - got))
                out[got : got + len(part)] = part
                read = len(part)
            if not read:
                raise self.error(key, f"{what}: the file ends after {got} of {n} bytes")
            self._consumed += read
            if self.left is not None:
                self.left -= read
            got += read

    def byte(self) -> bytes:
        """The next byte (b"" at the end)."""
        self._fill(1)
        c = self.buffer[self.pos : self.pos + 1]
        self.pos += len(c)
        return c

    def read_until(self, stop: bytes, cap: int, key: str | None, what: str) -> tuple[bytes, bool]:
        """Bytes up to and including the first one in `stop`, or to the end; `(bytes, found)`.

        More than `cap` bytes without one is an error.
        """
        parts: list[bytes] = []
        got = 0
        while self._fill(1):
            end = min(len(self.buffer), self.pos + cap - got)
            found = [i for i in (self.buffer.find(s, self.pos, end) for s in stop) if i >= 0]
            if found:
                at = min(found) + 1
                parts.append(self.buffer[self.pos : at])
                self.pos = at
                return b"".join(parts), True
            parts.append(self.buffer[self.pos : end])
            got += end - self.pos
            self.pos = end
            if got >= cap and self._fill(1):
                raise self.error(key, f"{what} is longer than {cap} bytes")
        return b"".join(parts), False


def _int32(r: _Reader, key: str | None, what: str) -> tuple[bytes, int]:
    data = r.read(5, key, what)
    if data[:1] != b"\x04":
        raise r.error(key, f"{what}: expected the size byte 4, found {r.shown(data[:1])}")
    (value,) = struct.unpack("<i", data[1:5])
    if value < 0:
        raise r.error(key, f"{what} is {value}")
    return data, value


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


class Posterior(NamedTuple):
    """Kaldi's Posterior of one utterance (hmm/posterior.h), as the file has it: frame t's (pdf, weight)
    pairs are `pdfs[offsets[t]:offsets[t + 1]]` (int32) and `weights[...]` (float32); `offsets` is int64 [T + 1]."""

    offsets: np.ndarray
    pdfs: np.ndarray
    weights: np.ndarray

    @property
    def num_frames(self) -> int:
        return len(self.offsets) - 1


#: The most frames ReadPosterior takes (Kaldi's "improbably large size").
MAX_POSTERIOR_FRAMES = 10_000_000
_PAIR = np.dtype([("s1", "u1"), ("pdf", "<i4"), ("s2", "u1"), ("weight", "<f4")])
_INT_WORD = re.compile(r"[+-]?[0-9]+\Z")
_REAL_WORD = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def read_posterior(fd: IO[bytes], where: str, key: str | None, quote: bool = True) -> Posterior:
    """One Kaldi Posterior from `fd` (binary, or text `[ pdf weight ... ] [ ... ]` on one line), sizes
    checked before reading (`key`: for messages)."""
    return _read_posterior(_Reader(fd, where, quote=quote), key)


def _read_posterior(r: _Reader, key: str | None) -> Posterior:
    if r.peek(2) == b"\0B":
        r.read(2, key, "the binary marker")
        _, frames = _int32(r, key, "the number of frames")
        if frames > MAX_POSTERIOR_FRAMES:
            raise r.error(key, f"a posterior of {frames} frames (more than {MAX_POSTERIOR_FRAMES})")
        counts = np.zeros(frames, np.int64)
        parts = []
        try:
            for t in range(frames):
                _, counts[t] = _int32(r, key, f"the number of pairs of frame {t}")
                parts.append(r.read(_PAIR.itemsize * int(counts[t]), key, f"the {counts[t]} pairs of frame {t}"))
        except KaldiDataError as e:
            raise KaldiDataError(f"{e} (cut short, or an alignment, not posteriors?)") from None
        pairs = np.frombuffer(b"".join(parts), _PAIR)
        if len(pairs) and not ((pairs["s1"] == 4).all() and (pairs["s2"] == 4).all()):
            raise r.error(key, "a (pdf, weight) pair without its size bytes 4 (an alignment, not posteriors?)")
        offsets = np.concatenate([[0], np.cumsum(counts)])
        return Posterior(offsets, pairs["pdf"].astype(np.int32), pairs["weight"].astype(np.float32))
    line, _ = r.read_until(b"\n", r.available(), key, "a text posterior")
    words = line.decode("latin-1").split()
    counts_list: list[int] = []
    pdfs: list[int] = []
    weights: list[float] = []
    i = 0
    while i < len(words):
        if words[i] != "[":
            hint = " (alignments rather than posteriors?)" if _INT_WORD.match(words[i]) and r.quote else ""
            raise r.error(
                key, f"a text posterior: expected [ to start frame {len(counts_list)}, got {r.shown(words[i])}{hint}"
            )
        i += 1
        start = len(pdfs)
        while i < len(words) and words[i] != "]":
            if i + 1 >= len(words) or not _INT_WORD.match(words[i]) or not _REAL_WORD.match(words[i + 1]):
                shown = " ".join(words[i : i + 2])
                raise r.error(
                    key,
                    f"a text posterior: expected a pdf and a weight in frame {len(counts_list)}, got {r.shown(shown)}",
                )
            pdfs.append(int(words[i]))
            weights.append(float(words[i + 1]))
            i += 2
        if i >= len(words):
            raise r.error(key, f"a text posterior: frame {len(counts_list)} has no closing ]")
        i += 1
        counts_list.append(len(pdfs) - start)
    if any(not -(2**31) <= p < 2**31 for p in pdfs):
        raise r.error(key, "a text posterior: a pdf beyond int32")
    offsets = np.concatenate([[0], np.cumsum(np.array(counts_list, np.int64))]).astype(np.int64)
    return Posterior(offsets, np.array(pdfs, np.int32), np.array(weights, np.float64).astype(np.float32))


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


def parse_scp_line(line: str, where: str, number: int) -> tuple[str, str]:
    """`(key, entry)` of one scp line (`where`:`number` for errors)."""
    parts = line.strip().split(None, 1)
    if len(parts) != 2:
        raise KaldiDataError(f"{where}:{number}: an scp line is 'utterance-id entry', got {line.strip()[:80]!r}")
    if "\0" in parts[1]:  # no file or command has one: open() would raise a ValueError
        raise KaldiDataError(f"{where}:{number}: utterance {parts[0]!r}: the entry has a NUL byte")
    return parts[0], parts[1]


def iter_scp(fd: IO[str], where: str, allow_pipes: bool) -> Iterator[tuple[str, str]]:
    """`(key, entry)` for every line of an scp file; an entry that is a command is refused without `allow_pipes`."""
    number = 0
    while True:
        line = fd.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise KaldiDataError(f"{where}:{number}: a line longer than {MAX_LINE_BYTES} characters")
        if not line.strip():
            continue
        key, entry = parse_scp_line(line, where, number)
        if is_command(entry) and not allow_pipes:
            raise KaldiDataError(f"{where}:{number}: utterance {key!r} is {PIPE_HINT}: {entry[:80]!r}")
        yield key, entry


def _split_entry(entry: str) -> tuple[str, int | None, tuple[slice, ...] | None]:
    """`(file, offset, slices)` of an scp entry `file[:offset][[rows,cols]]`, as kaldiio splits it."""
    if is_command(entry):
        return entry, None, None
    slices = None
    if entry.endswith("]") and "[" in entry:
        entry, _, spec = entry[:-1].rpartition("[")
        slices = _slices(spec)
    offset = None
    if ":" in entry:
        name, _, tail = entry.rpartition(":")
        if is_digits(tail):
            entry, offset = name, int(tail)
    return entry, offset, slices


def _slices(spec: str) -> tuple[slice, ...]:
    """Kaldi's row/column ranges `0:9`, `0:9,3:5`, `,3:5` (inclusive ends) as slices."""
    out = []
    for part in spec.split(","):
        if part in ("", ":"):
            out.append(slice(None))
            continue
        parsed = [ascii_int(p) for p in part.split(":")]
        numbers = [n for n in parsed if n is not None]
        if len(numbers) != len(parsed):
            raise KaldiDataError(f"bad range [{spec}]: expected first:last[,first:last]")
        if len(numbers) == 1:
            numbers *= 2
        if len(numbers) != 2 or numbers[0] < 0 or numbers[1] < numbers[0]:
            raise KaldiDataError(f"bad range [{spec}]: expected first:last with 0 <= first <= last")
        out.append(slice(numbers[0], numbers[1] + 1))
    if len(out) > 2:
        raise KaldiDataError(f"bad range [{spec}]: at most rows and columns")
    return tuple(out)


def read_entry(entry: str, where: str, key: str, allow_pipes: bool = False, posterior: bool = False) -> Any:
    """The object an scp entry names: `file:offset` (a regular file), with `[rows,cols]` ranges, or a
    command (`cmd |`, only with `allow_pipes`); a `Posterior` with `posterior` (no ranges then)."""
    read: Callable[[IO[bytes], str, str | None, bool], Any] = read_posterior if posterior else read_object
    value, slices, label = _entry(entry, where, key, allow_pipes, read)
    if slices is not None:
        if posterior:
            raise KaldiDataError(f"{label}: a range [...] of a posterior (ranges are for matrices)")
        if len(slices) > value.ndim:
            raise KaldiDataError(f"{label}: a range of {len(slices)} dims for an array of shape {value.shape}")
        value = value[slices]
    return value


def entry_rows(entry: str, where: str, key: str, allow_pipes: bool = False) -> int:
    """The rows (frames) of the matrix an scp entry names, from its header where it is binary (the data is not
    read; a header that claims more than the file holds is an error), else from the whole object."""
    rows, slices, _ = _entry(entry, where, key, allow_pipes, _read_rows)
    return len(range(rows)[slices[0]]) if slices else rows


def _read_rows(fd: IO[bytes], where: str, key: str | None, quote: bool = True) -> int:
    r = _Reader(fd, where, quote=quote)
    if not r.peek(2).startswith(b"\0B"):
        return len(_read_object(r, key))
    r.read(2, key, "the binary marker")
    if r.peek(1) == b"\x04":  # an int32 vector
        return _int32(r, key, "the vector length")[1]
    token, found = r.read_until(b" ", 4, key, "the object type")
    name = token.rstrip(b" ").decode("latin-1")
    if not found or name not in ("FM", "FV", "DM", "DV", "CM", "CM2", "CM3"):
        raise r.error(key, f"unknown binary object type {r.shown(name)}")
    if name.startswith("CM"):
        rows, cols = struct.unpack("<ii", r.read(16, key, "the compressed matrix header")[8:16])
        size = compressed_bytes(name, rows, cols)
    else:
        rows = _int32(r, key, "the row count")[1]
        cols = 1 if name[1] == "V" else _int32(r, key, "the column count")[1]
        size = (4 if name[0] == "F" else 8) * rows * cols
    if rows < 0 or cols < 0 or size > r.available():
        raise r.error(key, f"a {rows} x {cols} {name} needs {size} bytes, but only {r.available()} are left")
    return rows


def _entry(
    entry: str, where: str, key: str, allow_pipes: bool, read: Callable[[IO[bytes], str, str | None, bool], Any]
) -> tuple[Any, tuple[slice, ...] | None, str]:
    """`(read(file at the entry's offset), the entry's ranges, the entry's name for errors)`."""
    import kaldiio

    if "\0" in entry:
        raise KaldiDataError(f"{where}, utterance {key!r}: the entry has a NUL byte")
    name, offset, slices = _split_entry(entry)
    label = f"{where}, utterance {key!r} (entry {entry[:80]!r})"
    if is_command(name):
        if not allow_pipes:
            raise KaldiDataError(f"{where}: utterance {key!r} is {PIPE_HINT}: {entry[:80]!r}")
        try:
            with kaldiio.open_like_kaldi(name, "rb") as fd:
                return read(fd, label, None, True), slices, label
        except SymnetError:
            raise
        except Exception as e:
            raise KaldiDataError(f"{label}: the command failed ({_reason(e)})") from None
    try:  # opened once, then checked (a FIFO does not block the open; nothing is read by name after the check)
        opened, st = open_regular(name, KaldiDataError, "file")
    except FileNotFoundError as e:
        raise KaldiDataError(f"{label}: cannot open {name}: {e.strerror}") from None
    except KaldiDataError as e:
        raise KaldiDataError(f"{label}: {e}") from None
    fd = opened.fileno()
    try:
        if offset is not None and offset > st.st_size:
            raise KaldiDataError(f"{label}: offset {offset} is past the end of {name} ({st.st_size} bytes)")
        if read is read_object and (value := _matrix_at(fd, offset or 0, st.st_size)) is not None:
            return value, slices, label
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:  # one object: its data is read straight into its array
            f.seek(offset or 0)
            return read(f, f"{label}: {name}: byte {offset or 0}", None, False), slices, label
    except OSError as e:
        raise KaldiDataError(f"{label}: cannot read {name}: {e.strerror or e}") from None
    finally:
        opened.close()


def _matrix_at(fd: int, offset: int, size: int) -> np.ndarray | None:
    """The binary matrix (float, double or compressed) at `offset` of the open regular file `fd` of `size` bytes,
    read with `pread`s, or None where something else is there (or its header does not fit the file: the general
    reader then says what is wrong)."""
    head = os.pread(fd, 21, offset)
    kind = head[2 : head.find(b" ", 2) + 1] if head[:2] == b"\0B" else b""
    if kind in (b"CM ", b"CM2 ", b"CM3 "):  # a global header (min, range, rows, cols), then the data
        start = 2 + len(kind)
        if len(head) < start + 16:
            return None
        rows, cols = struct.unpack_from("<ii", head, start + 8)
        length = start + 16 + compressed_bytes(kind.decode().strip(), rows, cols)
        if rows < 0 or cols < 0 or offset + length > size:
            return None
        data = os.pread(fd, length, offset)
        return decode_compressed(data) if len(data) == length else None
    if (shape := _matrix_header(head)) is None:
        return None
    rows, cols = shape
    dtype = np.dtype("<f4" if kind == b"FM " else "<f8")
    if offset + 15 + rows * cols * dtype.itemsize > size:
        return None
    value = np.empty((rows, cols), dtype)
    return value if _pread_into(fd, _bytes_of(value), offset + 15) is not None else None


def decode_compressed(data: bytes) -> np.ndarray:
    """A binary compressed matrix (`\\0BCM `, `CM2 ` or `CM3 `, its header and all its data) as kaldiio decodes
    it (its header classes, so the values are kaldiio's), in blocks of `symnet._src.bounded.tiles`: the scratch
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


def _pread_into(fd: int, buffer: Any, offset: int) -> Any:
    """`buffer` filled from `offset` of `fd`, or None if the file ends first (it shrank since its size was read)."""
    data, got = memoryview(buffer), 0
    while got < len(data):
        read = os.preadv(fd, [data[got:]], offset + got)
        if not read:
            return None
        got += read
    return buffer


def open_spec(path: str, mode: str) -> Any:
    """A Kaldi file name as the user typed it: a file, `-` (stdin), or a command (`cmd |`)."""
    import kaldiio

    return kaldiio.open_like_kaldi(path, mode)
