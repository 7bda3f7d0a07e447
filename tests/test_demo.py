"""The demo (`make demo`, quick settings): the TDNN beats the no-context baseline by a clear margin, stays
under the Bayes limit, and writes the training curves (PNG) and the models."""

from __future__ import annotations

import os

import numpy as np
import optax

from symnet import demo
from symnet.datasets import HmmTask
from symnet.train import checkpoint as ckpt


def test_quick_demo(tmp_path, capsys):
    out = tmp_path / "out"
    results = demo.main(["--quick", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "w = 3.5000" in printed  # the seed example fits the weight the data was made with

    tdnn, mlp, doc = results["TDNN"], results["no context (MLP)"], results["Kaldi doc example"]
    bayes, single = results["bayes"], results["single_frame"]
    # measured with the quick settings (150 training sequences, 3 epochs, width 64): MLP 0.512,
    # Kaldi doc example 0.704, TDNN 0.744, best single-frame classifier 0.584, Bayes limit 0.909
    assert tdnn > mlp + 0.15, results
    assert tdnn > single + 0.08, results  # better than any classifier without context can be
    assert mlp < single + 0.01, results  # the baseline cannot beat its own ceiling
    assert tdnn > doc, results  # more context helps
    assert max(tdnn, mlp, doc) < bayes, results
    assert 0.85 < bayes < 0.95

    png = out / "training.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    models = sorted(p for p in os.listdir(out) if p.endswith(".npz"))
    assert models == ["kaldi.npz", "no.npz", "tdnn.npz"]
    task = HmmTask.create(seed=0)
    for (name, net), file in zip(demo.networks(task.feat_dim, task.num_states, 64).items(),
                                 ["no.npz", "kaldi.npz", "tdnn.npz"]):
        loaded, _, position, _ = ckpt.load(str(out / file), net, optax.adam(2e-3).init(net.params))
        assert position.epoch == 3 and position.batch == 0, name
        assert all(np.isfinite(np.asarray(v)).all() for v in loaded.params.values())
        assert any(not np.array_equal(np.asarray(loaded.params[k]), np.asarray(net.params[k])) for k in net.params)
