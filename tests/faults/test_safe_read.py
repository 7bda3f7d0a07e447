"""`symnet._src.base.safe_read`: an `.npz` member is read only after its header was checked against its size, the
caller's expectation and a limit; a file of bounded size is read only from a regular file."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from helpers import fuzz
from symnet._src.base.safe_read import NpzArchive, read_file
from symnet.errors import ModelFormatError, SymnetError


class Refused(SymnetError):
    pass


def archive(tmp_path, members: dict[str, bytes], compress: bool = False):
    path = tmp_path / "a.npz"
    path.write_bytes(fuzz.npz_bytes(members, compress=compress))
    return path


def test_reads_what_numpy_wrote(tmp_path):
    values = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "d": np.array(2.5),
        "i": np.arange(4),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "n.npz"
    np.savez(path, **values, text=np.array("héllo"), data=np.frombuffer(b'{"a": [1, 2]}', np.uint8))
    with NpzArchive(path) as a:
        for name, value in values.items():
            got = a.read(name, shape=value.shape, dtype=value.dtype)
            np.testing.assert_array_equal(got, value)
        assert a.read_text("text") == "héllo" and a.read_json("data") == {"a": [1, 2]}
        assert a.spec("f").shape == (2, 3) and "f" in a and sorted(a.names)[0] == "d"


@pytest.mark.parametrize("compress", [False, True])
def test_a_member_that_is_not_what_the_caller_expects_is_refused_unread(tmp_path, compress):
    path = tmp_path / "bomb.npz"
    path.write_bytes(fuzz.deflated_zeros_npz("w", (1 << 26,), 1 << 28))  # 256 MiB once inflated
    started = time.perf_counter()
    with NpzArchive(path, error=Refused) as a:
        with pytest.raises(Refused, match=r"member 'w' has shape \[67108864\], expected \[3, 4\]"):
            a.read("w", shape=(3, 4), dtype=np.float32)
        with pytest.raises(Refused, match="more than the 1000 allowed"):
            a.read("w", max_bytes=1000)
    assert time.perf_counter() - started < 2  # nothing was inflated


@pytest.mark.parametrize(
    "member,message",
    [
        (
            fuzz.npy_bytes(header={"descr": "<f4", "fortran_order": False, "shape": (10**5, 10**5)}, data=b"\0" * 16),
            "holds 16 bytes of data",
        ),
        (
            fuzz.npy_bytes(header={"descr": "<f4", "fortran_order": False, "shape": (1,)}, data=b"\0" * 64),
            "holds 64 bytes of data",
        ),
        (fuzz.npy_bytes(np.array([{"x": 1}], dtype=object)), "holds object values"),
        (fuzz.npy_bytes(np.zeros(2, dtype=[("x", "<f4")])), "only numbers"),
        (fuzz.npy_bytes(np.zeros(2, np.float32), version=(3, 0)), "version"),
        (b"not an npy member", "not a readable .npy header"),
    ],
)
def test_members_whose_header_lies_or_holds_objects_are_refused(tmp_path, member, message):
    with NpzArchive(archive(tmp_path, {"m": member}), error=Refused) as a, pytest.raises(Refused, match=message):
        a.read("m")


def test_text_and_json_members(tmp_path):
    path = archive(
        tmp_path,
        {
            "deep": fuzz.npy_bytes(np.frombuffer(fuzz.deep_json(100000), np.uint8)),
            "bad": fuzz.npy_bytes(np.frombuffer(b"\xff{", np.uint8)),
            "num": fuzz.npy_bytes(np.zeros(3)),
            "text": fuzz.npy_bytes(np.array("x")),
        },
    )
    with NpzArchive(path, error=Refused) as a:
        with pytest.raises(Refused, match="nested too deeply"):
            a.read_json("deep", max_bytes=1 << 20)
        with pytest.raises(Refused, match="not UTF-8"):
            a.read_text("bad")
        with pytest.raises(Refused, match="not text"):
            a.read_text("num")
        with pytest.raises(Refused, match="holds text, not numbers"):
            a.read("text")
        with pytest.raises(Refused, match="no member 'nope'"):
            a.read("nope")


@pytest.mark.parametrize("content", [b"", b"hello", b"PK\x03\x04" + b"\0" * 40])
def test_files_that_are_not_archives(tmp_path, content):
    (tmp_path / "x.npz").write_bytes(content)
    with pytest.raises(Refused, match="not a readable model"):
        NpzArchive(tmp_path / "x.npz", error=Refused, what="model")


def test_devices_fifos_and_folders_are_not_read(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, kind in [
        ("/dev/zero", "a device"),
        (str(tmp_path / "fifo"), "a device, FIFO"),
        (str(tmp_path), "a folder"),
    ]:
        with pytest.raises(ModelFormatError, match=kind):
            read_file(path, 1000, what="matrix file")
        with pytest.raises(ModelFormatError, match=kind):
            NpzArchive(path)
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "missing"), 10)


def test_read_file_is_bounded(tmp_path):
    (tmp_path / "m.txt").write_bytes(b"[ 1 2 3 ]\n")
    assert read_file(str(tmp_path / "m.txt"), 100) == b"[ 1 2 3 ]\n"
    with pytest.raises(Refused, match="has 10 bytes, more than the 5 allowed"):
        read_file(str(tmp_path / "m.txt"), 5, error=Refused)


def test_a_fifo_named_as_a_file_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    done = []
    thread = threading.Thread(
        target=lambda: done.append(pytest.raises(ModelFormatError, read_file, str(tmp_path / "fifo"), 10))
    )
    thread.start()
    thread.join(5)
    assert done, "reading a FIFO blocked"


# ----- a file swapped between a look by name and the open ------------------------------------------------


def _readers(tmp_path):
    """`(name, the path it reads, a call reading it)` for every reader of a file named by the user or by another
    file: each must open the file once and check what it opened."""
    from symnet._src.kaldi.models.model_reader import read_model
    from symnet._src.kaldi.text.build import parse_network
    from symnet._src.kaldi_io.egs import read_egs
    from symnet._src.kaldi_io.scp import read_entry
    from symnet.kaldi import read_kaldi_array

    fixed = (
        "input-node name=input dim=3\ncomponent name=f type=FixedAffineComponent matrix={path}\n"
        "component-node name=f component=f input=input\noutput-node name=output input=f\n"
    )
    target = tmp_path / "victim"
    scp = tmp_path / "egs.scp"
    scp.write_text(f"k1 {target}:0\n")
    return target, {
        "matrix= file": lambda: parse_network(fixed.format(path=target)),
        "matrix= .npy file": lambda: parse_network(fixed.format(path=f"{target}.npy")),
        "read_kaldi_array": lambda: read_kaldi_array(target),
        "egs archive": lambda: list(read_egs(target)),
        "egs archive of an scp": lambda: list(read_egs(f"scp:{scp}")),
        "scp entry": lambda: read_entry(f"{target}:0", "x.scp", "u0"),
        "read_file": lambda: read_file(str(target), 100),
        "npz": lambda: NpzArchive(target),
        "model": lambda: read_model(target),
    }


def _swap_after_stat(monkeypatch, path, replace):
    """The neighbour: the first time `path` is looked up by name (os.stat), it is replaced right after."""
    real, done = os.stat, []

    def stat(p, *args, **kwargs):
        st = real(p, *args, **kwargs)
        if not done and os.fspath(p) == str(path) and not args and not kwargs.get("dir_fd"):
            done.append(True)
            os.unlink(path)
            replace(path)
        return st

    monkeypatch.setattr(os, "stat", stat)


def _finishes(call, seconds=10):
    """`call()`'s exception (None if it returned), or "blocked" if it is still running after `seconds`."""
    outcome = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # the outcome is what the test looks at
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else "blocked"


