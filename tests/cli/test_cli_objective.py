"""`symnet train --objective` and `--frame-subsampling-factor`: CTC on the built-in task's phones, xent as
linear, chain refused with a clear message, an objective that does not fit the network refused."""

from __future__ import annotations

import io
from pathlib import Path

from helpers import EXAMPLES
from symnet.cli import main


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def ctc_config(tmp_path: Path) -> Path:
    """The example TDNN with 11 outputs: blank and the built-in task's 10 phones."""
    text = (EXAMPLES / "hmm-tdnn.config").read_text().replace("output-dim=30", "output-dim=11")
    path = tmp_path / "ctc.config"
    path.write_text(text.replace("dim=30", "dim=11"))
    return path


COMMON = ["--data", "builtin:hmm:6", "--epochs", "1", "--batch-size", "4", "--chunk", "30", "--quiet"]


def test_train_with_ctc_and_subsampling(tmp_path: Path) -> None:
    out = tmp_path / "model.npz"
    status, stdout, err = run(
        "train",
        str(ctc_config(tmp_path)),
        *COMMON,
        "--objective",
        "ctc",
        "--frame-subsampling-factor",
        "3",
        "--out",
        str(out),
    )
    assert status == 0, err
    assert out.exists() and "accuracy" in stdout


def test_xent_is_linear_and_chain_is_refused(tmp_path: Path) -> None:
    config = str(EXAMPLES / "hmm-tdnn.config")
    status, stdout, err = run("train", config, *COMMON, "--objective", "xent", "--out", str(tmp_path / "a.npz"))
    assert status == 0, err
    status, _, err = run("train", config, *COMMON, "--objective", "chain", "--out", str(tmp_path / "b.npz"))
    assert status != 0 and "chain (LF-MMI) objective is not in this version" in err
    assert not (tmp_path / "b.npz").exists()


def test_ctc_on_an_output_of_the_wrong_dim_is_an_error(tmp_path: Path) -> None:
    # the 30-state output with CTC on 10 phones would train, but labels must fit: here they do (1..10 < 30);
    # a 5-dim output cannot hold phone 10
    text = (EXAMPLES / "hmm-tdnn.config").read_text().replace("dim=30", "dim=5")
    config = tmp_path / "small.config"
    config.write_text(text)
    status, _, err = run("train", str(config), *COMMON, "--objective", "ctc", "--out", str(tmp_path / "c.npz"))
    assert status != 0 and "out of range for output 'output' of dim 5" in err
    status, _, err = run(
        "train",
        str(ctc_config(tmp_path)),
        *COMMON,
        "--objective",
        "ctc",
        "--frame-subsampling-factor",
        "7",
        "--out",
        str(tmp_path / "d.npz"),
    )
    assert status != 0 and "multiples of it" in err
