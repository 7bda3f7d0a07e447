"""Every command refuses an output that is one of its inputs (unless --force) and two outputs that are one file,
before any work: the same file by name, through a symlink or a hard link (issue 48, item 5)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from helpers import EXAMPLES
from helpers.kaldi_models import NNET_TEXT
from symnet._src.app.cli import main

CONFIG = (EXAMPLES / "hmm-tdnn.config").read_text()


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """net.config, nnet.raw, feats.ark/.scp and ali.ark in the working folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.config").write_text(CONFIG)
    (tmp_path / "nnet.raw").write_text(NNET_TEXT)
    kaldiio.save_ark("feats.ark", {"u": np.zeros((6, 3), np.float32)}, scp="feats.scp")
    kaldiio.save_ark("ali.ark", {"u": np.zeros(6, np.int32)})
    return tmp_path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# (argv, the output's role, the input's role): each replaced an input before
OVER_AN_INPUT = [
    (["export", "--frames", "20", "nnet.raw", "nnet.raw"], "OUT", "MODEL"),
    (["lda", "--alignments", "ark:ali.ark", "net.config", "ark:feats.ark", "feats.ark"], "LDA_MAT", "FEATS_RSPECIFIER"),
    (["lda", "--alignments", "ark:ali.ark", "net.config", "scp:feats.scp", "ali.ark"], "LDA_MAT", "--alignments"),
    (["lda", "--alignments", "ark:ali.ark", "net.config", "ark:feats.ark", "net.config"], "LDA_MAT", "NETWORK"),
    (
        ["lda", "--alignments", "ark:ali.ark", "--write-stats", "feats.scp", "net.config", "scp:feats.scp", "o.mat"],
        "--write-stats",
        "FEATS_RSPECIFIER",
    ),
    (
        ["train", "net.config", "--data", "builtin:hmm:6", "--out", "x.npz", "--metrics", "net.config"],
        "--metrics",
        "the network",
    ),
    (["train", "net.config", "--data", "builtin:hmm:6", "--out", "net.config"], "--out", "the network"),
    (
        ["train", "net.config", "--feats", "scp:feats.scp", "--targets", "ark:ali.ark", "--out", "feats.ark"],
        "--out",
        "--feats",
    ),
    (["copy", "nnet.raw", "nnet.raw"], "OUT", "IN"),
    (["init", "net.config", "net.config"], "OUT", "CONFIG"),
    (["xconfig", "-o", "x.xconfig", "x.xconfig"], "-o", "XCONFIG"),
    (["compute", "nnet.raw", "scp:feats.scp", "ark,scp:o.ark,feats.scp"], "MATRIX_WSPECIFIER", "the features"),
]


@pytest.mark.parametrize(
    ("argv", "output", "input"), OVER_AN_INPUT, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_every_command_refuses_to_write_over_an_input(argv, output, input, folder: Path) -> None:
    (folder / "x.xconfig").write_text("input name=input dim=3\noutput-layer name=output dim=2\n")
    before = _snapshot(folder)
    status, _, err = run(*argv)
    assert status == 1 and f"({output}) is also an input ({input}: " in err and "--force" in err, err
    assert _snapshot(folder) == before


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_an_input_reached_through_a_link_is_the_same_file(link: str, folder: Path) -> None:
    (os.symlink if link == "symlink" else os.link)("nnet.raw", "other.raw")
    status, _, err = run("copy", "nnet.raw", "other.raw")
    assert status == 1 and "the output other.raw (OUT) is also an input (IN: nnet.raw)" in err, err
    assert (folder / "nnet.raw").read_text() == NNET_TEXT


def test_force_writes_over_the_input(folder: Path) -> None:
    status, out, err = run("copy", "--force", "--binary=false", "nnet.raw", "nnet.raw")
    assert status == 0 and "wrote nnet.raw" in out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["lda", "--alignments", "ark:ali.ark", "--write-stats", "o.mat", "net.config", "ark:feats.ark", "o.mat"],
        [
            "lda",
            "--alignments",
            "ark:ali.ark",
            "--write-stats",
            "./o.mat",
            "--force",
            "net.config",
            "ark:feats.ark",
            "o.mat",
        ],
        ["train", "net.config", "--data", "builtin:hmm:6", "--out", "o.npz", "--checkpoint", "o.npz"],
        ["compute", "nnet.raw", "ark:feats.ark", "ark,scp:o.ark,o.ark"],
    ],
)
def test_two_outputs_that_are_one_file_are_refused_even_with_force(argv, folder: Path) -> None:
    """Before: `symnet lda --write-stats X ... X` wrote the stats over the matrix and printed 'wrote X' twice."""
    before = _snapshot(folder)
    status, out, err = run(*argv)
    assert status == 1 and "are one file: one would replace the other" in err, err
    assert _snapshot(folder) == before and out == ""


