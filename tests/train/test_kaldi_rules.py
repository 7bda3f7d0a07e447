"""Kaldi's training-time rules (`symnet.train.kaldi_rules`) against numpy transcriptions of Kaldi's formulas.

The references below are written from Kaldi's source (nnet-training.cc NnetTrainer::TrainInternal,
nnet-utils.cc ApplyL2Regularization, UpdateNnetWithMaxChange, ScaleBatchnormStats, ConstrainOrthonormal
and ConstrainOrthonormalInternal, nnet-simple-component.cc's Update functions, and
steps/libs/nnet3/train/dropout_schedule.py), in float64, never from symnet's code.
"""

from __future__ import annotations

import functools
import io
import re
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from symnet import natural_gradient
from symnet._src.core import rng
from symnet._src.core.index import IndexSet
from symnet._src.core.layer import evolve
from symnet._src.core.walk import walk
from symnet._src.train.loop import zero_batchnorm_stats
from symnet._src.train.rules import zero_repair_statistics
from symnet.components import GeneralDropoutComponent, PerElementScaleComponent, batchnorm_stats_updates
from symnet.engine import ComputationRequest, compile
from symnet.kaldi import read_network
from symnet.train import (
    DropoutSchedule,
    KaldiRules,
    KaldiRulesWarning,
    TrainingError,
    component_rules,
    fit,
    kaldi_rules,
    make_chunks,
    objective,
)

CONFIG = """
input-node name=input dim=6
component name=lin type=LinearComponent input-dim=18 output-dim=4 orthonormal-constraint=-1.0 max-change=0.75 l2-regularize=0.01 use-natural-gradient=false
component-node name=lin component=lin input=Append(Offset(input, -1), input, Offset(input, 1))
component name=aff type=AffineComponent input-dim=4 output-dim=8 max-change=0.5 l2-regularize=0.02 learning-rate-factor=0.5
component-node name=aff component=aff input=lin
component name=relu type=RectifiedLinearComponent dim=8
component-node name=relu component=relu input=aff
component name=bn type=BatchNormComponent dim=8
component-node name=bn component=bn input=relu
component name=drop type=GeneralDropoutComponent dim=8 dropout-proportion=0.0 continuous=true
component-node name=drop component=drop input=bn
component name=out type=NaturalGradientAffineComponent input-dim=8 output-dim=5 orthonormal-constraint=1.0 max-change=1.5
component-node name=out component=out input=drop
component name=sm type=LogSoftmaxComponent dim=5
component-node name=sm component=sm input=out
output-node name=output input=sm objective=linear
"""  # noqa: E501

#: (parameters, learning-rate-factor, max-change, l2-regularize) of each updatable component of CONFIG.
COMPONENTS = [
    (("lin.params",), 1.0, 0.75, 0.01),
    (("aff.linear_params", "aff.bias_params"), 0.5, 0.5, 0.02),
    (("out.linear_params", "out.bias_params"), 1.0, 1.5, 0.0),
]


def kaldi_net(text: str = CONFIG, seed: int = 0):
    return read_network(io.StringIO(text), seed=seed)


def quiet_rules(net, *args, **kwargs) -> KaldiRules:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KaldiRulesWarning)  # natural gradient of `out` is off
        return kaldi_rules(net, *args, **kwargs)


def random_like(params, seed, scale=1.0):
    r = np.random.default_rng(seed)
    return {k: (scale * r.normal(size=np.shape(v))).astype(np.float32) for k, v in params.items()}


# ----- the update: Update, ApplyL2Regularization, UpdateNnetWithMaxChange -----------------------------------


def kaldi_minibatch(params, grads_mean, *, frames, sequences, lr, l2_factor, max_param_change, momentum, kept):
    """One minibatch of NnetTrainer::TrainInternal, in float64. Returns (new params, delta_nnet kept after it).

    `grads_mean` is the derivative of the mean loss over `frames` frames; Kaldi's components add
    `learning_rate_ * d(objective)/d(params)` to delta_nnet, the objective being the summed
    log-likelihood, i.e. `-frames * grads_mean`.
    """
    delta = {}
    for names, factor, _, l2 in COMPONENTS:
        rate = lr * factor  # SetUnderlyingLearningRate: lr times the learning-rate-factor
        for n in names:
            d = kept[n] if kept is not None else np.zeros_like(params[n], dtype=np.float64)
            d = d + rate * (-frames * grads_mean[n].astype(np.float64))
            # ApplyL2Regularization(nnet, GetNumNvalues * l2_regularize_factor, delta): scale -2 * that * lr * l2.
            d = d + (-2.0 * (sequences * l2_factor) * rate * l2) * params[n].astype(np.float64)
            delta[n] = d
    scale = 1.0 - momentum
    per_component, squared = [], 0.0
    for names, _, max_change, _ in COMPONENTS:
        dot = sum(float(np.sum(delta[n] * delta[n])) for n in names)
        if max_change != 0.0 and np.sqrt(dot) * abs(scale) > max_change:
            factor = max_change / (np.sqrt(dot) * abs(scale))
        else:
            factor = 1.0
        per_component.append(factor)
        squared += factor**2 * dot
    param_delta = np.sqrt(squared) * abs(scale)
    if max_param_change != 0.0 and param_delta > max_param_change:
        scale *= max_param_change / param_delta
    new = {k: v.astype(np.float64) for k, v in params.items()}
    for (names, *_), factor in zip(COMPONENTS, per_component):
        for n in names:
            new[n] = new[n] + scale * factor * delta[n]
    return new, {k: momentum * v for k, v in delta.items()}


