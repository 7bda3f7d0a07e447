"""Bad network files are ModelFormatErrors naming the file and what is wrong; writes are atomic.

The damaged files are made here with `zipfile` and NumPy's `.npy` writer (not with symnet's writer), from
a file `symnet.save` wrote: truncations and flipped bytes anywhere, a newer format version, members that
do not match the header, pickled or non-numeric arrays, a header that is not JSON or too deep, classes
this process does not define, entries that refer forward, fields a class refuses.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import symnet
from symnet import Input, LogSoftmax, Network, Node, Normal, Offset, Ref, Tanh, Weight
from symnet._src.core.descriptor import IfDefined
from symnet.errors import ModelFormatError, OutputError


def small_network() -> Network:
    x = Input("input", 3)
    h = Node("h", Tanh(x @ Weight(Normal((3, 2), 0.5)) + IfDefined(Offset(Ref("h"), -1)) @ Weight(Normal((2, 2)))))
    return Network(LogSoftmax(h @ Weight(Normal((2, 4), 0.5))))


@pytest.fixture
def saved(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "good.npz"
    symnet.save(path, small_network())
    return path


def members(path: pathlib.Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The header (parsed) and the raw bytes of every other member."""
    with zipfile.ZipFile(path) as z:
        raw = {name: z.read(name) for name in z.namelist()}
    header = json.loads(bytes(np.load(io.BytesIO(raw.pop("header.npy")), allow_pickle=False)).decode())
    return header, raw


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def rewrite(
    path: pathlib.Path,
    out: pathlib.Path,
    edit_header: Callable[[dict[str, Any]], Any] = lambda h: None,
    edit_members: Callable[[dict[str, bytes]], Any] = lambda m: None,
    header_bytes: bytes | None = None,
    compression: int = zipfile.ZIP_STORED,
) -> pathlib.Path:
    """A copy of the file at `path` with its header and members edited in place by the two functions."""
    header, raw = members(path)
    edit_header(header)
    edit_members(raw)
    text = json.dumps(header).encode() if header_bytes is None else header_bytes
    with zipfile.ZipFile(out, "w", compression) as z:
        z.writestr("header.npy", npy(np.frombuffer(text, dtype=np.uint8)))
        for name, data in raw.items():
            z.writestr(name, data)
    return out


def net(header: dict[str, Any]) -> dict[str, Any]:
    """The entry of the file's (only) network in a header."""
    entry: dict[str, Any] = header["networks"][0]
    return entry


def load_error(path: pathlib.Path) -> str:
    with pytest.raises(ModelFormatError) as info:
        symnet.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    return message


def test_the_rewriting_helper_keeps_a_good_file_good(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    copy = rewrite(saved, tmp_path / "copy.npz")
    assert symnet.load(copy).structure == small_network().structure


def test_a_newer_format_version_says_to_upgrade(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def newer(h: dict[str, Any]) -> None:
        h.update(version=symnet._src.saving.archive.VERSION + 1, symnet_version="9.0")

    message = load_error(rewrite(saved, tmp_path / "new.npz", newer))
    assert f"format version {symnet._src.saving.archive.VERSION + 1} (written by symnet 9.0)" in message
    assert "upgrade symnet" in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda h: h.update(format="something-else"), "not a symnet network file (format 'something-else'"),
        (lambda h: h.update(version="1"), "format version is '1', not a version number"),
        (lambda h: h.update(version=True), "format version is True"),
        (lambda h: h.update(arrays={}), "'arrays' is not a list"),
        (lambda h: h["arrays"][0].update(dtype="O"), "symnet files hold numbers only"),
        (lambda h: h["arrays"][0].update(dtype="no-such-type"), "is not a NumPy dtype"),
        (lambda h: h["arrays"][0].update(shape=[3, 3]), "has shape [3, 2], expected [3, 3]"),
        (lambda h: net(h).update(outputs=[]), "'outputs' is not a non-empty list"),
        (lambda h: net(h).update(outputs=[["output", 999]]), "is not a distinct [name, layer entry] pair"),
        (lambda h: net(h).update(params={"h.weight": 999}), "names no array (999)"),
        (lambda h: net(h).update(layers={}), "'layers' is not a list"),
        (lambda h: net(h)["layers"].__setitem__(0, [1, 2]), "layer #0 is not an entry"),
        (
            lambda h: net(h)["layers"][0].update({"class": "my_module:Missing"}),
            "'my_module:Missing', which is not defined",
        ),
        (lambda h: net(h)["layers"][0]["fields"].update(dim=-3), "cannot be built from the stored fields"),
        (lambda h: net(h)["layers"][0]["fields"].update(colour="red"), "has no field(s) ['colour']"),
        (
            lambda h: net(h)["layers"][1]["fields"].update(init={"initializer": "Nope", "fields": {}}),
            "'Nope' is not defined",
        ),
        (lambda h: net(h)["layers"][2]["fields"].update(lhs={"layer": 50}), "is not a layer of an earlier entry"),
        (
            lambda h: net(h).update(objectives={"no-such-output": "linear"}),
            "are not strings for outputs of the network",
        ),
        (lambda h: h.update(networks={}), "'networks' is not a list"),
        (lambda h: h.pop("tree"), "the header has no 'tree'"),
        (lambda h: h.update(tree={"network": 5}), "tree: {'network': 5} names no network of the file"),
        (lambda h: h.update(tree={"array": 0, "kind": "pickle"}), "is not an array of the file"),
        (lambda h: h.update(tree={"dict": [["a", 1], ["a", 2]]}), "the dict key 'a' comes twice"),
        (lambda h: h.update(tree={"set": [1]}), "tree: {'set': [1]} is not a value symnet.save writes"),
        (
            lambda h: h.update(tree={"namedtuple": "os:system", "fields": [["command", "true"]]}),
            "'os:system' is not an optax state symnet knows by name",
        ),
    ],
)
def test_a_header_that_does_not_hold_together_is_refused(
    saved: pathlib.Path, tmp_path: pathlib.Path, edit: Callable[[dict[str, Any]], Any], expected: str
) -> None:
    header, _ = members(saved)
    assert [e["class"] for e in net(header)["layers"]][:3] == ["Input", "Weight", "Dot"]  # what the edits assume
    assert expected in load_error(rewrite(saved, tmp_path / "bad.npz", edit))


