"""Mutated and crafted inputs for symnet's file readers, deterministic from a seed.

Generic mutators work on any bytes (so they can be pointed at any file: Kaldi
models, configs, archives, `.npz` files), text mutators on Kaldi's token
streams (numbers, `<Tokens>`, `name=value` options, descriptors), and
`crafted_*` functions build the hostile files an attacker would write on
purpose (zip bombs, lying headers, huge dims, pickles, commands).

    rng = random.Random(seed)
    for data in mutations(seed_bytes, rng, 100): ...
"""

from __future__ import annotations

import io
import json
import random
import re
import struct
import zipfile
from collections.abc import Callable, Iterator

import numpy as np

#: Integers that break size arithmetic: sign boundaries, 2^22 (the Index packing), int32 and int64 limits.
INTERESTING_INTS = [
    0,
    -1,
    1,
    2,
    255,
    256,
    65535,
    65536,
    2**22,
    2**22 + 1,
    2**31 - 1,
    -(2**31),
    2**31,
    2**32,
    2**40,
    2**62,
    2**63 - 1,
    -(2**63),
    10**9,
    999999999,
    2147483647,
    -2147483648,
]
INTERESTING_FLOATS = ["nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "0.0", "-0.0", "3.4e38", "1e39"]
INTERESTING_WORDS = [
    "",
    "[",
    "]",
    "<",
    ">",
    "(",
    ")",
    ",",
    "=",
    ":",
    "|",
    "touch /tmp/pwned |",
    "/dev/zero",
    "/dev/stdin",
    "../../etc/passwd",
    "\x00",
    "\xff",
    "é",
    "Sum(",
    "Offset(",
    "Append(",
    "IfDefined(",
    "<Nnet3>",
    "</Nnet3>",
    "<ComponentName>",
    "input-node",
    "component-node",
    "output-node",
    "dim-range-node",
    "name=",
    "dim=",
    "input=",
    "component=",
]

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_TOKEN = re.compile(rb"<[A-Za-z/][A-Za-z0-9]*>")


def _pick_int(rng: random.Random) -> int:
    return rng.choice(INTERESTING_INTS)


# ----- byte mutators -------------------------------------------------------------------------------


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def set_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0x04, 0x20, 0x0A, 0x5B, 0x5D])
    return bytes(out)


def overwrite_int32(data: bytes, rng: random.Random) -> bytes:
    """An interesting int32 written over 4 bytes, after a Kaldi size byte (0x04) when there is one."""
    if len(data) < 5:
        return data
    fours = [m.start() for m in re.finditer(rb"\x04", data) if m.start() + 5 <= len(data)]
    i = (rng.choice(fours) + 1) if fours and rng.random() < 0.8 else rng.randrange(len(data) - 3)
    value = _pick_int(rng) & 0xFFFFFFFF
    return data[:i] + struct.pack("<I", value) + data[i + 4 :]


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)] if data else data