@pytest.mark.parametrize(
    ("lr", "max_param_change", "momentum"),
    [(1e-4, 2.0, 0.0), (5e-3, 2.0, 0.0), (5e-3, 0.5, 0.0), (5e-3, 0.0, 0.0), (2e-3, 2.0, 0.5)],
    ids=["no-limit-active", "max-change", "max-param-change", "no-global-limit", "momentum"],
)
def test_update_is_kaldis(lr, max_param_change, momentum):
    net = kaldi_net()
    rules = quiet_rules(net, lr, max_param_change=max_param_change, l2_regularize_factor=0.5, momentum=momentum)
    params = {k: np.asarray(v) for k, v in net.params.items()}
    state = rules.init(net.params)
    kept = None
    expect = {k: v.astype(np.float64) for k, v in params.items()}
    got = dict(net.params)
    update = jax.jit(lambda g, s, p, f, n: rules.update(g, s, p, frames=f, sequences=n))
    for step in range(3):
        grads = random_like(params, step)
        frames, sequences = 64.0 + step, 8.0 - step
        expect, kept = kaldi_minibatch(
            {k: np.asarray(v) for k, v in got.items()},
            grads,
            frames=frames,
            sequences=sequences,
            lr=lr,
            l2_factor=0.5,
            max_param_change=max_param_change,
            momentum=momentum,
            kept=kept,
        )
        updates, state = update(grads, state, got, frames, sequences)
        got = optax.apply_updates(got, updates)
        for k in params:
            np.testing.assert_allclose(np.asarray(got[k]), expect[k], rtol=2e-5, atol=1e-7, err_msg=k)


def test_the_limits_are_active_where_the_cases_say():
    """The cases above exercise what they are named after (per-component and global limits)."""
    net = kaldi_net()
    params = {k: np.asarray(v) for k, v in net.params.items()}
    grads = random_like(params, 0)
    for lr, mpc, component_limited, global_limited in ((1e-4, 2.0, False, False), (5e-3, 2.0, True, False)):
        rules = quiet_rules(net, lr, max_param_change=mpc)
        updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=64.0, sequences=8.0)
        norms = [np.sqrt(sum(float(np.sum(np.square(updates[n]))) for n in names)) for names, *_ in COMPONENTS]
        limited = [abs(norm - mc) < 1e-4 for norm, (_, _, mc, _) in zip(norms, COMPONENTS)]
        assert any(limited) == component_limited
        assert (abs(np.sqrt(sum(n * n for n in norms)) - mpc) < 1e-4) == global_limited
    rules = quiet_rules(net, 5e-3, max_param_change=0.5)
    updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=64.0, sequences=8.0)
    total = np.sqrt(sum(float(np.sum(np.square(u))) for u in updates.values()))
    assert abs(total - 0.5) < 1e-5


def test_an_infinite_change_is_not_applied():
    """UpdateNnetWithMaxChange: 'Infinite parameter change, will not apply.' (and delta_nnet is zeroed) where
    the global change is infinite; with a per-component max-change the component's factor is 0 and its
    change 0 * inf, NaN, as in Kaldi (fit then stops, naming the parameter)."""
    net = kaldi_net(CONFIG.replace("output-dim=8 max-change=0.5", "output-dim=8"))
    rules = quiet_rules(net, 1e-3, momentum=0.5)
    grads = random_like(net.params, 1)
    grads["aff.bias_params"][0] = np.inf
    updates, state = rules.update(grads, rules.init(net.params), net.params, frames=10.0, sequences=2.0)
    assert all(not np.any(np.asarray(u)) for u in updates.values())
    assert all(not np.any(np.asarray(d)) for d in state.delta.values())
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=10.0, sequences=2.0)
    assert np.isnan(np.asarray(updates["aff.bias_params"][0]))
    assert np.isfinite(np.asarray(updates["lin.params"])).all()


def test_stored_learning_rates_as_nnet3_train_uses_them():
    """Without a learning rate, each component's stored one (learning-rate=, as an nnet3-init model has it;
    the factor is not applied to it, as Kaldi applies it only in SetUnderlyingLearningRate)."""
    text = CONFIG.replace("max-change=0.5 l2-regularize=0.02", "max-change=0.5 l2-regularize=0.02 learning-rate=0.004")
    net = kaldi_net(text)
    rules = quiet_rules(net, max_param_change=0.0)
    grads = random_like(net.params, 2, scale=1e-3)
    updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=1.0, sequences=0.0)
    for name, rate in (("aff.bias_params", 0.004), ("lin.params", 0.001)):  # 0.001: Kaldi's default
        np.testing.assert_allclose(np.asarray(updates[name]), -rate * grads[name], rtol=1e-5)