@pytest.mark.parametrize("reader", ["matrix= file", "matrix= .npy file", "read_kaldi_array", "egs archive",
                                    "egs archive of an scp", "scp entry", "read_file", "npz", "model"])  # fmt: skip
@pytest.mark.parametrize("swap", ["fifo", "link to /dev/zero"])
def test_a_file_swapped_after_a_look_by_name_is_refused_not_read(tmp_path, monkeypatch, reader, swap):
    """Before: the readers looked at the file by name (regular, small) and then opened it by name again, so a
    FIFO put in its place blocked the open forever, and a link to /dev/zero was read until memory ran out."""
    target, readers = _readers(tmp_path)
    path = target.with_name(target.name + ".npy") if reader == "matrix= .npy file" else target
    path.write_bytes(b"\0B" + b"x" * 40)

    def replace(p):
        if swap == "fifo":
            os.mkfifo(p)
        else:
            os.symlink("/dev/zero", p)

    _swap_after_stat(monkeypatch, path, replace)
    error = _finishes(readers[reader])
    if error == "blocked" and swap == "fifo":
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked reader go
    assert error != "blocked", f"{reader}: the open of a FIFO blocked"
    assert isinstance(error, SymnetError), f"{reader}: {error!r}"
    assert "not a regular file" in str(error) and str(path) in str(error)
