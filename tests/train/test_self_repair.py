"""Kaldi's self-repair of RectifiedLinear, Sigmoid and Tanh components (symnet._src.components.self_repair).

The term is checked against RepairGradients' formulas (nnet-simple-component.cc) written out in numpy on a
small network's backward pass; `fit` with Kaldi's rules is checked to revive a dead ReLU unit, which it
leaves dead without self-repair.
"""

from __future__ import annotations

import io
import warnings

import jax
import numpy as np
import optax
import pytest

from symnet._src.components import self_repair
from symnet._src.core.index import IndexSet
from symnet._src.core.tape import backward
from symnet._src.core.walk import walk
from symnet._src.train.component_rules import network_roots
from symnet.engine import ComputationRequest, compile
from symnet.kaldi import read_network
from symnet.train import KaldiRulesWarning, TrainingError, fit, kaldi_rules

CONFIG = """
input-node name=input dim=6
component name=aff type=AffineComponent input-dim=6 output-dim=8
component-node name=aff component=aff input=input
component name=nl type={kind} dim=8 {options}
component-node name=nl component=nl input=aff
component name=out type=AffineComponent input-dim=8 output-dim=3
component-node name=out component=out input=nl
output-node name=output input=out objective=linear
"""

KINDS = {
    "RectifiedLinearComponent": (lambda v: np.maximum(v, 0.0), lambda y: (y > 0).astype(np.float64)),
    "SigmoidComponent": (lambda v: 1.0 / (1.0 + np.exp(-v)), lambda y: y * (1.0 - y)),
    "TanhComponent": (np.tanh, lambda y: 1.0 - y * y),
}


def network(kind: str, options: str = "self-repair-scale=0.05", seed: int = 0):
    return read_network(io.StringIO(CONFIG.format(kind=kind, options=options)), seed=seed)


def kaldi_term(kind, scale, lower, upper, y, deriv_sum, count, block_dim):
    """RepairGradients' addition to the input derivative (Kaldi's units), on every minibatch (no 1/2 and x2)."""
    blocks = deriv_sum.reshape(-1, block_dim).mean(axis=0)  # ReLU: the blocks' deriv-sums averaged
    if kind == "RectifiedLinearComponent":
        row = scale * ((blocks <= lower * count).astype(float) - (blocks > upper * count).astype(float))
        return np.broadcast_to(np.tile(row, y.shape[1] // block_dim), y.shape)
    problem = (lower * count - deriv_sum > 0).astype(float)  # Heaviside(lower * count - deriv_sum)
    if kind == "SigmoidComponent":
        return scale * problem * (1.0 - 2.0 * y)
    return -scale * problem * y


@pytest.mark.parametrize(
    "kind, options, lower, upper, block_dim",
    [
        ("RectifiedLinearComponent", "self-repair-scale=0.05", 0.05, 0.95, 8),
        (
            "RectifiedLinearComponent",
            "block-dim=4 self-repair-scale=0.02 self-repair-lower-threshold=0.3",
            0.3,
            0.95,
            4,
        ),
        ("SigmoidComponent", "self-repair-scale=0.05", 0.05, None, 8),
        ("TanhComponent", "self-repair-scale=0.05 self-repair-lower-threshold=0.5", 0.5, None, 8),
    ],
)
def test_the_term_is_kaldis(kind, options, lower, upper, block_dim):
    net = network(kind, options)
    specs = self_repair.repair_specs(components(net))
    assert set(specs) == {"nl"} and specs["nl"].block_dim == block_dim and specs["nl"].lower == lower
    r = np.random.default_rng(1)
    rows = 12
    x = r.normal(size=(2 * rows, 6)).astype(np.float32) * 2.0
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=range(rows))}, outputs={"output": IndexSet.range(n=2, t=range(rows))}
    )
    computation = compile(net, request)
    # Statistics carried in: some dimensions starved, some saturated (ReLU), the rest in range.
    carried_count = 4000.0
    carried_sums = np.array([0.0, 100.0, 3999.0, 2000.0, 100.0, 3900.0, 1200.0, 3000.0][:block_dim], np.float32)
    delta_scale = 0.125
    d_out = r.normal(size=(2 * rows, 3))
    with self_repair.repairing(
        specs, {"nl": (np.float32(carried_count), carried_sums)}, np.float32(delta_scale)
    ) as state:
        tapes = computation.forward(net, {"input": x})
        grads = backward([(tapes["output"], d_out.astype(np.float32))])
    assert state.missing() == []

    p = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    f, derivative = KINDS[kind]
    a = x.astype(np.float64) @ p["aff.linear_params"].T + p["aff.bias_params"]
    y = f(a)
    d_y = d_out @ p["out.linear_params"]
    dims_sum = derivative(y).sum(axis=0)  # this minibatch's StoreStats
    count, total = state.statistics["nl"]
    blocks = 8 // block_dim
    np.testing.assert_allclose(float(count), carried_count + y.shape[0] * blocks)
    np.testing.assert_allclose(np.asarray(total), carried_sums + dims_sum.reshape(-1, block_dim).sum(0), rtol=1e-5)
    # Kaldi's deriv_sum_ is per dimension with count_ rows; symnet keeps the blocks' sums over rows x blocks.
    kaldi_sums = np.tile(carried_sums / blocks, blocks) + dims_sum
    kaldi_count = carried_count / blocks + y.shape[0]
    term = kaldi_term(kind, specs["nl"].scale, lower, upper, y, kaldi_sums, kaldi_count, block_dim)
    assert np.abs(term).max() > 0  # the case exercises the repair
    d_a = d_y * derivative(y) - delta_scale * term  # fit's loss falls where Kaldi's objective rises
    np.testing.assert_allclose(np.asarray(grads["aff.bias_params"]), d_a.sum(axis=0), rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grads["aff.linear_params"]), d_a.T @ x, rtol=2e-4, atol=1e-5)