def test_the_l2_term_needs_the_number_of_sequences():
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    with pytest.raises(TrainingError, match="sequences="):
        rules.update(net.params, rules.init(net.params), net.params, frames=10.0)


def test_around_your_optimizer():
    """optimizer=: its update of the gradient plus the l2 term (per frame), times each learning-rate factor,
    then max-change as Kaldi's."""
    net = kaldi_net()
    params = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    grads = random_like(params, 3, scale=0.01)
    rules = quiet_rules(net, optimizer=optax.sgd(0.1), max_param_change=0.0)
    updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=50.0, sequences=5.0)
    for names, factor, max_change, l2 in COMPONENTS:
        d = {n: factor * -0.1 * (grads[n] + 2.0 * 5.0 * l2 * params[n] / 50.0) for n in names}
        norm = np.sqrt(sum(np.sum(v * v) for v in d.values()))
        s = max_change / norm if norm > max_change else 1.0
        for n in names:
            np.testing.assert_allclose(np.asarray(updates[n]), s * d[n], rtol=1e-5, atol=1e-8, err_msg=n)


# ----- ConstrainOrthonormal -------------------------------------------------------------------------------------


def kaldi_constrain(matrix, scale):
    """ConstrainOrthonormal's step for one parameter matrix, in float64."""
    m = np.asarray(matrix, np.float64)
    transpose = m.shape[0] > m.shape[1]
    if transpose:
        m = m.T
    p = m @ m.T
    update_speed = 0.125
    if scale < 0.0:
        trace_p, trace_p_p = np.trace(p), np.trace(p @ p.T)
        if trace_p < 1.0e-15:
            return np.asarray(matrix, np.float64)
        scale = np.sqrt(trace_p_p / trace_p)
        ratio = trace_p_p * p.shape[0] / (trace_p * trace_p)
        if ratio > 1.02:
            update_speed *= 0.5
            if ratio > 1.1:
                update_speed *= 0.5
    p = p - scale * scale * np.eye(p.shape[0])
    alpha = update_speed / (scale * scale)
    m = m + (-4.0 * alpha) * (p @ m)
    return m.T if transpose else m


def with_singular_values(shape, values, seed):
    r = np.random.default_rng(seed)
    u, _ = np.linalg.qr(r.normal(size=(shape[0], shape[0])))
    v, _ = np.linalg.qr(r.normal(size=(shape[1], shape[1])))
    s = np.zeros(shape)
    k = min(shape)
    s[np.arange(k), np.arange(k)] = values
    return (u @ s @ v.T).astype(np.float32)


@pytest.mark.parametrize(
    ("values", "band"),
    [
        ([1.0, 1.01, 0.99, 1.0], (1.0, 1.02)),
        ([1.0, 1.2, 0.9, 1.0], (1.02, 1.1)),
        ([0.5, 1.5, 1.0, 2.0], (1.1, np.inf)),
        ([0.0, 0.0, 0.0, 0.0], None),
    ],
    ids=["near", "ratio-above-1.02", "ratio-above-1.1", "zero"],
)
def test_constrain_orthonormal_is_kaldis(values, band):
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    params = dict(net.params)
    params["lin.params"] = with_singular_values((4, 18), np.array(values) * 0.7, 0)  # floating: -1.0
    params["out.linear_params"] = with_singular_values((5, 8), np.array(values + [1.0]), 1)  # fixed: 1.0
    if band is not None:  # the case is in the band of Kaldi's ratio it is named after
        p = params["lin.params"].astype(np.float64) @ params["lin.params"].T.astype(np.float64)
        ratio = np.trace(p @ p) * 4 / np.trace(p) ** 2
        assert band[0] <= ratio < band[1]
    got = rules.constrain(params, None)
    np.testing.assert_allclose(np.asarray(got["lin.params"]), kaldi_constrain(params["lin.params"], -1.0), atol=2e-6)
    out = np.asarray(got["out.linear_params"])
    np.testing.assert_allclose(out, kaldi_constrain(params["out.linear_params"], 1.0), atol=2e-6)
    np.testing.assert_array_equal(np.asarray(got["aff.linear_params"]), np.asarray(params["aff.linear_params"]))


