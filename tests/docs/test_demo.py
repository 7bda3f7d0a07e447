"""The demo (`make demo`, as a newcomer runs it): the TDNN beats the no-context baseline by a clear margin and
stays under the Bayes limit, every curve has a point per epoch, the BLSTM's validation accuracy is what
`Network.compute` gives, the Kaldi model read back computes what symnet does, and it writes the training curves
(PNG) and the models; without matplotlib (the optional `plot` extra) it says how to install it."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from helpers import REPO
from symnet import load
from symnet._src.app import demo
from symnet.datasets import HmmTask, accuracy
from symnet.kaldi import parse_network, read_model


@pytest.mark.slow
def test_the_demo(tmp_path, capsys):
    out = tmp_path / "out"
    results = demo.main(["--out", str(out)])
    printed = capsys.readouterr().out
    assert "w = 3.5000" in printed  # the seed example fits the weight the data was made with
    settings = demo.QUICK
    # progress as it goes: every epoch of every network is printed
    assert len(re.findall(r"epoch \d+/\d+: valid accuracy", printed)) == 3 * settings.epochs + settings.blstm_epochs

    tdnn, mlp, doc = results["TDNN"], results["no context (MLP)"], results["Kaldi doc example"]
    bayes, single = results["bayes"], results["single_frame"]
    # the margins leave room: the TDNN is about 0.3 above the MLP and 0.28 above the best single-frame classifier
    assert tdnn > mlp + 0.2, results
    assert tdnn > single + 0.2, results  # far better than any classifier without context can be
    assert mlp < single + 0.01, results  # the baseline cannot beat its own ceiling
    assert tdnn > doc, results  # more context helps
    assert max(tdnn, mlp, doc) < bayes, results
    assert 0.85 < bayes < 0.95
    assert results["BLSTM"] > single + 0.15 and results["BLSTM"] < bayes, results
    assert results["kaldi_difference"] < 1e-4  # the .raw read back, run as nnet3-compute

    png = out / "training.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    files = sorted(p for p in os.listdir(out) if p != "training.png")
    assert files == ["blstm.npz", "kaldi-doc.npz", "kaldi-doc.raw", "mlp.npz", "mlp.raw", "tdnn.npz", "tdnn.raw"]
    task = HmmTask.create(seed=0)
    # fit's validation of the BLSTM (whole sequences, each chunk at its width) is Network.compute's accuracy
    blstm = load(str(out / "blstm.npz"))  # a Network saved from Python loads as one
    valid = task.sample(settings.valid, seed=2)
    computed = accuracy([np.asarray(o) for o in blstm.compute(list(valid.features))], valid)
    assert computed == pytest.approx(results["BLSTM"], abs=1e-6)
    for seed, (name, config) in enumerate(demo.configs(task.feat_dim, task.num_states, settings.width).items(), 1):
        initial = parse_network(config, seed=seed)
        base = out / demo.FILES[name]
        symnet_model = load(str(base) + ".npz")
        kaldi_model = read_model(str(base) + ".raw").network
        assert symnet_model.structure == initial.structure, name
        for k in initial.params:  # both files hold the same trained parameters
            np.testing.assert_array_equal(np.asarray(symnet_model.params[k]), np.asarray(kaldi_model.params[k]))
            assert np.isfinite(np.asarray(symnet_model.params[k])).all()
        assert any(
            not np.array_equal(np.asarray(symnet_model.params[k]), np.asarray(initial.params[k]))
            for k in initial.params
        ), name  # trained, not the initial values


def test_demo_without_matplotlib_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    path = tmp_path / "training.png"
    assert demo.plot_curves({"TDNN": [0.5, 0.6]}, 0.55, 0.9, str(path)) is False
    assert "pip install 'symnet[plot]'" in capsys.readouterr().out
    assert not path.exists()


def test_plot_curves_writes_a_png(tmp_path):
    path = tmp_path / "training.png"
    assert demo.plot_curves({"TDNN": [0.5, 0.6], "MLP": [0.4, 0.45]}, 0.55, 0.9, str(path)) is True
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_the_demo_imports_matplotlib():
    """matplotlib is the optional `plot` extra: no other module of the package may need it."""
    importers = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "symnet").rglob("*.py")
        if re.search(r"^\s*(import|from)\s+matplotlib\b", p.read_text(), flags=re.M)
    )
    assert importers == ["symnet/_src/app/demo.py"]