def delete_chunk(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + data[i + rng.randint(1, 64) :]


def duplicate_chunk(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    chunk = data[i : i + rng.randint(1, 256)]
    j = rng.randrange(len(data) + 1)
    return data[:j] + chunk * rng.randint(1, 4) + data[j:]


def insert_junk(data: bytes, rng: random.Random) -> bytes:
    j = rng.randrange(len(data) + 1)
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    return data[:j] + junk + data[j:]


BYTE_MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [
    flip_bits,
    set_bytes,
    overwrite_int32,
    truncate,
    delete_chunk,
    duplicate_chunk,
    insert_junk,
]


# ----- text mutators (Kaldi text models, configs, text archives) -----------------------------------


def replace_number(data: bytes, rng: random.Random) -> bytes:
    numbers = list(_NUMBER.finditer(data))
    if not numbers:
        return data
    m = rng.choice(numbers)
    new = str(_pick_int(rng)) if rng.random() < 0.7 else rng.choice(INTERESTING_FLOATS)
    return data[: m.start()] + new.encode() + data[m.end() :]


def replace_token(data: bytes, rng: random.Random) -> bytes:
    tokens = list(_TOKEN.finditer(data))
    if not tokens:
        return replace_word(data, rng)
    m = rng.choice(tokens)
    other = rng.choice(tokens).group() if rng.random() < 0.7 else rng.choice(INTERESTING_WORDS).encode()
    return data[: m.start()] + other + data[m.end() :]


def replace_word(data: bytes, rng: random.Random) -> bytes:
    words = list(re.finditer(rb"[^\s=,()]+", data))
    if not words:
        return data
    m = rng.choice(words)
    new = rng.choice(INTERESTING_WORDS).encode("utf-8", "surrogateescape")
    return data[: m.start()] + new + data[m.end() :]


def replace_option(data: bytes, rng: random.Random) -> bytes:
    """`name=value` with a hostile value (a config's options: dims, offsets, file names)."""
    options = list(re.finditer(rb"([a-z-]+)=([^\s]+)", data))
    if not options:
        return replace_number(data, rng)
    m = rng.choice(options)
    value = rng.choice(
        [
            str(_pick_int(rng)),
            rng.choice(INTERESTING_FLOATS),
            rng.choice(INTERESTING_WORDS),
            ",".join(str(_pick_int(rng)) for _ in range(rng.randint(1, 3))),
        ]
    )
    return data[: m.start(2)] + value.encode("utf-8", "surrogateescape") + data[m.end(2) :]


def shuffle_lines(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    op = rng.randrange(3)
    if op == 0 and len(lines) > 1:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == 1 and lines:
        del lines[rng.randrange(len(lines))]
    elif lines:
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return b"\n".join(lines)


def nest_deeply(data: bytes, rng: random.Random) -> bytes:
    """A descriptor or bracket nested thousands deep where a word was."""
    depth = rng.choice([100, 1000, 10000])
    kind = rng.choice([b"Sum(", b"Append(", b"IfDefined(", b"Offset(", b"[", b"("])
    close = {b"[": b"]", b"Offset(": b", 1)"}.get(kind, b")")
    words = list(re.finditer(rb"input=([^\s]+)", data)) or list(re.finditer(rb"[^\s]+", data))
    if not words:
        return kind * depth
    m = rng.choice(words)
    inner = m.group(1) if m.groups() else m.group()
    nested = kind * depth + inner + close * depth
    start = m.start(1) if m.groups() else m.start()
    end = m.end(1) if m.groups() else m.end()
    return data[:start] + nested + data[end:]


TEXT_MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [
    replace_number,
    replace_number,
    replace_token,
    replace_word,
    replace_option,
    replace_option,
    shuffle_lines,
    nest_deeply,
    truncate,
    delete_chunk,
    duplicate_chunk,
]


def mutations(seed: bytes, rng: random.Random, count: int, *, text: bool = False, rounds: int = 3) -> Iterator[bytes]:
    """`count` mutants of `seed`, each 1..`rounds` mutations deep (text mutators mixed in with `text=True`)."""
    mutators = TEXT_MUTATORS + BYTE_MUTATORS[:2] if text else BYTE_MUTATORS
    for _ in range(count):
        data = seed
        for _ in range(rng.randint(1, rounds)):
            data = rng.choice(mutators)(data, rng)
        yield data


# ----- crafted files --------------------------------------------------------------------------------


def npy_bytes(
    array: np.ndarray | None = None,
    *,
    header: dict | None = None,
    data: bytes | None = None,
    version: tuple[int, int] = (1, 0),
) -> bytes:
    """A `.npy` member: of `array`, or with a `header` dict and `data` that may lie about each other."""
    buffer = io.BytesIO()
    if array is not None and header is None:
        np.lib.format.write_array(buffer, array, version=version, allow_pickle=array.dtype.hasobject)
        return buffer.getvalue()
    header = dict(header or {})
    text = repr(header).encode("latin-1")
    magic = np.lib.format.magic(*version)
    fmt = "<H" if version == (1, 0) else "<I"
    pad = 64 - (len(magic) + struct.calcsize(fmt) + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return magic + struct.pack(fmt, len(text)) + text + (data or b"")


def npz_bytes(members: dict[str, bytes], *, compress: bool = False) -> bytes:
    """An `.npz` archive of raw members (`name` gets `.npy` added)."""
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as z:
        for name, member in members.items():
            z.writestr(name + ".npy", member)
    return buffer.getvalue()


def zip_bomb_member(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    """A `.npy` member of zeros of `shape`: tiny once deflated, huge once read (build it with npz_bytes(...,
    compress=True)); only sizes up to a few hundred MB are built in memory here."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return npy_bytes(header={"descr": dtype, "fortran_order": False, "shape": shape}, data=bytes(nbytes))


def deflated_zeros_npz(name: str, shape: tuple[int, ...], total_bytes: int) -> bytes:
    """An npz whose member `name` says `shape` float32 and inflates to `total_bytes` zeros, streamed so the
    bomb is never held in memory."""
    buffer = io.BytesIO()
    header = npy_bytes(header={"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open(name + ".npy", "w", force_zip64=True) as f:
            f.write(header)
            block = bytes(1 << 20)
            left = total_bytes
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)
    return buffer.getvalue()


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def json_member(value: object) -> bytes:
    return npy_bytes(np.frombuffer(json.dumps(value).encode(), dtype=np.uint8))


def kaldi_matrix_entry(key: str, rows: int, cols: int, data: bytes = b"", kind: bytes = b"FM ") -> bytes:
    """A binary Kaldi archive entry whose header says `rows` x `cols` (the data may be shorter)."""
    head = key.encode() + b" \0B" + kind
    if kind.startswith(b"CM"):
        return head + struct.pack("<ffii", 0.0, 1.0, rows, cols) + data
    return head + b"\x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols) + data


def kaldi_int_vector_entry(key: str, length: int, data: bytes = b"") -> bytes:
    return key.encode() + b" \0B\x04" + struct.pack("<i", length) + data
