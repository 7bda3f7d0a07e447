"""The randomness and dropout proportions `symnet.rng` gives a computation are those of the thread tracing it."""

from __future__ import annotations

import threading

import jax

from symnet import rng


def test_the_randomness_of_one_thread_is_not_another_threads():
    seen = []
    with rng.randomness(jax.random.PRNGKey(1)), rng.dropout_proportions({"drop": 0.5}):

        def other() -> None:
            with rng.dropout_proportions({"drop": 0.25}):
                seen.append((rng.active_key(), rng.active_proportions(), rng.proportion("drop", 0.0)))
            seen.append((rng.active_key(), rng.active_proportions(), rng.proportion("drop", 0.0)))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert rng.active_proportions() == {"drop": 0.5} and rng.proportion("drop", 0.0) == 0.5
        assert rng.active_key() is not None
    assert seen == [(None, {"drop": 0.25}, 0.25), (None, {}, 0.0)]
    assert rng.active_key() is None and rng.proportion("drop", 0.1) == 0.1
