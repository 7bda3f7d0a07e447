"""`net.compute` computes in Kaldi's test mode by default (as nnet3-compute): batch-norm with its stored
statistics, dropout off; `test_mode=False` computes the network as built."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest

from symnet import Input, Network, Node, rng
from symnet.components import set_test_mode
from symnet.errors import ArgumentTypeError, PlanError
from symnet.layers import Affine, BatchNorm, Dropout

RNG = np.random.default_rng(11)
_compiles: collections.Counter[str] = collections.Counter()


def _listen(event: str, duration: float, **_: object) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _compiles["backend"] += 1


jax.monitoring.register_event_duration_secs_listener(_listen)


def trained() -> Network:
    """A network with batch-norm statistics as `fit` leaves them (count > 0), and a dropout."""
    h = Node("bn", BatchNorm(Affine(Input("input", 5), 6)))
    net = Network(Affine(Node("drop", Dropout(h, 0.5)), 3), seed=0)
    return net.assign({"bn.count": 40.0, "bn.stats_mean": RNG.standard_normal(6), "bn.stats_var": 1 + RNG.random(6)})


def test_compute_uses_the_stored_statistics_for_any_lengths_and_buckets_them() -> None:
    net = trained()
    xs = [RNG.standard_normal((n, 5)).astype(np.float32) for n in range(20, 40)]
    _compiles.clear()
    got = net.compute(xs)
    assert _compiles["backend"] <= 10  # a few bucket lengths for 20 lengths, not one program each
    tested = set_test_mode(net)
    for x, y in zip(xs, got, strict=True):
        # The stored statistics, by Kaldi's formula, and no dropout.
        h = x @ np.asarray(net.params["bn.affine.linear_params"]).T + np.asarray(net.params["bn.affine.bias_params"])
        h = (h - np.asarray(net.state["bn.stats_mean"])) / np.sqrt(np.asarray(net.state["bn.stats_var"]) + 1e-3)
        want = h @ np.asarray(net.params["affine.linear_params"]).T + np.asarray(net.params["affine.bias_params"])
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(y, tested.compute(x[None])[0], rtol=1e-6, atol=1e-6)


def test_test_mode_false_computes_as_built_one_minibatch_of_one_length() -> None:
    net = trained()
    x = RNG.standard_normal((2, 9, 5)).astype(np.float32)
    with rng.randomness(jax.random.key(0)):
        training = np.asarray(net.compute(x, test_mode=False))
    assert not np.allclose(training, net.compute(x))
    with pytest.raises(PlanError, match="normalises over its minibatch"):
        with rng.randomness(jax.random.key(0)):
            net.compute([x[0], x[1, :5]], test_mode=False)
    with pytest.raises(ArgumentTypeError, match="test_mode"):
        net.compute(x, test_mode="yes")


def test_a_batch_norm_without_statistics_is_named_in_a_warning() -> None:
    net = Network(Affine(Node("bn", BatchNorm(Affine(Input("input", 5), 6))), 3), seed=0)
    with pytest.warns(UserWarning, match="'bn' has no batch-norm statistics yet"):
        net.compute(RNG.standard_normal((1, 4, 5)).astype(np.float32))
