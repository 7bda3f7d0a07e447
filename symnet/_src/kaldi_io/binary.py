"""Kaldi's I/O primitives, text and binary, as its own code reads them (and, in `writer`, writes them).

The rules follow kaldi-asr/kaldi src/base/io-funcs.{h,cc}, io-funcs-inl.h,
src/matrix/kaldi-matrix.cc and kaldi-vector.cc:

- A binary stream starts with ``\\0B``; a text stream with anything else.
- ``WriteToken`` writes the token and one space, in both modes. ``ReadToken``
  skips whitespace (even in binary mode, as ``is >> str`` does), reads up to the
  next whitespace and requires (and eats) one whitespace character after it.
- ``WriteBasicType``: text ``value `` (floats with 7 significant digits, as
  ``os.precision(7)`` prints them; booleans ``T``/``F``); binary: a size byte
  (4 for int32 and float, 8 for double) and the little-endian bytes; booleans
  are the single byte ``T`` or ``F``. Reading a real accepts either size.
- Vectors: text `` [ 1 2 3 ]\\n``; binary token ``FV``/``DV``, int32 dim, data.
  Matrices: text `` [\\n  1 2 \\n  3 4 ]\\n`` (`` [ ]\\n`` when empty); binary
  ``FM``/``DM``, int32 rows and cols, data.
- Packed symmetric matrices (the lower triangle, row by row): text
  ``[\n1 \n2 3 ]\n``; binary ``FP``/``DP``, int32 size, data.
- Integer vectors (``WriteIntegerVector``): text ``[ 1 2 ]\\n``; binary: the
  byte 4, a raw int32 count (no size byte), the raw int32s. Integer-pair
  vectors: text ``[ 1,2 3,4 ]\\n``, binary as integer vectors with two int32s
  an element.

Its numbers (the words, the int32 range, the printing of floats) are in `numbers`. Readers raise
`ModelFormatError` for anything malformed or cut short, naming
what they expected and where: ``file: byte N`` for binary data, ``file:line:col``
for text. The error carries ``file``, ``offset`` (binary), ``line`` and
``column`` (text) and ``expected`` attributes.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import struct
from typing import Any

import numpy as np

from ..base.errors import ModelFormatError
from ..base.safe_read import MAX_ARRAY_BYTES, read_file
from .numbers import (
    _INT_RE,
    _NUMS_RE,
    _WS,
    _WS_STR,
    INT32_MAX,
    INT32_MIN,
    NUMBER_RE,
    _decimal_words,
    _reals,
    parse_real,
)

__all__ = [
    "BinaryReader",
    "TextReader",
    "make_reader",
    "model_error",
    "parse_kaldi_array",
    "read_kaldi_array",
    "unpack_symmetric",
]


def model_error(
    message: str,
    *,
    file: str,
    offset: int | None = None,
    line: int | None = None,
    column: int | None = None,
    expected: str | None = None,
) -> ModelFormatError:
    """A ModelFormatError whose text starts with the place: ``file: byte N:`` or ``file:line:col:``."""
    if line is not None:
        where = f"{file}:{line}:{column}"
    elif offset is not None:
        where = f"{file}: byte {offset}"
    else:
        where = file
    error = ModelFormatError(f"{where}: {message}")
    error.file, error.offset, error.line, error.column, error.expected = file, offset, line, column, expected
    return error


def _word_kind(word: str) -> str:
    return "end of file" if word == "" else repr(word)


# ----- readers -------------------------------------------------------------------------------


class _Reader:
    """What both readers share; subclasses implement the primitives on bytes or on text."""

    binary: bool
    file: str
    pos: int

    def error(self, message: str, *, at: int | None = None, expected: str | None = None) -> ModelFormatError:
        raise NotImplementedError

    def expect_token(self, token: str, context: str = "") -> None:
        start = self.skip_ws()
        got = self.read_token(token, context)
        if got != token:
            raise self.error(f"expected {token}{context}, got {_word_kind(got)}", at=start, expected=token)

    def read_token(self, expected: str, context: str = "") -> str:
        raise NotImplementedError

    def skip_ws(self) -> int:
        raise NotImplementedError

    def at_end(self) -> bool:
        """Only whitespace is left."""
        raise NotImplementedError


class BinaryReader(_Reader):
    """Reads Kaldi binary data (after the ``\\0B`` header) from `data`, starting at `pos`."""

    binary = True

    def __init__(self, data: bytes, pos: int = 0, file: str = "<bytes>"):
        self.data, self.pos, self.file = data, pos, file

    # errors

    def error(self, message: str, *, at: int | None = None, expected: str | None = None) -> ModelFormatError:
        return model_error(message, file=self.file, offset=self.pos if at is None else at, expected=expected)

    def _need(self, n: int, what: str) -> None:
        left = len(self.data) - self.pos
        if n > left:
            raise self.error(f"unexpected end of file: {what} needs {n} bytes, {left} left", expected=what)

    # tokens

    def skip_ws(self) -> int:
        data, pos, n = self.data, self.pos, len(self.data)
        while pos < n and data[pos] in _WS:
            pos += 1
        self.pos = pos
        return pos

    def peek(self, k: int = 0) -> int:
        """The byte `k` ahead, or -1 at the end."""
        return self.data[self.pos + k] if self.pos + k < len(self.data) else -1

    def peek_token(self) -> str:
        """The next token without consuming it ('' at the end, or if it is not text)."""
        save = self.pos
        try:
            return self._raw_token()
        except ModelFormatError:
            return ""
        finally:
            self.pos = save

    def _raw_token(self) -> str:
        start = self.skip_ws()
        data, pos, n = self.data, self.pos, len(self.data)
        while pos < n and data[pos] not in _WS:
            pos += 1
        raw = data[start:pos]
        self.pos = pos
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"token {raw[:40]!r} is not valid UTF-8", at=start) from None

    def read_token(self, expected: str, context: str = "") -> str:
        start = self.skip_ws()
        if self.pos >= len(self.data):
            raise self.error(f"unexpected end of file, expected {expected}{context}", expected=expected)
        token = self._raw_token()
        if self.pos >= len(self.data):
            raise self.error(
                f"unexpected end of file after token {token!r}: expected a space after it "
                f"(reading {expected}{context})",
                expected=expected,
            )
        self.pos += 1  # the whitespace after the token
        if not token:
            raise self.error(f"expected {expected}{context}", at=start, expected=expected)
        return token

    def at_end(self) -> bool:
        return self.skip_ws() >= len(self.data)

    def read_line(self, what: str) -> str:
        """The bytes up to the next newline (eaten), as text; error at the end of the data."""
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.error(f"unexpected end of file, expected {what}", expected=what)
        raw = self.data[self.pos : end]
        start, self.pos = self.pos, end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"{what}: not valid UTF-8", at=start + e.start) from None

    # basic types

    def read_int(self, what: str) -> int:
        size = self.peek()
        if size != 4:
            raise self.error(
                f"expected an int32 for {what} (size byte 4), got {self.describe(size)}", expected=f"int32 {what}"
            )
        self._need(5, f"the int32 {what}")
        value = struct.unpack_from("<i", self.data, self.pos + 1)[0]
        self.pos += 5
        return value

    def read_real(self, what: str) -> np.float32 | np.float64:
        """A float (size byte 4) or double (size byte 8), kept at the precision the file has."""
        size = self.peek()
        if size == 4:
            self._need(5, f"the float {what}")
            value: Any = np.frombuffer(self.data, "<f4", 1, self.pos + 1)[0].astype(np.float32)
            self.pos += 5
        elif size == 8:
            self._need(9, f"the double {what}")
            value = np.frombuffer(self.data, "<f8", 1, self.pos + 1)[0].astype(np.float64)
            self.pos += 9
        else:
            raise self.error(
                f"expected a float for {what} (size byte 4 or 8), got {self.describe(size)}", expected=f"float {what}"
            )
        return value

    def read_bool(self, what: str) -> bool:
        c = self.peek()
        if c not in (ord("T"), ord("F")):
            raise self.error(f"expected T or F for {what}, got {self.describe(c)}", expected=f"bool {what}")
        self.pos += 1
        return c == ord("T")

    def describe(self, byte: int) -> str:
        """A byte of the data, described for an error message."""
        if byte < 0:
            return "end of file"
        return f"byte {byte:#04x}" + (f" ({chr(byte)!r})" if 32 < byte < 127 else "")

    # arrays

    def _dims(self, count: int, what: str) -> list[int]:
        dims = [self.read_int(f"the size of {what}") for _ in range(count)]
        for d in dims:
            if d < 0:
                raise self.error(f"negative size {d} for {what}", at=self.pos - 4, expected=f"size of {what}")
        return dims

    def _floats(self, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
        itemsize = 4 if dtype == "<f4" else 8
        count = int(np.prod(shape, dtype=np.int64))
        self._need(count * itemsize, f"the data of {what} ({'x'.join(map(str, shape))})")
        array = np.frombuffer(self.data, dtype, count, self.pos).astype(dtype[1:], copy=True).reshape(shape)
        array.setflags(write=False)
        self.pos += count * itemsize
        return array

    def read_vector(self, what: str) -> np.ndarray:
        start = self.skip_ws()
        token = self.peek_array_token()
        if token not in ("FV", "DV"):
            raise self.error(
                f"expected a vector (FV or DV) for {what}, got {self._array_got(token)}",
                at=start,
                expected=f"vector {what}",
            )
        self.read_token("FV or DV")
        (dim,) = self._dims(1, what)
        return self._floats("<f4" if token == "FV" else "<f8", (dim,), what)

    def read_matrix(self, what: str) -> np.ndarray:
        start = self.skip_ws()
        token = self.peek_array_token()
        if token in ("CM", "CM2", "CM3"):
            raise self.error(
                f"{what} is a compressed matrix ({token}), which symnet does not read",
                at=start,
                expected=f"matrix {what}",
            )
        if token not in ("FM", "DM"):
            raise self.error(
                f"expected a matrix (FM or DM) for {what}, got {self._array_got(token)}",
                at=start,
                expected=f"matrix {what}",
            )
        self.read_token("FM or DM")
        rows, cols = self._dims(2, what)
        return self._floats("<f4" if token == "FM" else "<f8", (rows, cols), what)

    def read_packed(self, what: str) -> np.ndarray:
        """A packed symmetric matrix (``FP``/``DP``: its lower triangle, row by row), as the full matrix."""
        start = self.skip_ws()
        token = self.peek_token()
        if token not in ("FP", "DP"):
            raise self.error(
                f"expected a packed matrix (FP or DP) for {what}, got {_word_kind(token)}",
                at=start,
                expected=f"packed matrix {what}",
            )
        self.read_token("FP or DP")
        (size,) = self._dims(1, what)
        return unpack_symmetric(self._floats("<f4" if token == "FP" else "<f8", (size * (size + 1) // 2,), what), size)

    def peek_array_token(self) -> str:
        """The array token (FV, DV, FM, DM, CM, CM2, CM3) at the current position, or "" if none."""
        head = self.data[self.pos : self.pos + 4]
        for token in ("FV", "DV", "FM", "DM", "CM2", "CM3", "CM"):
            t = token.encode()
            if head[: len(t)] == t and (len(head) == len(t) or head[len(t)] in _WS):
                return token
        return ""

    def _array_got(self, token: str) -> str:
        return token if token else self.describe(self.peek())

    def read_int_vector(self, what: str, pairs: bool = False) -> np.ndarray:
        size = self.peek()
        if size != 4:
            raise self.error(
                f"expected an integer vector for {what} (size byte 4), got {self.describe(size)}",
                expected=f"integer vector {what}",
            )
        self._need(5, f"the length of {what}")
        count = struct.unpack_from("<i", self.data, self.pos + 1)[0]
        if count < 0:
            raise self.error(f"negative length {count} for {what}", expected=f"integer vector {what}")
        self.pos += 5
        width = 2 if pairs else 1
        self._need(4 * width * count, f"the {count} elements of {what}")
        array = np.frombuffer(self.data, "<i4", width * count, self.pos).astype(np.int32)
        self.pos += 4 * width * count
        array = array.reshape((count, 2)) if pairs else array
        array.setflags(write=False)
        return array


class TextReader(_Reader):
    """Reads Kaldi text data from `text` (a decoded str), starting at `pos`; errors give line and column."""

    binary = False

    def __init__(self, text: str, pos: int = 0, file: str = "<text>"):
        self.text, self.pos, self.file = text, pos, file

    def error(self, message: str, *, at: int | None = None, expected: str | None = None) -> ModelFormatError:
        pos = self.pos if at is None else at
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return model_error(message, file=self.file, line=line, column=column, expected=expected)

    def skip_ws(self) -> int:
        text, pos, n = self.text, self.pos, len(self.text)
        while pos < n and text[pos] in _WS_STR:
            pos += 1
        self.pos = pos
        return pos

    def peek(self, k: int = 0) -> str:
        return self.text[self.pos + k] if self.pos + k < len(self.text) else ""

    def word(self) -> tuple[str, int]:
        """The next whitespace-delimited word and its position (after skipping whitespace)."""
        start = self.skip_ws()
        text, pos, n = self.text, self.pos, len(self.text)
        while pos < n and text[pos] not in _WS_STR:
            pos += 1
        self.pos = pos
        return text[start:pos], start

    def peek_token(self) -> str:
        save = self.pos
        word, _ = self.word()
        self.pos = save
        return word

    def read_token(self, expected: str, context: str = "") -> str:
        word, start = self.word()
        if not word:
            raise self.error(f"unexpected end of file, expected {expected}{context}", expected=expected)
        if self.pos >= len(self.text):
            raise self.error(
                f"unexpected end of file after token {word!r}: expected a space after it (reading {expected}{context})",
                expected=expected,
            )
        self.pos += 1
        return word

    def at_end(self) -> bool:
        return self.skip_ws() >= len(self.text)

    def read_line(self, what: str) -> str:
        end = self.text.find("\n", self.pos)
        if end < 0:
            raise self.error(f"unexpected end of file, expected {what}", expected=what)
        line, self.pos = self.text[self.pos : end], end + 1
        return line

    def read_word(self, what: str) -> tuple[str, int]:
        word, start = self.word()
        if not word:
            raise self.error(f"unexpected end of file, expected {what}", expected=what)
        return word, start

    # basic types

    def read_int(self, what: str) -> int:
        word, start = self.read_word(f"an integer for {what}")
        if not _INT_RE.match(word) or not INT32_MIN <= int(word) <= INT32_MAX:
            raise self.error(f"expected an int32 for {what}, got {word!r}", at=start, expected=f"int32 {what}")
        return int(word)

    def read_real(self, what: str, double: bool = False) -> np.float32 | np.float64:
        word, start = self.read_word(f"a number for {what}")
        if not NUMBER_RE.match(word):
            raise self.error(f"expected a number for {what}, got {word!r}", at=start, expected=f"number {what}")
        return parse_real(word, double)

    def read_bool(self, what: str) -> bool:
        word, start = self.read_word(f"T or F for {what}")
        if word not in ("T", "F"):
            raise self.error(f"expected T or F for {what}, got {word!r}", at=start, expected=f"bool {what}")
        return word == "T"

    # arrays

    def bracket(self, what: str) -> tuple[str, int, int]:
        """The text between ``[`` and the matching ``]`` (both eaten), with the position of its start; the
        character after ``]`` is eaten if it is a newline, as Kaldi does."""
        start = self.skip_ws()
        if self.peek() != "[":
            word = self.peek_token()
            raise self.error(f"expected [ to start {what}, got {_word_kind(word)}", at=start, expected=f"[ {what}")
        end = self.text.find("]", start + 1)
        if end < 0:
            raise self.error(f"unexpected end of file inside {what}: no closing ]", at=start, expected="]")
        self.pos = end + 1
        if self.peek() == "\n":
            self.pos += 1
        return self.text[start + 1 : end], start + 1, start

    def _numbers(self, content: str, offset: int, what: str) -> None:
        if not _NUMS_RE.match(content):
            for m in re.finditer(r"[^ \t\n\v\f\r]+", content):
                if not NUMBER_RE.match(m.group()):
                    raise self.error(
                        f"expected a number in {what}, got {m.group()!r}",
                        at=offset + m.start(),
                        expected=f"number in {what}",
                    )

    def _rows(self, content: str, offset: int, what: str, lines: str) -> list[list[Any]]:
        """The non-empty rows of words of `content`, rows split at the characters of `lines` (none: one row).
        Plain decimal text is split as bytes and its words checked by `_reals` as it parses them; other
        text is checked word by word first (the error names the first word that is no number)."""
        data = _decimal_words(content)
        rows: list[list[Any]]
        if data is not None:
            rows = [line.split() for line in data.split(b"\n")] if lines else [data.split()]
        else:
            self._numbers(content, offset, what)
            rows = [line.split() for line in re.split(lines, content)] if lines else [content.split()]
        return [row for row in rows if row]

    def _reals(self, rows: list[list[Any]], content: str, offset: int, what: str, double: bool) -> np.ndarray:
        count = sum(len(row) for row in rows)
        try:
            return _reals(itertools.chain.from_iterable(rows), double, count)
        except ValueError:  # a plain-decimal word that is no number: the error that names it
            self._numbers(content, offset, what)
            raise

    def read_vector(self, what: str, double: bool = False) -> np.ndarray:
        content, offset, start = self.bracket(what)
        if "\n" in content or "\r" in content:  # Kaldi's Vector::Read refuses newlines too
            raise self.error(f"newline inside the vector {what} (is it a matrix?)", at=start, expected=f"vector {what}")
        rows = self._rows(content, offset, what, "")
        array = self._reals(rows, content, offset, what, double)
        array.setflags(write=False)
        return array

    def read_matrix(self, what: str, double: bool = False) -> np.ndarray:
        content, offset, start = self.bracket(what)
        rows = self._rows(content, offset, what, r"[\n;]")
        if not rows:
            array = np.zeros((0, 0), np.float64 if double else np.float32)
        else:
            values = self._reals(rows, content, offset, what, double)  # a bad number before a bad row length
            width = len(rows[0])
            for i, row in enumerate(rows):
                if len(row) != width:
                    raise self.error(
                        f"matrix {what}: row {i + 1} has {len(row)} numbers, row 1 has {width}",
                        at=start,
                        expected=f"matrix {what}",
                    )
            array = values.reshape(len(rows), width)
        array.setflags(write=False)
        return array

    def read_packed(self, what: str, double: bool = False) -> np.ndarray:
        """A packed symmetric matrix (its lower triangle, row by row, in ``[ ]``), as the full matrix."""
        content, offset, start = self.bracket(what)
        rows = self._rows(content, offset, what, "")
        values = self._reals(rows, content, offset, what, double) if rows else np.zeros(0, np.float32)
        size = int((math.isqrt(8 * len(values) + 1) - 1) // 2)
        if size * (size + 1) // 2 != len(values):
            raise self.error(
                f"packed matrix {what}: {len(values)} numbers is no lower triangle", at=start, expected=f"packed {what}"
            )
        return unpack_symmetric(values, size)

    def read_int_vector(self, what: str, pairs: bool = False) -> np.ndarray:
        content, offset, start = self.bracket(what)
        values: list[int] = []
        for m in re.finditer(r"[^ \t\n\v\f\r]+", content):
            word = m.group()
            parts = word.split(",") if pairs else [word]
            if (pairs and len(parts) != 2) or not all(
                _INT_RE.match(p) and INT32_MIN <= int(p) <= INT32_MAX for p in parts
            ):
                kind = "an integer pair a,b" if pairs else "an integer"
                raise self.error(
                    f"expected {kind} in {what}, got {word!r}", at=offset + m.start(), expected=f"integers in {what}"
                )
            values.extend(int(p) for p in parts)
        array = np.array(values, dtype=np.int32)
        if pairs:
            array = array.reshape((-1, 2))
        array.setflags(write=False)
        return array


def make_reader(data: bytes, file: str = "<bytes>") -> BinaryReader | TextReader:
    """A reader positioned after Kaldi's header: binary if `data` starts with ``\\0B``, else text (UTF-8)."""
    if data[:1] == b"\0":
        if data[1:2] != b"B":
            raise model_error(
                "starts with a zero byte but not with Kaldi's binary header \\0B", file=file, offset=0, expected="\\0B"
            )
        return BinaryReader(data, 2, file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        prefix = data[: e.start].decode("utf-8")
        line = prefix.count("\n") + 1
        column = len(prefix) - (prefix.rfind("\n") + 1) + 1
        raise model_error(
            f"not valid UTF-8 text (byte {e.start}), and no binary header \\0B",
            file=file,
            line=line,
            column=column,
            expected="text or \\0B",
        ) from None
    return TextReader(text, 0, file)


def unpack_symmetric(lower: np.ndarray, size: int) -> np.ndarray:
    """The full symmetric matrix of a packed lower triangle (row by row), read-only."""
    full = np.zeros((size, size), dtype=lower.dtype)
    rows, cols = np.tril_indices(size)
    full[rows, cols] = lower
    full[cols, rows] = lower
    full.setflags(write=False)
    return full


# ----- single matrices and vectors -------------------------------------------------------------


def read_kaldi_array(path: str | os.PathLike[str]) -> np.ndarray:
    """A Kaldi matrix or vector file (``copy-matrix``/``copy-vector`` output, text or binary) as a
    read-only array: float32 or float64 as stored; a text ``[ ... ]`` on one line is a vector. Only a
    regular file is read (opened once: a device or FIFO is a ModelFormatError)."""
    path = os.fspath(path)
    return parse_kaldi_array(read_file(path, MAX_ARRAY_BYTES, error=ModelFormatError, what="matrix file"), path)


def parse_kaldi_array(data: bytes, path: str = "<bytes>") -> np.ndarray:
    """`read_kaldi_array` of a file's bytes (`path`: for errors)."""
    r = make_reader(data, path)
    if isinstance(r, BinaryReader):
        token = r.peek_array_token()
        array = r.read_vector("the vector") if token in ("FV", "DV") else r.read_matrix("the matrix")
    else:
        r.skip_ws()
        end = r.text.find("]", r.pos)
        content = r.text[r.pos + 1 : end] if end >= 0 else ""
        multiline = r.peek() == "[" and ("\n" in content.strip(" \t\n\r") or content.lstrip(" \t")[:1] == "\n")
        array = r.read_matrix("the matrix") if multiline else r.read_vector("the vector")
    if not r.at_end():
        raise r.error("unexpected data after the matrix or vector", expected="end of file")
    return array