def test_constrain_a_tall_matrix_through_its_transpose():
    text = CONFIG.replace("output-dim=4 orthonormal-constraint=-1.0", "output-dim=4 orthonormal-constraint=0.5")
    text = text.replace(
        "input-dim=4 output-dim=8 max-change=0.5", "input-dim=4 output-dim=8 orthonormal-constraint=2.0"
    )
    net = kaldi_net(text)
    rules = quiet_rules(net, 1e-3)
    tall = with_singular_values((8, 4), np.array([1.9, 2.1, 2.0, 1.8]), 2)
    got = rules.constrain({**net.params, "aff.linear_params": tall}, None)
    np.testing.assert_allclose(np.asarray(got["aff.linear_params"]), kaldi_constrain(tall, 2.0), atol=2e-6)
    # Repeated, the singular values approach the constraint (the point of it).
    m = jnp.asarray(tall)
    for _ in range(10):
        m = rules.constrain({**net.params, "aff.linear_params": m}, None)["aff.linear_params"]
    np.testing.assert_allclose(np.linalg.svd(np.asarray(m), compute_uv=False), 2.0, atol=1e-4)


def test_constrain_on_one_minibatch_in_four_at_random():
    """ConstrainOrthonormal skips a component unless RandInt(0, 3) == 0: each one on its own draw."""
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    params = dict(net.params)
    constrain = jax.jit(rules.constrain)
    done = {"lin.params": 0, "out.linear_params": 0}
    both = 0
    for i in range(400):
        got = constrain(params, jax.random.PRNGKey(i))
        moved = {n: not np.array_equal(np.asarray(got[n]), np.asarray(params[n])) for n in done}
        for n, m in moved.items():
            done[n] += m
        both += all(moved.values())
    for n, count in done.items():
        assert 70 <= count <= 130, (n, count)  # 100 expected; binomial sd 8.7
    assert both < 50  # independent draws: about 25
    again = constrain(params, jax.random.PRNGKey(3))
    first = constrain(params, jax.random.PRNGKey(3))
    assert all(np.array_equal(np.asarray(again[n]), np.asarray(first[n])) for n in done)


def test_orthonormal_constraint_where_kaldi_applies_none_is_an_error():
    text = CONFIG.replace(
        "component-node name=bn component=bn input=relu",
        "component name=scale type=PerElementScaleComponent dim=8 max-change=0.5\n"
        "component-node name=scale component=scale input=relu\n"
        "component-node name=bn component=bn input=scale",
    )
    net = kaldi_net(text)
    assert [r.name for r in component_rules(net) if r.kaldi_type] == ["lin", "aff", "scale", "out"]

    def add_option(layer):
        if isinstance(layer, PerElementScaleComponent):
            return evolve(layer, options=tuple(layer.options) + (("orthonormal-constraint", 1.0),))
        return layer

    with pytest.raises(TrainingError, match=r"'scale' \(PerElementScaleComponent\): orthonormal-constraint"):
        quiet_rules(net.rewrite(add_option), 1e-3)


# ----- batch-norm statistics ------------------------------------------------------------------------------------


def test_batchnorm_stats_scaled_after_every_minibatch():
    """ScaleBatchnormStats(0.8): count, sum and sum of squares times 0.8, so mean and variance stay."""
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    state = {**net.state, "bn.count": jnp.asarray(10.0), "bn.stats_mean": jnp.arange(8.0)}
    params, new = rules.after_update(net.params, state, jax.random.PRNGKey(0))
    assert float(new["bn.count"]) == pytest.approx(8.0)
    np.testing.assert_array_equal(np.asarray(new["bn.stats_mean"]), np.arange(8.0))
    _, same = quiet_rules(net, 1e-3, batchnorm_stats_scale=1.0).after_update(net.params, state, None)
    assert float(same["bn.count"]) == 10.0


# ----- the dropout schedule -------------------------------------------------------------------------------------


def test_dropout_schedule_as_kaldis_self_test():
    """The cases of dropout_schedule.py's _self_test, with its expected values."""
    s = DropoutSchedule.parse("*=0.0,0.5,0.0 lstm.*=0.0,0.3@0.75,0.0")
    for fraction, expect in ((0.75, [0.25, 0.3]), (0.5, [0.5, 0.2]), (0.25, [0.25, 0.1])):
        got = s.proportions(fraction)
        assert [p for p, _ in got] == ["*", "lstm.*"]
        np.testing.assert_allclose([v for _, v in got], expect, atol=1e-8)
    s = DropoutSchedule.parse("0.0,0.3,0.0")
    for fraction, expect in ((0.5, 0.3), (0.0, 0.0), (1.0, 0.0), (0.25, 0.15)):
        assert s.proportions(fraction) == [("*", pytest.approx(expect, abs=1e-8))]
    s = DropoutSchedule.parse("0.0,0.5@0.25,0.0,0.6@0.75,0.0")
    assert s.parts[0][1] == ((0.0, 0.0), (0.25, 0.5), (0.5, 0.0), (0.75, 0.6), (1.0, 0.0))
    assert s.proportions(0.25)[0][1] == pytest.approx(0.5)
    assert s.proportions(0.1)[0][1] == pytest.approx(0.2)
    s = DropoutSchedule.parse("lstm.*=0.0,0.3,0.0@0.75,1.0")
    assert s.parts == (("lstm.*", ((0.0, 0.0), (0.5, 0.3), (0.75, 0.0), (1.0, 1.0))),)
    for fraction, expect in ((0.25, 0.15), (0.5, 0.3), (0.9, 0.6)):
        assert s.proportions(fraction)[0][1] == pytest.approx(expect, abs=1e-8)


