"""`materialized` (symnet._src.engine.materialize): the identity, as a fusion boundary on XLA's CPU backend."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet._src.engine.materialize import materialized


@pytest.mark.parametrize("key", [1.0, float("nan")])
def test_materialized_returns_its_value_with_its_gradient_under_jit_and_vmap(key) -> None:
    """The value bit for bit (whichever branch a NaN key takes), for `jax.grad` and `jax.vmap` too."""
    value = jnp.asarray([[0.0, -0.0, 1.5], [np.nan, np.inf, -2.0]], jnp.float32)
    k = jnp.full((2, 2), key, jnp.float32)
    got = jax.jit(materialized)(value, k)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(value).view(np.uint32))
    x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    grad = jax.grad(lambda x: jnp.sum(jnp.sin(materialized(jnp.exp(x), k))))(x)
    np.testing.assert_allclose(grad, jnp.cos(jnp.exp(x)) * jnp.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(jax.vmap(materialized)(x[:, None], jnp.stack([k, k])), x[:, None])
    assert materialized(value, jnp.zeros((0, 3))) is value  # no element to read a predicate from


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a boundary on XLA's CPU backend only")
def test_on_cpu_the_value_goes_through_a_conditional_xla_keeps() -> None:
    """The fusion boundary it exists for; a key XLA knows (a constant) would fold the predicate away."""
    x, k = jnp.ones((2, 3)), jnp.ones((2, 2))
    lowered = jax.jit(lambda x, k: materialized(jnp.exp(x), k)).lower(x, k).compile().as_text()
    assert "conditional(" in lowered
    folded = jax.jit(lambda x: materialized(jnp.exp(x), jnp.ones((2, 2)))).lower(x).compile().as_text()
    assert "conditional(" not in folded
