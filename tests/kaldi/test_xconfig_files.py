"""The files `symnet xconfig` writes (issue 48): an idct-layer's affine-transform-file only inside the output
folder and never through a link (item 1); the set of --config-dir all old or all new, or the error says which
changed (item 8)."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from symnet._src.app.cli import main
from symnet._src.base import atomic
from symnet._src.base.atomic import atomic_write_all
from symnet.errors import OutputError


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def idct(path: str) -> str:
    return (
        f"input name=input dim=13\nidct-layer name=idct dim=13 affine-transform-file={path}\n"
        "output-layer name=output dim=2\n"
    )


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder, with a file the xconfig must not reach (`victim`) and an empty `configs`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim").write_text("precious")
    (tmp_path / "configs").mkdir()
    return tmp_path


def _hostile(here: Path, case: str) -> str:
    """The affine-transform-file of each way out of `configs` (planting the links it needs)."""
    if case == "symlink":
        os.symlink(here / "victim", here / "configs" / "idct.mat")
        return "configs/idct.mat"
    if case == "symlinked folder":
        os.symlink(here, here / "configs" / "up")
        return "configs/up/victim"
    return {"absolute": str(here / "victim"), "dotdot": "configs/../victim", "outside": "victim"}[case]


CASES = ["absolute", "dotdot", "outside", "symlink", "symlinked folder"]
WHY = {
    "absolute": "an absolute path",
    "dotdot": "goes up a folder",
    "outside": "outside the output folder",
    "symlink": "is a symbolic link",
    "symlinked folder": "is a symbolic link",
}


@pytest.mark.parametrize("output", ["--config-dir", "-o"])
@pytest.mark.parametrize("case", CASES)
def test_an_idct_matrix_is_written_only_inside_the_output_folder(case: str, output: str, here: Path) -> None:
    """Before: the IDCT matrix was written at any path the xconfig gave, through any link."""
    (here / "x.xconfig").write_text(idct(_hostile(here, case)))
    before = sorted(os.listdir(here / "configs"))
    target = ["--config-dir", "configs"] if output == "--config-dir" else ["-o", "configs/final.config"]
    status, out, err = run("xconfig", *target, "x.xconfig")
    assert status == 1, (out, err)
    assert "x.xconfig:2:" in err and "idct-layer idct: affine-transform-file=" in err and WHY[case] in err, err
    assert (here / "victim").read_text() == "precious"
    assert sorted(os.listdir(here / "configs")) == before and out == ""


@pytest.mark.parametrize("output", ["--config-dir", "-o"])
def test_the_matrix_inside_the_folder_is_written_and_listed(output: str, here: Path) -> None:
    """As a recipe names it: `$dir/configs/idct.mat`, from the working folder, inside `$dir/configs`. -o writes it
    beside final.config and says so, naming the option and the line."""
    (here / "x.xconfig").write_text(idct("configs/idct.mat"))
    target = ["--config-dir", "configs"] if output == "--config-dir" else ["-o", "configs/final.config"]
    status, out, err = run("xconfig", *target, "x.xconfig")
    assert status == 0, err
    assert "wrote configs/idct.mat (affine-transform-file of idct-layer idct (x.xconfig:2))" in out
    assert (here / "configs" / "idct.mat").read_text().startswith("[ ")
    assert "matrix=configs/idct.mat" in (here / "configs" / "final.config").read_text()


def test_the_matrix_cannot_be_a_file_symnet_writes_itself(here: Path) -> None:
    (here / "x.xconfig").write_text(idct("configs/./vars"))
    status, _, err = run("xconfig", "--config-dir", "configs", "x.xconfig")
    assert status == 1 and "affine-transform-file=configs/./vars: symnet (vars) writes that file too" in err, err
    (here / "x.xconfig").write_text(idct("configs/final.config"))
    status, _, err = run("xconfig", "-o", "configs/final.config", "x.xconfig")
    assert status == 1 and "symnet (final.config) writes that file too" in err, err
    assert os.listdir(here / "configs") == []


def test_a_hard_linked_matrix_is_replaced_not_written_through(here: Path) -> None:
    """A file an xconfig names is replaced by a rename, so a hard link planted there keeps its own contents."""
    os.link(here / "victim", here / "configs" / "idct.mat")
    (here / "x.xconfig").write_text(idct("configs/idct.mat"))
    status, _, err = run("xconfig", "--config-dir", "configs", "x.xconfig")
    assert status == 0, err
    assert (here / "victim").read_text() == "precious"
    assert (here / "configs" / "idct.mat").read_text().startswith("[ ")


def test_a_link_planted_after_the_check_is_not_followed(here: Path) -> None:
    """The check names the option; the write itself (AtomicFile inside a folder) opens every folder without
    following a link and never writes through one, so a link planted in between is refused too."""
    os.symlink(here / "victim", here / "configs" / "idct.mat")
    with pytest.raises(OutputError, match="it is a symbolic link"):
        atomic_write_all({"configs/idct.mat": b"x"}, inside={"configs/idct.mat": "configs"})
    os.symlink(here, here / "configs" / "up")
    with pytest.raises(OutputError, match="up is a link or not a folder"):
        atomic_write_all({"configs/up/victim": b"x"}, inside={"configs/up/victim": "configs"})
    with pytest.raises(OutputError, match="not inside configs"):
        atomic_write_all({"victim": b"x"}, inside={"victim": "configs"})
    assert (here / "victim").read_text() == "precious"
    atomic_write_all({"configs/sub/m.mat": b"x"}, inside={"configs/sub/m.mat": "configs"})  # folders made
    assert (here / "configs" / "sub" / "m.mat").read_bytes() == b"x"
    assert sorted(os.listdir(here / "configs" / "sub")) == ["m.mat"]  # no temporary file left


LDA = """input name=input dim=4
fixed-affine-layer name=lda input=Append(-1,0,1) affine-transform-file=configs/lda.mat
relu-layer name=a dim=5
output-layer name=output dim=3
"""


def _old_config_dir(here: Path) -> dict[str, str]:
    """configs/ as an earlier run left it: every file symnet writes there, each with old contents."""
    (here / "x.xconfig").write_text(LDA)
    assert run("xconfig", "--config-dir", "configs", "x.xconfig")[0] == 0
    for path in (here / "configs").iterdir():
        path.write_text("old " + path.name)
    return {p.name: p.read_text() for p in (here / "configs").iterdir()}


def test_a_full_disk_with_a_hard_linked_member_leaves_the_whole_set_old(here: Path, monkeypatch) -> None:
    """Before: the files before the hard-linked one (written in place) were renamed in, then making room for it
    failed: 6 files new, 1 old, and the error did not say so. Now room is made before anything is replaced."""
    old = _old_config_dir(here)
    os.link(here / "configs" / "vars", here / "vars.link")

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    status, _, err = run("xconfig", "--config-dir", "configs", "x.xconfig")
    assert {p.name: p.read_text() for p in (here / "configs").iterdir()} == old
    assert status == 1 and "cannot write configs/vars: No space left on device" in err, err
    assert "of this set, every file as it was" in err, err
    assert (here / "vars.link").read_text() == "old vars"


def test_a_set_that_fails_part_way_says_which_files_changed(here: Path, monkeypatch) -> None:
    """Where a rename itself fails (a folder made read-only under it), the error lists the files already
    replaced and those left as they were, so the user knows the set is mixed."""
    old = _old_config_dir(here)
    real = os.replace

    def replace(src, dst, **kwargs):
        if str(dst).endswith("final.config"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(src, dst, **kwargs)

    monkeypatch.setattr(atomic.os, "replace", replace)
    status, _, err = run("xconfig", "--config-dir", "configs", "x.xconfig")
    assert status == 1, err
    changed = ["xconfig", "xconfig.expanded.1", "xconfig.expanded.2", "init.config", "ref.config"]
    listed = ", ".join(f"configs/{name}" for name in changed)
    assert f"of this set, {listed} changed; configs/final.config, configs/vars as they were" in err, err
    now = {p.name: p.read_text() for p in (here / "configs").iterdir()}
    assert sorted(name for name in now if now[name] != old[name]) == sorted(changed)
    assert sorted(p.name for p in (here / "configs").iterdir()) == sorted(old)  # no temporary file left


def test_a_config_on_standard_output_says_the_matrix_it_names_is_not_written(here: Path) -> None:
    (here / "x.xconfig").write_text(idct("configs/idct.mat"))
    status, out, err = run("xconfig", "x.xconfig")
    assert status == 0 and "matrix=configs/idct.mat" in out
    assert (
        "warning: the config names configs/idct.mat (affine-transform-file of idct-layer idct, x.xconfig:2), written only"
        in err
    )
    assert os.listdir(here / "configs") == []