def test_dropout_schedule_edges():
    s = DropoutSchedule.parse("0.1,0.5@0.2,0.7@0.2,0")  # two points at one fraction: the later one from there on
    assert s.proportions(0.2)[0][1] == pytest.approx(0.7)
    assert s.proportions(0.1)[0][1] == pytest.approx(0.3)
    assert s.proportions(1.5)[0][1] == 0.0  # past the end counts as the end
    names = ["tdnn1.dropout", "lstm1.dropout", "lstm2.dm"]
    s = DropoutSchedule.parse("*=0.1,0.1 lstm*=0.2,0.2")  # the later pattern wins
    assert s.for_components(names, 0.5) == {"tdnn1.dropout": 0.1, "lstm1.dropout": 0.2, "lstm2.dm": 0.2}
    for bad, message in (
        ("0.5", "at least a start and an end"),
        ("0,0.5@0.7,0.1@0.6,0", "must not decrease"),
        ("0,1.5,0", r"not in \[0, 1\]"),
        ("0,x,0", "not a number"),
        ("=0,0", "no component-name pattern"),
    ):
        with pytest.raises(TrainingError, match=message):
            DropoutSchedule.parse(bad)
    with pytest.raises(TrainingError, match="matches no dropout component"):
        quiet_rules(kaldi_net(), 1e-3, dropout_schedule="lstm*=0,0.5,0")


# ----- fit applies them; a loop of your own gets the same -------------------------------------------------------


def data(n=8, frames=24, seed=0):
    r = np.random.default_rng(seed)
    feats = [r.normal(size=(frames, 6)).astype(np.float32) for _ in range(n)]
    labels = [r.integers(0, 5, size=frames) for _ in range(n)]
    return feats, labels


SCHEDULE = "0,0.5@0.5,0.1"


REPAIRING_RELU = "RectifiedLinearComponent dim=8 self-repair-scale=0.05 self-repair-lower-threshold=0.5"


def hand_loop(net, rules, feats, labels, *, batch_size, chunk, seed, epochs):
    """The loop docs/training.md shows: your own steps with kaldi_rules, as fit runs them."""
    left, right = net.context()
    chunks = make_chunks(feats, labels, chunk=chunk, left=left, right=right)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=batch_size, t=(-left, chunk + right))},
        outputs={"output": IndexSet.range(n=batch_size, t=chunk)},
    )
    computation = compile(net, request)
    batches = len(chunks) // batch_size
    total = epochs * batches

    @jax.jit
    def step(net, opt_state, x, targets, weights, key, sequences, dropout):
        frames = jnp.maximum(weights.sum(), 1.0)
        with rng.randomness(key), rng.dropout_proportions(dropout), rules.repairing(opt_state, frames) as repair:
            tape = computation.forward(net, {"input": x})["output"]
            loss, _, delta = objective("linear", tape.value, targets, weights)
            grads = tape.backward(delta)
            state = {**net.state, **batchnorm_stats_updates(tape)}
        updates, opt_state = rules.update(
            grads, opt_state, net.params, frames=frames, sequences=sequences, repair=repair.after()
        )
        params = optax.apply_updates(net.params, updates)
        params, state = rules.after_update(params, state, key)
        return net.replace(params=params, state=state), opt_state

    opt_state = rules.init(net.params)
    n = 0
    for epoch in range(epochs):
        net = zero_batchnorm_stats(net)  # Kaldi's ZeroComponentStats at the start of a training job
        opt_state = zero_repair_statistics(opt_state)
        order = np.random.default_rng([seed, epoch]).permutation(len(chunks))
        for b in range(batches):
            idx = order[b * batch_size : (b + 1) * batch_size]
            x, targets, weights = (jnp.asarray(a) for a in chunks.minibatch(idx))
            key = jax.random.fold_in(jax.random.PRNGKey(seed), n)
            dropout = {k: jnp.float32(v) for k, v in rules.dropout(n / total).items()}
            net, opt_state = step(net, opt_state, x, targets, weights, key, jnp.float32(len(idx)), dropout)
            n += 1
    return net


