"""`FitOptions`: fit's settings as one checked object; keywords are shorthand for its fields."""

from __future__ import annotations

import attrs
import numpy as np
import optax
import pytest

from helpers import nets
from symnet import Input
from symnet.train import FitOptions, TrainingError, fit


def data(n=6, length=9, dim=3, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    features = [rng.normal(size=(length, dim)).astype(np.float32) for _ in range(n)]
    labels = [rng.integers(0, classes, size=length) for _ in range(n)]
    return features, labels


def tdnn():
    return nets.tdnn(Input("input", 3), hidden=5, out=4, log_softmax=True, seed=1)


def test_options_object_equals_the_keywords_and_is_recorded():
    train = data()
    options = FitOptions(epochs=2, batch_size=3, chunk=5, seed=7, progress=False)
    by_object = fit(tdnn(), train, optax.sgd(0.1), options)
    by_keywords = fit(tdnn(), train, optax.sgd(0.1), epochs=2, batch_size=3, chunk=5, seed=7, progress=False)
    for name, value in by_object.network.values.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(by_keywords.network.values[name]))
    assert by_object.options == options and by_keywords.options == options
    assert [h.step for h in by_object.history] == [h.step for h in by_keywords.history]


def test_keywords_beside_options_replace_its_fields():
    options = FitOptions(epochs=3, batch_size=3, chunk=5, progress=False)
    result = fit(tdnn(), data(), optax.sgd(0.1), options, epochs=1, seed=2)
    assert result.options == attrs.evolve(options, epochs=1, seed=2)
    assert len(result.history) == 1
    assert options.epochs == 3  # the caller's object is not changed


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"epochs": 1.5}, "epochs must be an integer >= 0"),
        ({"chunk": (4, 0)}, "chunk must be an integer >= 1 or a sequence"),
        ({"objective": "hinge"}, "hinge"),
        ({"objective": 3}, "objective must be a string"),
        ({"checkpoint": ""}, "checkpoint must be a file path"),
        ({"on_step": 3}, "on_step must be a function or None"),
        ({"allow_changes": "lr"}, "allow_changes must be a sequence of field names"),
        ({"rules": "kaldi"}, "rules must be None, True, False or kaldi_rules"),
        ({"frame_subsampling_factor": 0}, "frame_subsampling_factor must be an integer >= 1"),
        ({"max_steps": -1}, "max_steps must be an integer >= 0 or None"),
    ],
)
def test_bad_settings_are_named_before_any_work(settings, message):
    with pytest.raises(TrainingError, match=message):
        FitOptions(**settings)
    with pytest.raises(TrainingError, match=message):
        fit(tdnn(), data(), optax.sgd(0.1), **settings)


def test_an_unknown_setting_is_named():
    with pytest.raises(TrainingError, match=r"fit has no setting 'epoch'; it has \[.*'epochs'"):
        fit(tdnn(), data(), optax.sgd(0.1), epoch=2)
    with pytest.raises(TrainingError, match="options must be a symnet.train.FitOptions, got dict"):
        fit(tdnn(), data(), optax.sgd(0.1), {"epochs": 2})


def test_lowering_reaches_every_compiled_step_and_trains_the_same(monkeypatch):
    """fit(lowering=...) is compile's lowering for the training and validation steps: the fused and the plain
    scan train an LSTM to the same parameters."""
    from helpers.blstm import network, sequences
    from symnet._src.train import trainer as training

    seen = []
    init = training.Trainer.__init__
    monkeypatch.setattr(training.Trainer, "__init__", lambda self, *a, **k: (init(self, *a, **k), seen.append(self))[0])
    train = sequences([7, 5, 9, 6], seed=1)
    results = {}
    for lowering in ("fused", "plain"):
        results[lowering] = fit(
            network(), train, optax.sgd(0.1), valid=train, epochs=2, batch_size=2, chunk=4, lowering=lowering,
            progress=False,
        )  # fmt: skip
        steps = [s for s in seen[-1].computation.steps if hasattr(s, "lowering")]
        assert steps and {s.lowering for s in steps} == {lowering}
        assert f"lowering={lowering!r}" in seen[-1].test_computation.explain()
    for name, value in results["fused"].network.params.items():
        np.testing.assert_allclose(np.asarray(value), np.asarray(results["plain"].network.params[name]), atol=2e-5)
    assert results["fused"].history[-1].valid_loss == pytest.approx(results["plain"].history[-1].valid_loss, 1e-4)
    with pytest.raises(TrainingError, match="lowering='scan': use one of 'auto', 'fused', 'plain'"):
        FitOptions(lowering="scan")
