"""The command line on hostile input: scp commands need --allow-pipes, non-finite values are warned about,
numeric options are bounded, train checks its output paths first and refuses a resume with other settings."""

from __future__ import annotations

import contextlib
import io
import time
import warnings
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from helpers import EXAMPLES
from helpers.kaldi_models import NNET_TEXT
from symnet import train as train_package
from symnet._src.app.cli import main
from symnet._src.compute_table import warn_non_finite

TRAIN = [
    "train",
    str(EXAMPLES / "hmm-tdnn.config"),
    "--data",
    "builtin:hmm:6",
    "--epochs",
    "1",
    "--batch-size",
    "4",
    "--quiet",
]


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def model_and_feats(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    (tmp_path / "nnet.raw").write_text(NNET_TEXT)
    rng = np.random.default_rng(0)
    feats = {"u0": rng.standard_normal((6, 3)).astype(np.float32), "u1": rng.standard_normal((5, 3)).astype(np.float32)}
    feats["u1"][2, 1] = np.nan
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats, scp=str(tmp_path / "feats.scp"))
    return tmp_path, feats


def test_compute_refuses_an_scp_command_without_allow_pipes(
    model_and_feats: tuple[Path, dict[str, np.ndarray]],
) -> None:
    folder, _ = model_and_feats
    marker = folder / "PWNED"
    (folder / "evil.scp").write_text(f"u0 touch {marker}; tail -c +4 {folder / 'feats.ark'} |\n")
    args = ["compute", str(folder / "nnet.raw"), f"scp:{folder / 'evil.scp'}", f"ark:{folder / 'out.ark'}"]
    status, _, err = run(*args)
    assert status == 1 and "runs a command" in err and "--allow-pipes" in err and "evil.scp:1" in err
    assert not marker.exists() and not (folder / "out.ark").exists()
    status, _, err = run(args[0], "--allow-pipes", *args[1:])
    assert status == 0, err
    assert marker.exists() and list(dict(kaldiio.load_ark(str(folder / "out.ark")))) == ["u0"]


def test_compute_refuses_to_write_its_output_over_an_input(model_and_feats: tuple[Path, dict[str, np.ndarray]]) -> None:
    """Before: `symnet compute model ark:feats.ark ark:feats.ark` replaced the input archive with the outputs."""
    folder, _ = model_and_feats
    before = (folder / "feats.ark").read_bytes()
    cases = [
        ("ark:feats.ark", "ark:feats.ark", "the features"),
        ("scp:feats.scp", "ark,t:feats.ark", "the features"),  # an archive the scp names
        ("scp:feats.scp", "ark,scp:out.ark,feats.scp", "the features"),
        ("ark:feats.ark", "ark:nnet.raw", "the model"),
    ]
    for rspecifier, wspecifier, what in cases:
        with contextlib.chdir(folder):
            status, _, err = run("compute", "nnet.raw", rspecifier, wspecifier)
        assert status == 1 and f"is also an input ({what}: " in err and "--force" in err, (wspecifier, err)
    assert (folder / "feats.ark").read_bytes() == before and (folder / "nnet.raw").read_text() == NNET_TEXT
    assert sorted(p.name for p in folder.iterdir()) == ["feats.ark", "feats.scp", "nnet.raw"]
    with contextlib.chdir(folder):  # asked for: written
        assert run("compute", "--force", "nnet.raw", "ark:feats.ark", "ark:feats.ark")[0] == 0
    assert (folder / "feats.ark").read_bytes() != before