def test_fit_with_the_rules_equals_your_own_loop():
    feats, labels = data()
    # A ReLU that self-repairs where under half its rows fire: about half its units, so the term is in play.
    net = kaldi_net(CONFIG.replace("RectifiedLinearComponent dim=8", REPAIRING_RELU))
    rules = quiet_rules(net, 2e-3, dropout_schedule=SCHEDULE, l2_regularize_factor=2.0)
    kw = dict(batch_size=4, chunk=6, seed=3, epochs=2)
    result = fit(net, (feats, labels), rules, progress=False, **kw)
    mine = hand_loop(net, rules, feats, labels, **kw)
    for name in net.params:
        np.testing.assert_allclose(np.asarray(result.network.params[name]), np.asarray(mine.params[name]), atol=1e-6)
    for name in net.state:
        np.testing.assert_allclose(np.asarray(result.network.state[name]), np.asarray(mine.state[name]), atol=1e-5)
    # The trained network keeps the proportion its last step used: 16 steps, the last after 15/16 of the run.
    final = rules.dropout(15 / 16)["drop"]
    assert final == pytest.approx(0.5 + (15 / 16 - 0.5) * (0.1 - 0.5) / 0.5)
    (layer,) = [x for x in walk(result.network.outputs.values()) if isinstance(x, GeneralDropoutComponent)]
    assert layer.dropout_proportion == pytest.approx(final)


def test_fit_batchnorm_count_follows_kaldis_decay():
    """After k minibatches of R rows the stored count is Kaldi's 0.8 * (count + R), from 0 each epoch."""
    feats, labels = data()
    net = kaldi_net()
    rules = quiet_rules(net, 1e-3)
    result = fit(net, (feats, labels), rules, batch_size=4, chunk=6, progress=False, max_steps=5)
    count = 0.0
    for _ in range(5):
        count = 0.8 * (count + 4 * 6)
    assert float(result.network.state["bn.count"]) == pytest.approx(count, rel=1e-6)


def test_fit_applies_the_rules_by_default_and_can_be_told_not_to():
    feats, labels = data()
    kaldi = kaldi_net()
    net = kaldi
    kw = dict(batch_size=4, chunk=6, progress=False, max_steps=1)
    with pytest.warns(KaldiRulesWarning, match="natural gradient.*out"):
        wrapped = fit(kaldi, (feats, labels), optax.sgd(50.0), **kw)  # with its objectives
    plain = fit(net, (feats, labels), optax.sgd(50.0), rules=False, **kw)
    for names, _, max_change, _ in COMPONENTS:
        change = np.sqrt(sum(np.sum(np.square(wrapped.network.params[n] - net.params[n])) for n in names))
        assert change <= max_change * 1.0001
    assert not np.allclose(plain.network.params["aff.bias_params"], wrapped.network.params["aff.bias_params"])
    # Explicitly, the same rules around the same optimiser:
    with pytest.warns(KaldiRulesWarning):
        explicit = fit(net, (feats, labels), kaldi_rules(net, optimizer=optax.sgd(50.0)), **kw)
    for name in net.params:
        np.testing.assert_array_equal(
            np.asarray(explicit.network.params[name]), np.asarray(wrapped.network.params[name])
        )
    with pytest.raises(TrainingError, match="rules=False"):
        fit(net, (feats, labels), quiet_rules(net, 1e-3), rules=False, **kw)


def test_a_network_without_kaldi_options_trains_as_before():
    from symnet.kaldi import read_network as read

    net = read("examples/kaldi-doc-example.config")
    assert not any(r.shapes_the_update for r in component_rules(net))
    r = np.random.default_rng(0)
    feats = [r.normal(size=(20, 12)).astype(np.float32) for _ in range(4)]
    labels = [r.integers(0, 115, size=20) for _ in range(4)]
    kw = dict(batch_size=4, chunk=5, progress=False, max_steps=2)
    a = fit(net, (feats, labels), optax.sgd(0.1), **kw)
    b = fit(net, (feats, labels), optax.sgd(0.1), rules=False, **kw)
    for name in net.params:
        np.testing.assert_array_equal(np.asarray(a.network.params[name]), np.asarray(b.network.params[name]))


def test_natural_gradient_with_the_rules():
    """natural_gradient.optimizer(kaldi_rules(...)) is kaldi_rules(..., natural_gradient=True); fit keeps the
    preconditioners outermost and updates them."""
    net = kaldi_net()
    rules = natural_gradient.optimizer(quiet_rules(net, 1e-3), net)
    assert isinstance(rules, KaldiRules) and rules.settings["natural_gradient"]
    state = rules.init(net.params)
    assert isinstance(state, natural_gradient.NaturalGradientState)
    feats, labels = data()
    result = fit(net, (feats, labels), rules, batch_size=4, chunk=6, progress=False, max_steps=2)
    before = jax.tree.leaves(state.preconditioners)
    after = jax.tree.leaves(result.opt_state.preconditioners)
    assert any(not np.allclose(np.asarray(x), np.asarray(y)) for x, y in zip(before, after))
    assert int(result.opt_state.inner.step) == 2


