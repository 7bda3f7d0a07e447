"""`fit` reads a step's results while the next step computes: the order of dispatches and reads, and that the
checks still name the first failing step, report every good step before it once, and checkpoint exactly."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest

from symnet import Append, Input, Log, LogSoftmax, Network, Normal, Offset, ReLU, Weight, Zeros
from symnet._src.train import trainer as training
from symnet.datasets import HmmTask
from symnet.train import TrainingError, fit

FEAT, CLASSES, CHUNK, BATCH = 4, 6, 7, 3


def affine(x, fan_in, fan_out, name):
    w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
    return x @ w + Weight(Zeros(fan_out), name=f"{name}.b")


def network(log=False):
    x = Input("input", FEAT)
    if log:
        x = Log(x + 20.0)  # NaN where a feature is below -20
    h = ReLU(affine(Append(Offset(x, -1), x, Offset(x, 1)), 3 * FEAT, 8, "l1"))
    return Network(LogSoftmax(affine(h, 8, CLASSES, "out")), seed=0)


@pytest.fixture(scope="module")
def train():
    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=20, max_length=40
    )
    return task.sample(8, seed=1)


def run(net, data, **kw):
    kw = {"epochs": 2, "batch_size": BATCH, "chunk": CHUNK, "progress": False, **kw}
    return fit(net, data, optax.adam(1e-2), **kw)


def test_a_step_is_read_after_the_next_is_dispatched(train, monkeypatch):
    events = []
    step = training.Trainer.step

    def dispatch(self, *args):
        events.append("dispatch")
        return step(self, *args)

    monkeypatch.setattr(training.Trainer, "step", dispatch)
    result = run(network(), train, on_step=lambda s: events.append(f"read {s.step}"))
    per_epoch = result.history[0].step
    total = result.history[-1].step
    dispatches = [i for i, e in enumerate(events) if e == "dispatch"]
    reads = {int(e.split()[1]): i for i, e in enumerate(events) if e.startswith("read")}
    assert len(dispatches) == total and sorted(reads) == list(range(1, total + 1))
    for k in range(1, total + 1):
        assert dispatches[k - 1] < reads[k]  # read after its own dispatch
        if k % per_epoch:  # within an epoch, after the next step's dispatch; an epoch's last is read at its end
            assert reads[k] > dispatches[k]
        elif k < total:
            assert reads[k] < dispatches[k]


def test_the_first_non_finite_step_is_named_and_no_later_step_reported(train):
    # features below -20 in one sequence only: the first minibatch with a chunk of it is the first NaN loss
    features = [np.asarray(f).copy() for f in train.features]
    assert min(f.min() for f in features) > -20
    features[5] = features[5] * 0 - 50.0
    reported = []
    with pytest.raises(TrainingError, match=r"the loss is nan at step (\d+) ") as e:
        run(network(log=True), (features, list(train.labels)), on_step=reported.append, epochs=1)
    failed = int(str(e.value).split("at step ")[1].split()[0])
    assert [s.step for s in reported] == list(range(1, failed))
    assert all(np.isfinite(s.loss) for s in reported)
    assert "first non-finite value: Log node" in str(e.value)


def test_max_steps_and_checkpoints_stop_at_the_same_state(train, tmp_path):
    whole = run(network(), train, epochs=1)
    steps = whole.history[0].step
    stopped = run(network(), train, epochs=1, max_steps=steps - 1)
    path = str(tmp_path / "c.npz")
    run(network(), train, epochs=1, max_steps=steps - 1, checkpoint=path, checkpoint_every=1)
    resumed = run(network(), train, epochs=1, checkpoint=path)
    for name, value in whole.network.params.items():
        assert np.array_equal(np.asarray(resumed.network.params[name]), np.asarray(value)), name
        assert not np.array_equal(np.asarray(stopped.network.params[name]), np.asarray(value)), name