def components(net):
    return list(walk(network_roots(net)))


def test_without_repairing_the_backward_is_plain():
    net = network("RectifiedLinearComponent")
    frames = IndexSet.range(n=1, t=range(5))
    request = ComputationRequest(inputs={"input": frames}, outputs={"output": frames})
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    tapes = compile(net, request).forward(net, {"input": x})
    grads = backward([(tapes["output"], np.ones((5, 3), np.float32))])
    p = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    a = x @ p["aff.linear_params"].T + p["aff.bias_params"]
    d_a = (np.ones((5, 3)) @ p["out.linear_params"]) * (a > 0)
    np.testing.assert_allclose(np.asarray(grads["aff.bias_params"]), d_a.sum(0), rtol=1e-5, atol=1e-6)


def dead_unit_fit(scale: float, optimizer=None):
    """fit with Kaldi's rules (its SGD, or around `optimizer`) on a network whose ReLU unit 0 never fires
    (bias -10): one epoch of 16 chunks of 10 frames, minibatches of 4."""
    options = f"self-repair-scale={scale}" if scale else ""
    net = network("RectifiedLinearComponent", options)
    bias = np.asarray(net.params["aff.bias_params"]).copy()
    bias[0] = -10.0
    net = net.assign({"aff.bias_params": bias})
    r = np.random.default_rng(0)
    feats = [r.normal(size=(20, 6)).astype(np.float32) for _ in range(8)]
    targets = [r.integers(0, 3, size=20) for _ in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", KaldiRulesWarning)  # every option is applied: no warning
        rules = kaldi_rules(net, 1e-3) if optimizer is None else kaldi_rules(net, optimizer=optimizer)
        result = fit(net, (feats, targets), rules, batch_size=4, chunk=10, progress=False)
    return net, result


def test_fit_revives_a_dead_unit_and_carries_the_statistics():
    net, repaired = dead_unit_fit(0.05)
    _, plain = dead_unit_fit(0.0)
    before = float(net.params["aff.bias_params"][0])
    assert float(plain.network.params["aff.bias_params"][0]) == before  # a dead unit gets no gradient
    # Kaldi's SGD on the summed objective: each step adds lr * s for each of the minibatch's 4 x 10 rows.
    steps = int(repaired.opt_state.step)
    assert steps == 4  # 16 chunks of 10 frames in minibatches of 4
    rise = float(repaired.network.params["aff.bias_params"][0]) - before
    np.testing.assert_allclose(rise, steps * 1e-3 * 40 * 0.05, rtol=1e-3)
    count, sums = repaired.opt_state.repair["nl"]
    assert float(count) > 0 and float(sums[0]) == 0.0 and float(sums.max()) > 0


def test_an_update_without_the_statistics_says_it_leaves_self_repair_out():
    net = network("RectifiedLinearComponent")
    rules = kaldi_rules(net, 1e-3)
    grads = jax.tree.map(lambda v: v * 0, net.params)
    with pytest.warns(KaldiRulesWarning, match="self-repair of nl"):
        rules.update(grads, rules.init(net.params), net.params, frames=10.0)


@pytest.mark.parametrize(
    "kind, options, match",
    [
        ("RectifiedLinearComponent", "self-repair-scale=0.1", "must be in"),
        ("SigmoidComponent", "self-repair-scale=0.01 self-repair-upper-threshold=0.9", "upper"),
    ],
)
def test_what_kaldi_stops_on_is_an_error(kind, options, match):
    with pytest.raises(TrainingError, match=f"nl.*{match}"):
        kaldi_rules(network(kind, options), 1e-3)


def test_adam_through_the_rules_gets_the_repair_too():
    """kaldi_rules around your optimiser: the term is in the gradient the optimiser sees."""
    net, result = dead_unit_fit(0.05, optax.adam(1e-2))
    assert float(result.network.params["aff.bias_params"][0]) > float(net.params["aff.bias_params"][0]) + 1e-3
