"""`symnet train --objective` and `--frame-subsampling-factor`: CTC on the built-in task's phones, xent as
linear, chain (LF-MMI) with frame subsampling, an objective that does not fit the network refused."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

import symnet
from helpers import EXAMPLES
from symnet._src.app.cli import main
from symnet.kaldi import read_model


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


def chain_config(tmp_path: Path) -> Path:
    """The example TDNN without its log-softmax: 30 pdf pseudo log-likelihoods, as a chain model's output."""
    lines = [
        line
        for line in (EXAMPLES / "hmm-tdnn.config").read_text().splitlines()
        if "log-softmax" not in line or line.startswith("output-node")
    ]
    text = "\n".join(lines).replace("input=output.log-softmax objective=linear", "input=output.affine")
    path = tmp_path / "chain.config"
    path.write_text(text + "\n")
    return path


def test_xent_is_linear(tmp_path: Path) -> None:
    config = str(EXAMPLES / "hmm-tdnn.config")
    status, stdout, err = run("train", config, *COMMON, "--objective", "xent", "--out", str(tmp_path / "a.npz"))
    assert status == 0, err


def test_train_with_chain_and_subsampling(tmp_path: Path) -> None:
    """--objective chain with the pdf-bigram denominator of the training alignments, and with a den.fst."""
    out = tmp_path / "chain.npz"
    args = ["--objective", "chain", "--frame-subsampling-factor", "3", "--out"]
    status, stdout, err = run("train", str(chain_config(tmp_path)), *COMMON, *args, str(out))
    assert status == 0, err
    assert out.exists() and "accuracy" in stdout
    # the chain model exported as Kaldi's final.raw (symnet copy, as nnet3-copy) reads back with equal outputs
    status, _, err = run("copy", str(out), str(tmp_path / "final.raw"))
    assert status == 0, err
    trained, exported = symnet.load(out), read_model(tmp_path / "final.raw")
    x = np.random.default_rng(0).standard_normal((2, 40, 16)).astype(np.float32)
    ours = np.asarray(trained.compute(x))
    np.testing.assert_allclose(np.asarray(exported.network.compute(x)), ours, rtol=1e-5, atol=1e-5)
    # Kaldi's den.fst of the chain fixtures (chain-make-den-fst; 4 pdfs, of the output's 30) as the denominator
    den = EXAMPLES.parent / "tests" / "data" / "chain" / "den.fst"
    status, stdout, err = run(
        "train", str(chain_config(tmp_path)), *COMMON, *args[:-1], "--den-fst", str(den), "--out", str(out)
    )
    assert status == 0, err
    status, _, err = run("train", str(chain_config(tmp_path)), *COMMON, "--den-fst", str(den), "--out", str(out))
    assert status != 0 and "--den-fst: options of the chain objective; they need --objective chain" in err


CHAIN_TOPOLOGY = """<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4 5 6 7 8 9 10
</ForPhones>
<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
"""

RECIPE_XCONFIG = """input dim=16 name=input
relu-batchnorm-layer name=tdnn1 input=Append(-1,0,1) dim=32
tdnnf-layer name=tdnnf2 dim=32 bottleneck-dim=8 time-stride=3
prefinal-layer name=prefinal-chain input=tdnnf2 small-dim=16 big-dim=32
output-layer name=output include-log-softmax=false dim=20
prefinal-layer name=prefinal-xent input=tdnnf2 small-dim=16 big-dim=32
output-layer name=output-xent dim=20 learning-rate-factor=5.0
"""


def test_train_chain_as_kaldis_recipes(tmp_path: Path) -> None:
    """--topology (phone alignments: the built-in task's phones), --xent-output with --xent-regularize and
    --leaky-hmm-coefficient: Kaldi's chain recipe on an xconfig with output-xent."""
    (tmp_path / "topo").write_text(CHAIN_TOPOLOGY)
    (tmp_path / "net.xconfig").write_text(RECIPE_XCONFIG)
    chain = ["--objective", "chain", "--topology", str(tmp_path / "topo"), "--frame-subsampling-factor", "3"]
    extra = ["--xent-output", "output-xent", "--xent-regularize", "0.1", "--leaky-hmm-coefficient", "0.1"]
    out = tmp_path / "recipe.npz"
    status, stdout, err = run("train", str(tmp_path / "net.xconfig"), *COMMON, *chain, *extra, "--out", str(out))
    assert status == 0, err
    assert out.exists() and "accuracy" in stdout
    # output-xent without --xent-regularize is refused by name, and nothing is written
    bad = tmp_path / "bad.npz"
    status, _, err = run("train", str(tmp_path / "net.xconfig"), *COMMON, *chain, *extra[:2], "--out", str(bad))
    assert status != 0 and "give both or neither" in err and not bad.exists()
    status, _, err = run(
        "train", str(tmp_path / "net.xconfig"), *COMMON, "--topology", str(tmp_path / "topo"), "--out", str(bad)
    )
    assert status != 0 and "--topology: options of the chain objective" in err


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