def test_a_nul_byte_in_an_output_path_is_a_symnet_error(folder: Path) -> None:
    status, _, err = run("copy", "nnet.raw", "o\0.raw")
    assert status == 1 and "has a NUL byte" in err, err


def test_the_files_of_specifiers(folder: Path) -> None:
    from symnet._src.app.cli.files import Files, rspecifier_files, wspecifier_files

    (folder / "ranges.scp").write_text("u feats.ark:5[0:2]\nv feats.ark:9\nw cat x |\nx other.ark\n")
    assert rspecifier_files("scp:ranges.scp") == ["ranges.scp", "feats.ark", "other.ark"]
    assert rspecifier_files("ark,t:a.txt") == ["a.txt"] and rspecifier_files("ark:-") == []
    assert rspecifier_files("ark:gunzip -c a.gz |") == [] and rspecifier_files("plain.ark") == ["plain.ark"]
    assert wspecifier_files("ark,scp:o.ark,o.scp") == ["o.ark", "o.scp"] and wspecifier_files("ark:-") == []
    Files().read("in", ["feats.ark"]).write("out", ["/dev/null"]).write("log", ["/dev/null"]).check()  # devices


def test_compute_with_a_nul_byte_in_a_features_scp_is_one_line(tmp_path: Path) -> None:
    """Before: the overwrite check (os.stat of every file the scp names) raised a raw ValueError."""
    (tmp_path / "nnet.raw").write_text(NNET_TEXT)
    kaldiio.save_ark(str(tmp_path / "f.ark"), {"u": np.zeros((6, 3), np.float32)}, scp=str(tmp_path / "f.scp"))
    line = (tmp_path / "f.scp").read_text()
    (tmp_path / "f.scp").write_text(line.replace("f.ark", "f\0.ark"))
    status, _, err = run(
        "compute", str(tmp_path / "nnet.raw"), f"scp:{tmp_path / 'f.scp'}", f"ark:{tmp_path / 'o.ark'}"
    )
    assert status == 1 and "NUL byte" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.ark").exists()


def test_a_matrix_a_config_names_is_an_input(folder: Path) -> None:
    """`matrix=` files are read with the config: `symnet init` and `symnet train` must not write over them."""
    (folder / "lda.mat").write_text(" [ 1 0\n 0 1 ]\n")
    (folder / "lda.config").write_text(
        "input-node name=input dim=2\n"
        "component name=lda type=FixedAffineComponent matrix=lda.mat\n"
        "component-node name=lda component=lda input=input\n"
        "output-node name=output input=lda objective=quadratic\n"
    )
    before = _snapshot(folder)
    status, _, err = run("init", "lda.config", "lda.mat")
    assert status != 0 and "lda.mat" in err and "a file CONFIG names" in err
    status, _, err = run("train", "lda.config", "--data", "builtin:hmm:6", "--out", "lda.mat")
    assert status != 0 and "also an input" in err
    assert _snapshot(folder) == before
