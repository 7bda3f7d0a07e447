"""Training-mode dropout: Kaldi's masks, one per step from symnet.rng, the same in forward and backward."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from symnet import Identity, Network, SymnetError, Weight, rng
from symnet.components import set_test_mode
from symnet.kaldi import COMPONENTS, parse_network
from symnet.train import fit

x = Identity()


def dropout(kind, **options):
    return COMPONENTS[kind]("drop", {"dim": 4000, **options}, x)


def test_dropout_masks_have_kaldis_proportion_and_values():
    ones = jnp.ones((25, 4000))
    with rng.randomness(jax.random.PRNGKey(0)):
        y = np.asarray(Network(dropout("DropoutComponent", **{"dropout-proportion": 0.3}))(ones))
    assert set(np.unique(y)) == {0.0, 1.0}  # no rescaling in training mode, as Kaldi
    assert abs((y == 0).mean() - 0.3) < 0.01


def test_dropout_per_frame_drops_whole_rows():
    ones = jnp.ones((400, 4000))
    with rng.randomness(jax.random.PRNGKey(1)):
        y = np.asarray(
            Network(dropout("DropoutComponent", **{"dropout-proportion": 0.5, "dropout-per-frame": "true"}))(ones)
        )
    rows = y.mean(axis=1)
    assert set(np.unique(rows)) == {0.0, 1.0} and 0.4 < (rows == 0).mean() < 0.6


@pytest.mark.parametrize("continuous", [False, True])
def test_general_dropout_masks(continuous):
    ones = jnp.ones((50, 4000))
    layer = dropout(
        "GeneralDropoutComponent", **{"dropout-proportion": 0.2, "block-dim": 40, "continuous": str(continuous).lower()}
    )
    with rng.randomness(jax.random.PRNGKey(2)):
        y = np.asarray(Network(layer)(ones)).reshape(50, 100, 40)
    assert np.all(y == y[:, :1, :])  # one mask row per row, shared by its blocks
    if continuous:
        assert y.min() >= 1 - 2 * 0.2 - 1e-6 and y.max() <= 1 + 2 * 0.2 + 1e-6
    else:
        assert set(np.round(np.unique(y), 5)) == {0.0, 1.25}
    assert abs(y.mean() - 1.0) < 0.02  # expected value 1


def test_backward_uses_the_forward_mask_and_matches_jax_grad():
    w = Weight(jnp.arange(1.0, 6.0), name="w")
    layer = COMPONENTS["DropoutComponent"]("drop", {"dim": 5, "dropout-proportion": 0.5}, x * w)
    net = Network(layer)
    xs = jnp.ones((7, 5))
    key = jax.random.PRNGKey(3)
    with rng.randomness(key):
        tape = net.forward(xs)
        grads = tape.backward(jnp.ones_like(tape.value))

        def loss(params):
            return net.replace(params=params)(xs).sum()

        want = jax.grad(loss)(net.params)
    mask = np.asarray(tape.value) / np.asarray(xs * net.params["w"])
    np.testing.assert_allclose(grads["w"], mask.sum(0))
    np.testing.assert_allclose(grads["w"], want["w"])


def test_training_mode_outside_a_randomness_block_is_a_clear_error():
    with pytest.raises(SymnetError, match="needs random numbers in training mode"):
        Network(dropout("DropoutComponent", **{"dropout-proportion": 0.5}))(jnp.ones((2, 4000)))
    test = set_test_mode(Network(dropout("DropoutComponent", **{"dropout-proportion": 0.5})))
    np.testing.assert_allclose(test(jnp.ones((2, 4000))), 0.5)  # test mode scales by 1 - p


CONFIG = """
input-node name=input dim=6
component name=affine type=AffineComponent input-dim=18 output-dim=16
component name=relu type=RectifiedLinearComponent dim=16
component name=drop type=DropoutComponent dim=16 dropout-proportion=0.3
component name=out type=AffineComponent input-dim=16 output-dim=3
component name=lsm type=LogSoftmaxComponent dim=3
component-node name=affine component=affine input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=relu component=relu input=affine
component-node name=drop component=drop input=relu
component-node name=out component=out input=drop
component-node name=lsm component=lsm input=out
output-node name=output input=lsm
"""


def test_fit_trains_with_dropout_reproducibly_and_validates_in_test_mode():
    net = parse_network(CONFIG, seed=0)
    data_rng = np.random.default_rng(0)
    feats = [data_rng.standard_normal((30, 6)).astype(np.float32) for _ in range(6)]
    labels = [(f[:, 0] > 0).astype(np.int32) + (f[:, 1] > 0) for f in feats]
    runs = [
        fit(
            net,
            (feats, labels),
            optax.adam(1e-2),
            valid=(feats, labels),
            epochs=3,
            batch_size=3,
            chunk=10,
            seed=5,
            progress=False,
        )
        for _ in range(2)
    ]
    for k in net.params:  # the same seed: the same masks, bit-identical parameters
        np.testing.assert_array_equal(np.asarray(runs[0].network.params[k]), np.asarray(runs[1].network.params[k]))
    other = fit(net, (feats, labels), optax.adam(1e-2), epochs=1, batch_size=3, chunk=10, seed=6, progress=False)
    first = fit(net, (feats, labels), optax.adam(1e-2), epochs=1, batch_size=3, chunk=10, seed=5, progress=False)
    assert not np.array_equal(
        np.asarray(other.network.params["affine.linear_params"]),
        np.asarray(first.network.params["affine.linear_params"]),
    )  # other masks
    history = runs[0].history
    assert history[-1].valid_loss < history[0].valid_loss
