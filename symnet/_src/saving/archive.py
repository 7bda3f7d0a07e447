"""The container of symnet's network files: a zip of `.npy` members (a NumPy `.npz`), a JSON header first.

Members: `header.npy`, the header as UTF-8 JSON in a `uint8` vector, and
`arrays/K.npy` for K = 0, 1, ... as the header's `arrays` table lists them
(`{"shape": [...], "dtype": "<f4"}` each; the number types JAX adds to NumPy's, such as bfloat16 and the
float8 types, by name, `"dtype": "bfloat16"`, their members holding the raw bits as unsigned integers of
the same size). Members are stored uncompressed,
with fixed timestamps, so equal networks give equal bytes and the file's size
bounds everything a reader allocates.

Reading (`read_archive`) trusts nothing: the file must be a regular file; the
header member is size-checked before it is read and its JSON depth-checked
before it is parsed; the members must be exactly the ones the header lists;
every array's `.npy` header must state the shape and dtype of the table, a
plain number type, and exactly the bytes the member holds, all before its data
is read, and never with pickle. Any problem is a ModelFormatError naming the
file and the member. `np.load(path, allow_pickle=False)` reads these files too.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base.atomic import atomic_open
from ..base.errors import ModelFormatError
from ..base.safe_read import NpzArchive, as_read, as_stored, extended_dtype, is_extended, stored_dtype
from ..base.version import __version__

__all__ = [
    "FORMAT",
    "HEADER_MEMBER",
    "MAX_HEADER_BYTES",
    "MAX_JSON_DEPTH",
    "VERSION",
    "array_member",
    "dtype_name",
    "read_archive",
    "write_archive",
]

#: The `format` field of a symnet file's header.
FORMAT = "symnet-network"
#: The version of the format this symnet writes, and the newest it reads (version 1 holds one Network).
VERSION = 2
HEADER_MEMBER = "header.npy"
#: The largest header symnet reads (a network of about half a million layers), and the deepest JSON nesting.
MAX_HEADER_BYTES = 1 << 26
MAX_JSON_DEPTH = 64
_DATE = (1980, 1, 1, 0, 0, 0)


def dtype_name(dtype: np.dtype) -> str:
    """How the arrays table names a dtype: NumPy's `str` (`<f4`), or an extended type's name (`bfloat16`)."""
    dtype = np.dtype(dtype)
    return dtype.name if is_extended(dtype) else dtype.str


def array_member(k: int) -> str:
    """The member name of array number `k`."""
    return f"arrays/{k}.npy"


def _member_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def write_archive(path: str | os.PathLike[str], header: dict[str, Any], arrays: Sequence[np.ndarray]) -> None:
    """Write the header (its `arrays` table must describe `arrays`) and the arrays, atomically."""
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    with atomic_open(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        with z.open(_member_info(HEADER_MEMBER), "w", force_zip64=False) as m:
            np.lib.format.write_array(m, np.frombuffer(text, dtype=np.uint8), allow_pickle=False)
        for k, array in enumerate(arrays):
            with z.open(_member_info(array_member(k)), "w", force_zip64=array.nbytes > (1 << 30)) as m:
                np.lib.format.write_array(m, as_stored(np.asarray(array, order="C")), allow_pickle=False)


def read_archive(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header and the arrays of a file written by `write_archive`, every size checked first.

    Members are read through `symnet._src.base.safe_read.NpzArchive` (each `.npy` header
    checked before its data). The parsed header's format, version and arrays
    table are checked (`_array_table`) before any array is read.
    FileNotFoundError if there is no file; ModelFormatError for anything else wrong.
    """
    path = os.fspath(path)
    os.stat(path)  # FileNotFoundError, as open() raises it

    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(f"{path}: {message}")

    with NpzArchive(path, error=ModelFormatError, what="symnet network file") as archive:
        archive.require_stored()
        header_name = HEADER_MEMBER[: -len(".npy")]
        if header_name not in archive:
            raise fail(f"not a symnet network file (no {HEADER_MEMBER} member; members {sorted(archive.names)[:5]})")
        header = _parse_json(archive.read_text(header_name, MAX_HEADER_BYTES), fail)
        table = _array_table(header, fail)
        wanted = {HEADER_MEMBER, *(array_member(k) for k in range(len(table)))}
        present = {archive.filename(name) for name in archive.names}
        if present != wanted:
            missing, extra = sorted(wanted - present), sorted(present - wanted)
            raise fail(f"the members do not match the header (missing {missing}, not listed {extra})")
        arrays = [
            as_read(archive.read(array_member(k)[: -len(".npy")], shape=shape, dtype=stored_dtype(dtype)), dtype)
            for k, (shape, dtype) in enumerate(table)
        ]
    return header, arrays


def _array_table(
    header: dict[str, Any], fail: Callable[[str], ModelFormatError]
) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The header's format and version checked, and its table of arrays as `(shape, dtype)`."""
    if header.get("format") != FORMAT:
        raise fail(f"not a symnet network file (format {header.get('format')!r}, expected {FORMAT!r})")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise fail(f"the header's format version is {version!r}, not a version number")
    if version > VERSION:
        raise fail(
            f"format version {version} (written by symnet {header.get('symnet_version', '?')}); this symnet "
            f"({__version__}) reads versions 1 to {VERSION}: upgrade symnet to read it"
        )
    table = header.get("arrays")
    if not isinstance(table, list):
        raise fail("the header's 'arrays' is not a list")
    out = []
    for k, item in enumerate(table):
        shape, dtype = (item.get("shape"), item.get("dtype")) if isinstance(item, dict) else (None, None)
        if not (
            isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            and isinstance(dtype, str)
        ):
            raise fail(f"the header's array #{k} is not {{'shape': [sizes], 'dtype': name}}: {item!r}")
        extended = extended_dtype(dtype)
        try:
            parsed = extended if extended is not None else np.dtype(dtype)
        except (TypeError, ValueError):
            raise fail(f"the header's array #{k} has dtype {dtype!r}, which is not a NumPy dtype") from None
        if extended is None and (parsed.kind not in "biufc" or parsed.fields is not None):
            raise fail(f"the header's array #{k} has dtype {dtype!r}: symnet files hold numbers only")
        out.append((tuple(shape), parsed))
    return out


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _parse_json(text: str, fail: Callable[[str], ModelFormatError]) -> dict[str, Any]:
    """The header object; deeper nesting than MAX_JSON_DEPTH is refused before parsing."""
    skeleton = np.frombuffer(_STRING.sub("", text).encode("utf-8"), dtype=np.uint8)
    steps = np.isin(skeleton, (ord("["), ord("{"))).astype(np.int64) - np.isin(skeleton, (ord("]"), ord("}")))
    if len(steps) and int(np.cumsum(steps).max()) > MAX_JSON_DEPTH:
        raise fail(f"the header nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        header = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise fail(f"the header is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict):
        raise fail("not a symnet network file (the header is not a JSON object)")
    return header


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