def test_warnings_name_what_is_not_applied():
    text = CONFIG.replace(
        "type=RectifiedLinearComponent dim=8", "type=RectifiedLinearComponent dim=8 self-repair-scale=1e-05"
    )
    with pytest.warns(KaldiRulesWarning, match=r"natural gradient") as record:
        kaldi_rules(kaldi_net(text), 1e-3)
    message = str(record[0].message)
    assert "self-repair" not in message  # fit's step applies a ReLU's self-repair (tests/train/test_self_repair.py)
    # Kaldi's LinearComponent preconditions whatever its use-natural-gradient says, and so without
    # natural_gradient=True both it and `out` are named.
    assert "natural gradient (lin, out)" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", KaldiRulesWarning)
        kaldi_rules(kaldi_net(), 1e-3, natural_gradient=True)  # every option applied: no warning


# ----- against nnet3-train itself -------------------------------------------------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "kaldi-rules"


def read_eg(path):
    """tests/data/kaldi-rules' minibatch: `[T, N, D]` input (t = -1 .. frames), `[frames, N]` labels."""
    text = path.read_text()
    io_in, io_out = text.split("</NnetIo>")[:2]
    rows = np.array(
        [
            [float(v) for v in line.split()]
            for line in io_in.split("[", 1)[1].rstrip(" ]\n").splitlines()
            if line.strip()
        ]
    )
    labels = np.array([int(v) for v in re.findall(r"\[ (\d+) 1 \]", io_out)])
    n = len(re.findall(r"<I1> (\d+) -1 0", io_in))
    x = rows.reshape(n, -1, rows.shape[-1]).transpose(1, 0, 2)
    return x.astype(np.float32), labels.reshape(n, -1).T


def test_nnet3_train_fixture():
    """Each minibatch of nnet3-train (tests/data/kaldi-rules/make.py): from Kaldi's model before it, symnet's
    gradient with kaldi_rules (the models' stored learning rates, max-param-change 0.4) gives Kaldi's model
    after it: max-change, l2 (2 sequences), the learning-rate factor, the global limit, the batch-norm
    statistics (zeroed by nnet3-train, stored, scaled by 0.8), and each orthonormal constraint either applied
    or not (Kaldi's draw is its own RandInt)."""
    from symnet.kaldi import read_model

    seen = {"lin.linear_params": set(), "aff.linear_params": set()}
    global_limit: list[bool] = []
    for k in range(1, 5):
        net = zero_batchnorm_stats(read_model(FIXTURE / f"step{k - 1}.txt").network)
        after = read_model(FIXTURE / f"step{k}.txt").network
        computation, x, labels, frames, sequences = _minibatch(FIXTURE, k, net)
        tape = computation.forward(net, {"input": x})["output"]
        weights = jnp.ones(frames * sequences)
        _, _, delta = objective("linear", tape.value, labels, weights)
        grads = tape.backward(delta)
        state = {**net.state, **batchnorm_stats_updates(tape)}
        rules = quiet_rules(net, max_param_change=0.4)
        updates, _ = rules.update(grads, rules.init(net.params), net.params, frames=8.0, sequences=2.0)
        total = np.sqrt(sum(float(np.sum(np.square(u))) for u in updates.values()))
        global_limit.append(abs(total - 0.4) < 1e-5)
        params = optax.apply_updates(net.params, updates)
        _, state = rules.after_update(params, state, jax.random.PRNGKey(0))  # only the state is used here
        constrained = rules.constrain(params, None)
        for name, value in after.params.items():
            want = np.asarray(value)
            if name in seen:
                hits = [np.allclose(np.asarray(v[name]), want, atol=2e-5) for v in (params, constrained)]
                assert any(hits), (k, name)
                seen[name].add(hits[1] and not hits[0])
                continue
            np.testing.assert_allclose(np.asarray(params[name]), want, atol=2e-5, err_msg=f"step {k}: {name}")
        for name, value in after.state.items():
            np.testing.assert_allclose(np.asarray(state[name]), np.asarray(value), rtol=1e-4, atol=1e-5, err_msg=name)
        assert float(after.state["bn1.count"]) == pytest.approx(0.8 * frames * sequences)
    # The fixture has steps with and without each constraint (see make.py's seed), so both paths are checked.
    assert all(s == {True, False} for s in seen.values()), seen
    assert any(global_limit) and not all(global_limit)  # max-param-change was active, and not always