def test_members_that_do_not_match_the_header_are_refused(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    def drop(m: dict[str, bytes]) -> None:
        del m["arrays/1.npy"]

    assert "missing ['arrays/1.npy']" in load_error(rewrite(saved, tmp_path / "a.npz", edit_members=drop))
    extra = rewrite(saved, tmp_path / "b.npz", edit_members=lambda m: m.update({"run_me.py": b"print(1)"}))
    assert "not listed ['run_me.py']" in load_error(extra)
    shorter = rewrite(
        saved, tmp_path / "c.npz", edit_members=lambda m: m.update({"arrays/0.npy": m["arrays/0.npy"][:-4]})
    )
    assert "member 'arrays/0': its header says float32 [3, 2] (24 bytes), but it holds 20" in load_error(shorter)
    compressed = rewrite(saved, tmp_path / "d.npz", compression=zipfile.ZIP_DEFLATED)
    assert "compressed or encrypted" in load_error(compressed)


def test_pickled_and_non_numeric_arrays_are_refused_unread(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    header, raw = members(saved)
    shape = tuple(header["arrays"][0]["shape"])
    objects = np.empty(shape, dtype=object)
    pickled = rewrite(saved, tmp_path / "p.npz", edit_members=lambda m: m.update({"arrays/0.npy": npy(objects, True)}))
    assert "holds object values: only numbers (and text) are read, never objects" in load_error(pickled)
    text = np.full(shape, "x", dtype="<U1")
    strings = rewrite(saved, tmp_path / "s.npz", edit_members=lambda m: m.update({"arrays/0.npy": npy(text)}))
    assert "holds text, not numbers" in load_error(strings)


def test_a_header_that_is_not_json_or_too_deep_is_refused(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    assert "not valid JSON" in load_error(rewrite(saved, tmp_path / "a.npz", header_bytes=b'{"format": '))
    assert "not UTF-8" in load_error(rewrite(saved, tmp_path / "b.npz", header_bytes=b"\xff\xfe{}"))
    assert "not a JSON object" in load_error(rewrite(saved, tmp_path / "c.npz", header_bytes=b"[1, 2]"))
    deep = b"[" * 10_000 + b"]" * 10_000
    assert "nests deeper than" in load_error(rewrite(saved, tmp_path / "d.npz", header_bytes=deep))
    nan = b'{"format": "symnet-network", "version": NaN}'
    assert "not valid JSON" in load_error(rewrite(saved, tmp_path / "e.npz", header_bytes=nan))


def test_files_that_are_not_network_files(tmp_path: pathlib.Path) -> None:
    kaldi_text = tmp_path / "final.mdl"
    kaldi_text.write_text("<Nnet3> \ninput-node name=input dim=2\n")
    assert "not a .npz archive" in load_error(kaldi_text)
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    assert "no header.npy member" in load_error(other)
    assert "not a regular file" in load_error(tmp_path)


def test_every_truncation_is_a_model_format_error(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = saved.read_bytes()
    cut = tmp_path / "cut.npz"
    for size in sorted({0, 1, 4, 22, *range(0, len(data), max(1, len(data) // 150)), len(data) - 1}):
        cut.write_bytes(data[:size])
        load_error(cut)


def test_flipped_bytes_give_an_error_or_the_same_network(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The members' CRCs catch a flip in their data; a flip the zip reader ignores (a timestamp) changes nothing."""
    data = saved.read_bytes()
    original = small_network()
    flipped = tmp_path / "flipped.npz"
    outcomes = {"error": 0, "same": 0}
    for position in range(0, len(data), max(1, len(data) // 300)):
        damaged = bytearray(data)
        damaged[position] ^= 0x5A
        flipped.write_bytes(bytes(damaged))
        try:
            loaded = symnet.load(flipped)
        except ModelFormatError:
            outcomes["error"] += 1
            continue
        assert isinstance(loaded, Network) and loaded.structure == original.structure, position
        for name, value in original.values.items():
            np.testing.assert_array_equal(np.asarray(loaded.values[name]), np.asarray(value))
        outcomes["same"] += 1
    assert outcomes["error"] > outcomes["same"] > 0, outcomes


def test_a_missing_file_is_file_not_found(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError):
        symnet.load(tmp_path / "nothing.npz")


# ----- writing is atomic --------------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from symnet._src.base import atomic

    path = tmp_path / "model.npz"
    symnet.save(path, small_network())
    before = path.read_bytes()

    def broken(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fsync", broken)  # fails after the data went to the temporary file
    bigger = Network(Tanh(Input("input", 5) @ Weight(Normal((5, 5)))))
    with pytest.raises(OSError, match="disk full"):
        symnet.save(path, bigger)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.npz"]
    monkeypatch.undo()
    symnet.save(path, bigger)
    assert symnet.load(path).structure == bigger.structure


def test_saving_into_a_folder_is_an_output_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(OutputError, match="it is a folder"):
        symnet.save(tmp_path, small_network())
    assert tmp_path.is_dir()


def test_path_arguments_of_the_wrong_type_name_the_function(saved: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Before: `symnet.load(5)` and `load(None)` were Python's TypeError from deep inside; bytes paths work."""
    from symnet.errors import ArgumentTypeError
    from symnet.kaldi import read_model, write_model

    for bad in (5, None, 1.5, ["a"]):
        with pytest.raises(ArgumentTypeError, match=r"symnet.load takes a file path \(a str or os.PathLike\), not"):
            symnet.load(bad)  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError, match="symnet.save takes a file path"):
            symnet.save(bad, symnet.load(saved))  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError, match="read_model takes a file path"):
            read_model(bad)  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError, match="write_model takes a file path"):
            write_model(bad, symnet.load(saved))  # type: ignore[arg-type]
    network = symnet.load(os.fsencode(saved))
    assert network.structure == symnet.load(saved).structure
    with pytest.raises(ModelFormatError, match="not a regular file"):  # before: read until memory ran out
        read_model("/dev/zero")


def claim_size(path: pathlib.Path, member: str, size: int) -> None:
    """Make the zip directory entry of `member` claim `size` uncompressed bytes (the data stays as it is)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"PK\x01\x02")  # the first central directory entry
    while True:
        name_length = int.from_bytes(data[at + 28 : at + 30], "little")
        if data[at + 46 : at + 46 + name_length].decode() == member:
            data[at + 24 : at + 28] = size.to_bytes(4, "little")
            path.write_bytes(bytes(data))
            return
        at = data.index(b"PK\x01\x02", at + 4)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_zip_directory_claiming_a_huge_member_is_refused_before_anything_is_allocated(
    saved: pathlib.Path, tmp_path: pathlib.Path, compression: int
) -> None:
    """Before: a 47 KB .npz whose zip directory claimed a 4 GiB member (and whose .npy header agreed) was
    allocated before a byte was read: a raw MemoryError on a small machine."""
    huge = 0xFFFFFF00
    offset = len(npy(np.zeros(0, np.uint8)))
    claimed = np.lib.format.header_data_from_array_1_0(np.zeros(0, np.uint8))
    claimed["shape"] = (huge - offset,)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, claimed)
    path = rewrite(
        saved,
        tmp_path / "huge.npz",
        edit_members=lambda m: m.update({"arrays/0.npy": header.getvalue() + b"\0" * 64}),
        compression=compression,
    )
    claim_size(path, "arrays/0.npy", huge)
    message = load_error(path)
    assert "member 'arrays/0.npy'" in message
    assert ("holds 4294967040" in message) if compression == zipfile.ZIP_STORED else ("more than deflate" in message)
