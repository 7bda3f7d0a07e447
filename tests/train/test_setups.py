"""A second `fit` of the same setup compiles nothing; another optimiser, or other numbers in it, is another setup."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import jax
import numpy as np
import optax
import pytest

from symnet import Input, Network, ReLU
from symnet._src.train import setups
from symnet._src.train.setups import fingerprint
from symnet.layers import Affine
from symnet.train import fit

RNG = np.random.default_rng(3)
FEATS = [RNG.standard_normal((30, 6)).astype(np.float32) for _ in range(12)]
TARGETS = [RNG.integers(0, 3, 30) for _ in range(12)]
_compiles: collections.Counter[str] = collections.Counter()


def _listen(event: str, duration: float, **_: object) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _compiles["backend"] += 1


jax.monitoring.register_event_duration_secs_listener(_listen)


@pytest.fixture
def compiles() -> Iterator[collections.Counter[str]]:
    setups._kept.clear()
    _compiles.clear()
    yield _compiles
    setups._kept.clear()


def network() -> Network:
    return Network(Affine(ReLU(Affine(Input("input", 6), 16)), 3), seed=0)


def train(optimizer: optax.GradientTransformation, **options: object) -> dict[str, np.ndarray]:
    result = fit(network(), (FEATS, TARGETS), optimizer, epochs=1, batch_size=4, progress=False, **options)
    return {name: np.asarray(value) for name, value in result.network.params.items()}


def test_a_second_fit_of_the_same_setup_compiles_nothing_and_trains_the_same(compiles) -> None:
    first = train(optax.adam(1e-3))
    assert compiles["backend"] > 0
    compiles.clear()
    again = train(optax.adam(1e-3))  # a new optimiser object made by the same code from the same numbers
    assert compiles["backend"] == 0
    for name in first:
        np.testing.assert_array_equal(again[name], first[name], err_msg=name)


def test_other_numbers_in_the_optimiser_make_another_setup_that_trains_as_a_fresh_one(compiles) -> None:
    train(optax.adam(1e-3))
    kept = train(optax.adam(3e-2))
    setups._kept.clear()
    fresh = train(optax.adam(3e-2))
    for name in fresh:
        np.testing.assert_array_equal(kept[name], fresh[name], err_msg=name)
    assert not np.allclose(kept["affine.linear_params"], train(optax.adam(1e-3))["affine.linear_params"])


def test_other_batch_sizes_or_chunks_are_other_setups(compiles) -> None:
    train(optax.sgd(0.1))
    assert len(setups._kept) == 1
    fit(network(), (FEATS, TARGETS), optax.sgd(0.1), epochs=1, batch_size=3, progress=False)
    fit(network(), (FEATS, TARGETS), optax.sgd(0.1), epochs=1, batch_size=4, chunk=10, progress=False)
    assert len(setups._kept) == 3


def test_fingerprints_read_closures_by_value_and_other_objects_by_identity() -> None:
    assert fingerprint(optax.adam(1e-3)) == fingerprint(optax.adam(1e-3))
    assert fingerprint(optax.adam(1e-3)) != fingerprint(optax.adam(1e-3, b1=0.8))
    assert fingerprint(optax.sgd(0.1, momentum=0.9)) != fingerprint(optax.sgd(0.1))
    schedule = [optax.linear_schedule(0.1, 0.0, n) for n in (10, 10, 20)]
    assert fingerprint(schedule[0]) == fingerprint(schedule[1]) != fingerprint(schedule[2])

    class Opaque:
        pass

    one, two = Opaque(), Opaque()
    assert fingerprint(one) == fingerprint(one) != fingerprint(two)
    assert fingerprint(np.zeros(10_000)) != fingerprint(np.zeros(10_000))  # large arrays: by identity
    assert fingerprint(np.arange(3)) == fingerprint(np.arange(3)) != fingerprint(np.arange(4))
    assert fingerprint(jax.numpy.ones(2)) == fingerprint(np.ones(2, np.float32))
    assert fingerprint(np.ndarray) == fingerprint(np.ndarray) != fingerprint(jax.Array)  # classes: by identity