def test_train_refuses_an_scp_command_without_allow_pipes(
    model_and_feats: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = model_and_feats
    (folder / "evil.scp").write_text(f"u0 touch {folder / 'PWNED'} |\n")
    (folder / "ali.txt").write_text("u0 0 1 2 1 0 1\n")
    status, _, err = run(
        "train",
        str(EXAMPLES / "hmm-tdnn.config"),
        "--feats",
        f"scp:{folder / 'evil.scp'}",
        "--targets",
        f"ark,t:{folder / 'ali.txt'}",
        "--out",
        str(folder / "m.npz"),
        "--quiet",
    )
    assert status == 1 and "--allow-pipes" in err and not (folder / "PWNED").exists()


def test_compute_warns_naming_the_utterance_with_non_finite_values(
    model_and_feats: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """Before: NaN went through silently (and ReLU turned it into plausible posteriors)."""
    folder, _ = model_and_feats
    status, _, err = run("compute", str(folder / "nnet.raw"), f"scp:{folder / 'feats.scp'}", f"ark:{folder / 'o.ark'}")
    assert status == 0
    assert "utterance u1: the input features have 1 non-finite values (first nan at frame 2, dim 1)" in err
    assert "utterance u1: the output have" in err and "utterance u0" not in err
    out = dict(kaldiio.load_ark(str(folder / "o.ark")))
    assert np.isnan(out["u1"]).any() and np.isfinite(out["u0"]).all()


@pytest.mark.parametrize(
    ("values", "warned"),
    [([[3e38, 3e38]], False), ([[1.0, np.inf]], True), ([[np.nan, 1.0]], True), ([[-np.inf, np.inf]], True)],
)
def test_non_finite_values_are_found_whatever_their_sum(values, warned) -> None:
    """A finite matrix whose float32 sum overflows (the quick check's one false alarm) is not warned about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_non_finite("u", "output", np.asarray(values, np.float32))
    assert [str(w.message).startswith("utterance u: the output have") for w in caught] == ([True] if warned else [])


@pytest.mark.parametrize(
    "option",
    [
        "--extra-left-context=100000000",
        "--extra-right-context=-1",
        "--frames-per-chunk=0",
        "--frame-subsampling-factor=99999999",
        "--extra-left-context-initial=-2",
    ],
)
def test_compute_bounds_its_frame_options_before_any_work(
    model_and_feats: tuple[Path, dict[str, np.ndarray]], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = model_and_feats
    started = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        main(["compute", option, str(folder / "nnet.raw"), "ark:x.ark", "ark:y.ark"])
    assert e.value.code == 2 and time.perf_counter() - started < 5
    assert "must be in" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option",
    ["--seed=-1", "--batch-size=0", "--epochs=-1", "--lr=0", "--lr=nan", "--chunk=x", "--chunk=8,0", "--chunk=8,"],
)
def test_train_bounds_its_numeric_options(option: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main([*TRAIN, option, "--out", str(tmp_path / "m.npz")])
    assert e.value.code == 2


def test_train_of_a_module_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    status, _, err = run(*TRAIN[:1], "nomod:net", *TRAIN[2:], "--out", str(tmp_path / "m.npz"))
    assert (
        status == 1
        and err == "symnet train: cannot import module 'nomod' (from 'nomod:net'): No module named 'nomod'\n"
    )


@pytest.mark.parametrize("flag", ["--out", "--checkpoint"])
def test_train_checks_its_output_paths_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """Before: a typo in --out lost the whole run."""
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setattr(train_package, "fit", lambda *a, **k: pytest.fail("training started"))
    paths = {"--out": str(tmp_path / "m.npz"), "--checkpoint": str(tmp_path / "c.npz")}
    paths[flag] = str(tmp_path / "file" / "x.npz")
    status, _, err = run(*TRAIN, *[a for k, v in paths.items() for a in (k, v)])
    assert status == 1 and err == f"symnet train: cannot write {tmp_path / 'file' / 'x.npz'}: Not a directory\n"


def test_train_refuses_a_resume_with_another_learning_rate_unless_allowed(tmp_path: Path) -> None:
    paths = ["--out", str(tmp_path / "m.npz"), "--checkpoint", str(tmp_path / "c.npz")]
    assert run(*TRAIN, *paths)[0] == 0
    more = [a if a != "1" else "2" for a in TRAIN]  # a second epoch
    status, _, err = run(*more, *paths, "--lr", "0.01")
    assert status == 1 and "lr: saved 0.002, now 0.01" in err and "--allow-changes lr" in err
    status, _, err = run(*more, *paths, "--lr", "0.01", "--allow-changes", "lr")
    assert status == 0, err


def test_train_takes_several_chunk_widths_and_records_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    fit = train_package.fit
    monkeypatch.setattr(train_package, "fit", lambda *a, **k: (seen.append(k["chunk"]), fit(*a, **k))[1])
    paths = ["--out", str(tmp_path / "m.npz"), "--checkpoint", str(tmp_path / "c.npz")]
    assert run(*TRAIN, *paths, "--chunk", "40, 20")[0] == 0
    assert seen == [(40, 20)]
    more = [a if a != "1" else "2" for a in TRAIN]
    status, _, err = run(*more, *paths, "--chunk", "40")
    assert status == 1 and "chunk: saved [20, 40], now 40" in err


DEVICE_CHILD = """
import contextlib, io, json, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from symnet._src.app.cli import main

def blocked(signum, frame):
    raise TimeoutError("blocked")

signal.signal(signal.SIGALRM, blocked)
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    started = time.monotonic()
    signal.alarm(60)  # a read that blocks (a FIFO with no writer) is reported, not waited for
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(argv)
    except BaseException as e:
        status, err = repr(e), io.StringIO(repr(e))
    signal.alarm(0)
    out.append([status, err.getvalue(), time.monotonic() - started])
print(json.dumps(out))
"""

READ_FROM_FILES = [
    ["info", "{path}"],
    ["copy", "{path}", "/dev/null"],
    ["init", "{path}", "{out}"],
    ["xconfig", "{path}"],
    ["compute", "{path}", "ark:x.ark", "ark:y.ark"],
    ["train", "{path}", "--data", "builtin:hmm:6", "--out", "{out}"],
    ["lda", "{path}", "ark:x.ark", "{out}", "--alignments", "ark:y.ark"],
]


def test_models_and_configs_are_read_only_from_regular_files(tmp_path: Path) -> None:
    """Before: `symnet info /dev/zero` read until the system ran out of memory; a FIFO blocked. Every command
    that reads a model or config, on a device, a FIFO and a folder, in one child with an address-space limit."""
    import json
    import os
    import subprocess
    import sys

    os.mkfifo(tmp_path / "fifo")
    cases = [
        (kind, [a.format(path=path, out=tmp_path / "out.npz") for a in args])
        for kind, path in (("/dev/zero", "/dev/zero"), ("fifo", str(tmp_path / "fifo")), ("folder", str(tmp_path)))
        for args in READ_FROM_FILES
    ]
    proc = subprocess.run(
        [sys.executable, "-c", DEVICE_CHILD, json.dumps([argv for _, argv in cases])],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for (kind, argv), (status, err, seconds) in zip(
        cases, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True
    ):
        assert status == 1, (kind, argv, status, err[-1000:])
        assert "not a regular file" in err and argv[1] in err, (kind, argv, err[-1000:])
        assert seconds < 30, (kind, argv, seconds)  # refused, not blocked until the alarm (a FIFO's open waits)
