"""fit(..., precision=...): training under bfloat16 and float16 policies, float16's dynamic loss scaling."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, Precision, ReLU, Weight, Zeros
from symnet.datasets import HmmTask
from symnet.train import LossScaled, TrainingError, fit

FEAT, CLASSES = 4, 6


def affine(x, fan_in, fan_out, name):
    w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
    return x @ w + Weight(Zeros(fan_out), name=f"{name}.b")


def tdnn():
    x = Input("input", FEAT)
    h = ReLU(affine(Append(Offset(x, -1), x, Offset(x, 1)), 3 * FEAT, 16, "l1"))
    return Network(LogSoftmax(affine(Append(Offset(h, -2), h, Offset(h, 2)), 48, CLASSES, "out")), seed=0)


@pytest.fixture(scope="module")
def data():
    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=20, max_length=40
    )
    return task.sample(8, seed=1)


def run(train, **kw):
    kw = {"epochs": 3, "batch_size": 3, "chunk": 7, "progress": False, **kw}
    return fit(tdnn(), train, optax.adam(1e-2), **kw)


@pytest.mark.parametrize("policy", ["bfloat16", "float16"])
def test_fit_with_a_16_bit_policy_trains_and_keeps_float32_parameters(data, policy):
    result = run(data, precision=policy)
    losses = [h.train_loss for h in result.history]
    assert losses[-1] < losses[0] - 0.1
    assert all(v.dtype == jnp.float32 for v in result.network.params.values())
    reference = [h.train_loss for h in run(data).history]
    assert abs(losses[-1] - reference[-1]) < 0.1  # the same run in float32 ends near it
    assert isinstance(result.opt_state, LossScaled) == (policy == "float16")


def test_float16_loss_scaling_skips_an_overflowing_step_and_halves_the_scale(data):
    policy = Precision(compute="float16", loss_scale=2.0**40)  # the derivative times 2^40 overflows float16
    first = run(data, precision=policy, max_steps=1)
    assert isinstance(first.opt_state, LossScaled)
    assert float(first.opt_state.scale) == 2.0**39 and int(first.opt_state.good_steps) == 0
    start = tdnn().params
    assert all(np.array_equal(np.asarray(first.network.params[k]), np.asarray(start[k])) for k in start)
    assert int(first.opt_state.inner[0].count) == 0  # adam's state did not take the step either
    later = run(data, precision=policy)  # halved until the scaled backward fits, then it trains
    assert float(later.opt_state.scale) <= 2.0**16 and int(later.opt_state.inner[0].count) > 0
    losses = [h.train_loss for h in later.history]
    assert losses[-1] < losses[0]


def test_the_scale_doubles_after_growth_interval_good_steps(data):
    result = run(data, precision=Precision(compute="float16", loss_scale=4.0, growth_interval=2), max_steps=5)
    assert float(result.opt_state.scale) == 16.0 and int(result.opt_state.good_steps) == 1


def test_a_resumed_float16_run_continues_its_loss_scale(data, tmp_path):
    policy = Precision(compute="float16", loss_scale=2.0**30, growth_interval=3)
    whole = run(data, precision=policy)
    path = tmp_path / "run.ckpt"
    run(data, precision=policy, checkpoint=path, checkpoint_every=1, max_steps=9)
    resumed = run(data, precision=policy, checkpoint=path)
    assert float(resumed.opt_state.scale) == float(whole.opt_state.scale)
    assert int(resumed.opt_state.good_steps) == int(whole.opt_state.good_steps)
    for k, v in whole.network.params.items():
        np.testing.assert_array_equal(np.asarray(resumed.network.params[k]), np.asarray(v))


def test_a_resume_under_another_policy_is_refused(data, tmp_path):
    from symnet.train import CheckpointError

    path = tmp_path / "run.ckpt"
    run(data, precision="bfloat16", checkpoint=path, checkpoint_every=1, max_steps=2)
    with pytest.raises(CheckpointError, match="precision"):
        run(data, checkpoint=path)


def test_a_bad_policy_is_a_training_error():
    with pytest.raises(TrainingError, match="precision"):
        fit(tdnn(), ([], []), optax.sgd(0.1), precision="half")


def test_a_run_with_bfloat16_parameters_resumes_from_its_checkpoint(data, tmp_path):
    """Before: the first checkpoint held '<V2' arrays that its own resume refused ("numbers only")."""
    policy = Precision(params="bfloat16", compute="bfloat16")
    settings = {"precision": policy, "checkpoint_every": 2, "epochs": 2}
    whole = run(data, **settings, checkpoint=str(tmp_path / "a.ckpt"))
    assert {str(v.dtype) for v in whole.network.params.values()} == {"bfloat16"}
    part = str(tmp_path / "b.ckpt")
    run(data, **settings, checkpoint=part, max_steps=3)
    resumed = run(data, **settings, checkpoint=part)
    for name, value in whole.network.params.items():
        np.testing.assert_array_equal(np.asarray(resumed.network.params[name]), np.asarray(value), err_msg=name)