def test_nnet3_train_natural_gradient_fixture():
    """Each minibatch of nnet3-train with natural gradient (tests/data/kaldi-ng, made by
    tests/data/kaldi-rules/make.py): from Kaldi's model before it and fresh preconditioners (nnet3-train starts
    them afresh each call), symnet's natural gradient gives Kaldi's update, for a TdnnComponent with a bias and
    one without (over their spliced input), a LinearComponent whose use-natural-gradient=false Kaldi ignores,
    and the output NaturalGradientAffineComponent; the plain gradient does not.

    Not to float precision: Kaldi takes the eigenvalues of Z_t in float (symnet in the state's dtype), and the
    preconditioners' first minibatch runs Init's three updates from a start far from the data, so the updates
    agree to 1% of their largest entry. The output layer's first out-preconditioner is degenerate (the output
    derivatives' rows sum to 0, and Kaldi's initial R_0 spans the ones vector: a zero eigenvalue, which float
    noise sets), so it is compared by direction: a cosine of at least 0.995, and nearer than the plain gradient's."""
    folder = FIXTURE.parent / "kaldi-ng"
    for k in range(1, 5):
        before, after, got, plain = _ng_step(folder, k)
        for name in after.params:
            want = np.asarray(after.params[name]) - np.asarray(before.params[name])
            if not want.size:
                continue
            if name.startswith("aff."):
                ng, exact = (
                    np.vdot(u[name], want) / np.linalg.norm(u[name]) / np.linalg.norm(want) for u in (got, plain)
                )
                assert ng >= 0.995 and ng > exact, (k, name, ng, exact)
                continue
            bound = 1e-2 * np.abs(want).max()
            assert np.abs(got[name] - want).max() <= bound, (k, name)
            assert np.abs(plain[name] - want).max() > bound, (k, name)


def _minibatch(folder: Path, k: int, net: Any) -> tuple[Any, jax.Array, jax.Array, int, int]:
    """A fixture's minibatch k: the computation of `net` over it, its input rows and labels (flat, n-major), and
    its frames and sequences."""
    x, labels = read_eg(folder / f"eg{k}.txt")
    frames, sequences = labels.shape
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=sequences, t=(-1, frames + 1))},
        outputs={"output": IndexSet.range(n=sequences, t=frames)},
    )
    rows = jnp.asarray(x.reshape(-1, x.shape[-1]))
    return compile(net, request), rows, jnp.asarray(labels.reshape(-1)), frames, sequences


def _ng_step(folder: Path, k: int) -> tuple[Any, Any, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Minibatch k of the kaldi-ng fixture: Kaldi's models before and after it, and symnet's updates of the model
    before it with natural gradient (fresh preconditioners) and without."""
    from symnet.kaldi import read_model

    net = read_model(folder / f"step{k - 1}.txt").network
    computation, x, labels, frames, sequences = _minibatch(folder, k, net)
    states = natural_gradient.init_states(net)
    assert set(states) == {"tdnn1", "tdnn2", "lin", "aff"}
    assert states["tdnn1"]["in"].W.shape == (6, 13) and states["tdnn2"]["in"].W.shape == (3, 6)
    rules = quiet_rules(net, max_param_change=100.0)
    counts = {"frames": float(frames * sequences), "sequences": float(sequences)}

    @functools.partial(jax.jit, static_argnums=4)
    def update(net: Any, states: Any, x: jax.Array, labels: jax.Array, enabled: bool) -> Any:
        with natural_gradient.Preconditioning(states, enabled=enabled):
            tape = computation.forward(net, {"input": x})["output"]
            _, _, delta = objective("linear", tape.value, labels, jnp.ones(tape.value.shape[0]))
            grads = tape.backward(delta)
        return rules.update(grads, rules.init(net.params), net.params, **counts)[0]

    got, plain = ({n: np.asarray(v) for n, v in update(net, states, x, labels, on).items()} for on in (True, False))
    return net, read_model(folder / f"step{k}.txt").network, got, plain


def test_natural_gradient_under_float16_loss_scaling_skips_an_overflowing_step_whole():
    """An overflowing float16 step (the scaled derivative is not finite) leaves the parameters, the inner
    optimiser and the preconditioners as they were; the halved scale then trains them, all finite."""
    from symnet import Precision

    net = kaldi_net()
    rules = natural_gradient.optimizer(quiet_rules(net, 1e-3), net)
    feats, labels = data()
    policy = Precision(compute="float16", loss_scale=2.0**24)  # the scaled derivative overflows float16
    kw = {"batch_size": 4, "chunk": 6, "progress": False, "precision": policy}
    first = fit(net, (feats, labels), rules, max_steps=1, **kw)
    assert float(first.opt_state.scale) == 2.0**23
    start = rules.init(net.params)
    for before, after in zip(
        jax.tree.leaves(start.preconditioners), jax.tree.leaves(first.opt_state.inner.preconditioners)
    ):
        np.testing.assert_array_equal(np.asarray(before), np.asarray(after))
    assert all(np.array_equal(np.asarray(first.network.params[k]), np.asarray(net.params[k])) for k in net.params)
    later = fit(net, (feats, labels), rules, epochs=5, **kw)  # 40 steps
    assert float(later.opt_state.scale) <= 2.0**16 and int(later.opt_state.inner.inner.step) > 10
    leaves = jax.tree.leaves((later.network.params, later.opt_state.inner.preconditioners))
    assert all(np.isfinite(np.asarray(x)).all() for x in leaves)
    moved = [k for k in net.params if not np.allclose(np.asarray(later.network.params[k]), np.asarray(net.params[k]))]
    assert "out.linear_params" in moved
    after = jax.tree.leaves(later.opt_state.inner.preconditioners)
    assert any(
        not np.allclose(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(start.preconditioners), after)
    )
