"""Kaldi scp files and the entries they name: `file:offset` with `[rows,cols]` ranges (a regular file, opened once),
or a command (`cmd |`, only when allowed).

Apart from `ark`, which reads the objects: this module decides which file is opened, where, and whether a command
runs; the object there is read by `ark` (or `posterior`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np

from ..base.bounded import compressed_bytes
from ..base.errors import KaldiDataError, SymnetError
from ..base.safe_read import open_regular
from ..base.text import ascii_int, is_digits
from .ark import _bytes_of, _matrix_header, _read_object, _reason, decode_compressed, read_object
from .ark_stream import MAX_LINE_BYTES, _int32, _Reader
from .posterior import read_posterior

__all__ = ["PIPE_HINT", "entry_rows", "is_command", "iter_scp", "open_spec", "parse_scp_line", "read_entry"]


PIPE_HINT = "an entry that runs a command; pass allow_pipes=True (symnet's --allow-pipes) to run it"


def is_command(value: str) -> bool:
    """Whether kaldiio would run `value` (an scp entry or file name) as a shell command."""
    return "|" in value


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
