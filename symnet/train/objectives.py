"""Kaldi's objectives for output nodes, with their derivatives for `tape.backward`.

`linear`: the output is log-probabilities; the objective is the weighted mean
cross-entropy `-sum(w * logp[label]) / sum(w)` (Kaldi's `linear` objective
is the dot product of the output with the one-hot target). `quadratic`:
`0.5 * sum(w * |y - target|^2) / sum(w)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import SymnetError

OBJECTIVES = ("linear", "quadratic")


def objective(
    kind: str, output: jax.Array, targets: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`(loss, correct, delta)`: mean loss, count of correct frames (linear), d loss / d output."""
    total = jnp.maximum(weights.sum(), 1.0)
    if kind == "linear":
        onehot = jax.nn.one_hot(targets, output.shape[-1], dtype=output.dtype)
        loss = -(weights * (onehot * output).sum(-1)).sum() / total
        delta = -onehot * (weights / total)[:, None]
        correct = (weights * (jnp.argmax(output, -1) == targets)).sum()
        return loss, correct, delta
    if kind == "quadratic":
        diff = output - targets
        loss = 0.5 * (weights[:, None] * diff * diff).sum() / total
        return loss, jnp.zeros(()), diff * (weights / total)[:, None]
    raise SymnetError(f"unknown objective {kind!r}; Kaldi's are {OBJECTIVES}")
