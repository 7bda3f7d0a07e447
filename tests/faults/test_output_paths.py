"""Every writer, at every kind of output path: character devices and FIFOs are written through, symlinks
updated at their target, hard links and permission bits (and owners) kept, errors name the user's path,
and no temporary file is left behind."""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.writers import WRITERS, make_inputs, make_writers
from symnet._src.base.atomic import AtomicFile, atomic_open, atomic_write, check_writable
from symnet.errors import OutputError, SymnetError

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def writers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Callable[[str], None]]:
    return make_writers(make_inputs(tmp_path_factory.mktemp("inputs")))


def canonical(data: bytes) -> object:
    """Contents to compare: an npz's arrays (its zip timestamps differ from run to run), else the bytes."""
    if data[:2] != b"PK":
        return data
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return sorted((info.filename, z.read(info)) for info in z.infolist())


def reference(writers: dict[str, Callable[[str], None]], name: str, folder: Path) -> object:
    path = folder / "reference.out"
    writers[name](str(path))
    data = canonical(path.read_bytes())
    path.unlink()
    return data


def leftovers(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


@pytest.fixture
def null_device(tmp_path: Path) -> Path:
    """A /dev/null to write to: a clone made with mknod as root (never the system's own), else /dev/null."""
    if not ROOT:
        return Path("/dev/null")  # a non-root process cannot replace it even if the code tried
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


# ----- what each kind of path gets ------------------------------------------------------------------------


@pytest.mark.parametrize("name", WRITERS)
def test_a_character_device_is_written_through_not_replaced(name, writers, null_device, tmp_path):
    before = os.stat(null_device)
    writers[name](str(null_device))
    after = os.stat(null_device)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert leftovers(null_device.parent) == [] and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", WRITERS)
def test_a_fifo_is_written_through(name, writers, tmp_path):
    expected = reference(writers, name, tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = bytearray()

    def read() -> None:
        with open(fifo, "rb") as f:
            received.extend(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    writers[name](str(fifo))
    reader.join(timeout=60)
    assert not reader.is_alive()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert canonical(bytes(received)) == expected
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("relative", [True, False])
def test_a_symlink_is_kept_and_its_target_updated(name, writers, tmp_path, relative):
    """Kaldi's `final.mdl -> 40.mdl`: 40.mdl gets the new contents, final.mdl stays a link to it."""
    expected = reference(writers, name, tmp_path)
    (tmp_path / "models").mkdir()
    target = tmp_path / "models" / "40.mdl"
    target.write_bytes(b"stale")
    link = tmp_path / "final.mdl"
    os.symlink("models/40.mdl" if relative else target, link)
    writers[name](str(link))
    assert link.is_symlink() and os.readlink(link) == ("models/40.mdl" if relative else str(target))
    assert canonical(target.read_bytes()) == expected
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "models") == []


def test_a_chain_of_symlinks_and_a_dangling_one(writers, tmp_path):
    target = tmp_path / "real"
    os.symlink("real", tmp_path / "one")
    os.symlink("one", tmp_path / "two")
    writers["atomic_write"](str(tmp_path / "two"))  # dangling: the file it names is created, as open() does
    assert target.read_bytes() == b"symnet\n" * 100 and (tmp_path / "two").is_symlink()
    assert (tmp_path / "one").is_symlink()


@pytest.mark.parametrize("name", WRITERS)
def test_hard_links_all_see_the_new_contents(name, writers, tmp_path):
    expected = reference(writers, name, tmp_path)
    first, second = tmp_path / "a.mdl", tmp_path / "b.mdl"
    first.write_bytes(b"old contents " * 1000)
    os.link(first, second)
    writers[name](str(first))
    assert os.stat(first).st_ino == os.stat(second).st_ino and os.stat(first).st_nlink == 2
    assert canonical(second.read_bytes()) == expected
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_the_mode_of_a_replaced_file_is_kept(name, writers, tmp_path, mode):
    path = tmp_path / "out"
    path.write_bytes(b"old")
    os.chmod(path, mode)
    writers[name](str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == mode and path.read_bytes() != b"old"


def test_a_new_file_gets_what_open_gives(writers, tmp_path):
    mask = os.umask(0o027)
    try:
        writers["symnet.save"](str(tmp_path / "new.npz"))
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "new.npz").st_mode) == 0o640


@pytest.mark.skipif(not ROOT, reason="giving a file another owner needs root")
@pytest.mark.parametrize("name", ["atomic_write", "symnet.save", "symnet compute ark:"])
def test_the_owner_of_a_replaced_file_is_kept(name, writers, tmp_path):
    path = tmp_path / "out"
    path.write_bytes(b"old")
    os.chown(path, 65534, 65534)
    writers[name](str(path))
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (65534, 65534) and path.read_bytes() != b"old"


def test_a_file_in_a_folder_where_no_file_can_be_created_is_written_in_place(tmp_path, monkeypatch):
    """A writable file in a folder this user may not create files in (simulated: root may do anything)."""
    import tempfile

    folder = tmp_path / "locked"
    folder.mkdir()
    path = folder / "out"
    path.write_bytes(b"old contents, longer than the new")
    inode = os.stat(path).st_ino
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == folder:
            raise PermissionError(errno.EACCES, "Permission denied", dir)
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new" and os.stat(path).st_ino == inode and os.listdir(folder) == ["out"]
    with pytest.raises(OutputError, match="cannot write .*/locked/new: Permission denied"):
        atomic_write(folder / "new", b"x")  # no file to write in place


# ----- errors name the user's path; nothing is left behind ---------------------------------------------------


@pytest.mark.parametrize("name", WRITERS)
def test_errors_name_the_users_path_and_leave_nothing(name, writers, tmp_path):
    (tmp_path / "a-file").write_bytes(b"x")
    (tmp_path / "a-folder").mkdir()
    for bad, reason in [("a-file/out", "Not a directory"), ("a-folder", "folder")]:
        path = str(tmp_path / bad)
        with pytest.raises(SymnetError) as e:
            writers[name](path)
        assert path in str(e.value) and reason in str(e.value) and ".tmp" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["a-file", "a-folder"] and os.listdir(tmp_path / "a-folder") == []


def test_output_error_is_a_symnet_error_and_an_os_error(tmp_path):
    with pytest.raises(OutputError) as e:
        atomic_write(tmp_path, b"x")
    assert isinstance(e.value, SymnetError) and isinstance(e.value, OSError)
    assert e.value.errno == errno.EISDIR and e.value.filename == str(tmp_path)


def test_a_device_that_fails_names_the_path(tmp_path):
    with pytest.raises(OutputError, match="cannot write /dev/full: No space left on device"):
        atomic_write("/dev/full", b"x" * 100000)


def test_a_failure_inside_the_block_leaves_the_old_file(tmp_path):
    path = tmp_path / "out"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write(b"half")
        raise RuntimeError("the caller failed")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out"]


def test_abort_and_commit_are_idempotent(tmp_path):
    out = AtomicFile(tmp_path / "x")
    out.file.write(b"data")
    out.commit()
    out.commit()
    out.abort()
    assert (tmp_path / "x").read_bytes() == b"data" and os.listdir(tmp_path) == ["x"]


def test_check_writable_refuses_what_a_write_would_fail_on(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    for bad in ("f/x", ".", "f/x/y"):
        with pytest.raises(OutputError):
            check_writable(tmp_path / bad)
    check_writable(tmp_path / "new" / "deeper" / "x.npz")  # the folders a write would create
    check_writable("/dev/null")
    assert sorted(os.listdir(tmp_path)) == ["f"]  # the probe left nothing
