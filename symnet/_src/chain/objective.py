"""Kaldi's chain (LF-MMI) objective, ComputeChainObjfAndDeriv, as a differentiable JAX function.

For network outputs `y` `[B, T, P]` (one row per output frame, i.e. frames t = 0, f, 2f, ... of a
chunk with frame-subsampling factor f), per-sequence numerator graphs and one denominator graph:

    objf    = sum_b weight_b * (log p_num(y_b) - log p_den(y_b))      (maximised)
    l2_term = -0.5 * l2_regularize * sum_b weight_b * sum_t,p y[b, t, p]^2
    d objf / d y = weight * (numerator occupation - denominator occupation)

as Kaldi computes them. The derivative comes from a `jax.custom_vjp`: the forward-backward runs
once, and the backward pass only scales the stored occupations, so nothing of the scan is kept for
autodiff. With `out_of_range_regularize`, the gradient also gets Kaldi's penalty on outputs beyond
[-30, 30], `-c * (y - clip(y, -30, 30))`, which, as in Kaldi, is not part of the reported value
(Kaldi adds it with scale 2c on a random half of minibatches; here it is c on every one, its mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import ChainError
from .forward_backward import GraphArrays, forward_backward

__all__ = ["chain_objective", "ChainObjective", "ChainOptions", "DEFAULT_OBJF_PER_FRAME", "OUTPUT_LIMIT", "subsample"]

#: Kaldi limits the denominator's exp() to outputs in [-30, 30].
OUTPUT_LIMIT = 30.0
#: Kaldi's objective per frame for a minibatch whose objective is not finite (derivative set to 0).
DEFAULT_OBJF_PER_FRAME = -10.0


@dataclass(frozen=True)
class ChainOptions:
    """Kaldi's ChainTrainingOptions, with Kaldi's defaults. `lwf_scale` (learning without forgetting) is
    not supported: a nonzero value is an error."""

    l2_regularize: float = 0.0
    leaky_hmm_coefficient: float = 1e-5
    xent_regularize: float = 0.0
    out_of_range_regularize: float = 0.01
    lwf_scale: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.leaky_hmm_coefficient < 1.0:
            raise ChainError(f"leaky_hmm_coefficient {self.leaky_hmm_coefficient} is not in (0, 1), as Kaldi requires")
        for name in ("l2_regularize", "xent_regularize", "out_of_range_regularize"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0.0):
                raise ChainError(f"{name} {value!r} must be a number >= 0")
        if self.lwf_scale != 0.0:
            raise ChainError(f"lwf_scale {self.lwf_scale} (learning without forgetting) is not supported")


class ChainObjective(NamedTuple):
    """The chain objective of a minibatch, as Kaldi's ComputeChainObjfAndDeriv returns it.

    `objf` and `l2_term` are totals (divide by `weight`, the weighted frame count, for Kaldi's per-frame
    figures); gradients flow through both. `num_post` `[B, T, P]` are the numerator posteriors times the
    sequence weight (Kaldi's `xent_output_deriv`): the targets for `output-xent`, whose Kaldi objective is
    `sum(output_xent * num_post)` and derivative `xent_regularize * num_post`. `xent_objf` is that
    objective when `xent_output` was given, else 0. `total = objf + l2_term + xent_regularize * xent_objf`
    is what training maximises: its gradient is Kaldi's derivative for `output` and for `output-xent`."""

    objf: jax.Array
    l2_term: jax.Array
    weight: jax.Array
    num_post: jax.Array
    xent_objf: jax.Array
    total: jax.Array


@partial(jax.custom_vjp, nondiff_argnums=(6, 7))
def _objf_per_sequence(
    y: jax.Array,
    den: GraphArrays,
    num: GraphArrays,
    lengths: jax.Array,
    weights: jax.Array,
    default: jax.Array,
    leaky: float,
    out_of_range: float,
) -> tuple[jax.Array, jax.Array]:
    value, post, _ = _forward(y, den, num, lengths, weights, default, leaky)
    return value, post


def _forward(
    y: jax.Array,
    den: GraphArrays,
    num: GraphArrays,
    lengths: jax.Array,
    weights: jax.Array,
    default: jax.Array,
    leaky: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    den_logprob, den_occ = forward_backward(den, y, lengths, leaky=leaky, clamp=OUTPUT_LIMIT)
    num_logprob, num_occ = forward_backward(num, y, lengths, numerator=True)
    value = weights * (num_logprob - den_logprob)
    ok = jnp.isfinite(value)
    w = weights[:, None, None]
    num_post = jnp.where(ok[:, None, None], w * num_occ, 0.0)
    deriv = jnp.where(ok[:, None, None], w * (num_occ - den_occ), 0.0)
    return jnp.where(ok, value, default), num_post, deriv


def _fwd(
    y: jax.Array,
    den: GraphArrays,
    num: GraphArrays,
    lengths: jax.Array,
    weights: jax.Array,
    default: jax.Array,
    leaky: float,
    out_of_range: float,
) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    value, post, deriv = _forward(y, den, num, lengths, weights, default, leaky)
    if out_of_range:
        mask = (jnp.arange(y.shape[1])[None, :] < lengths[:, None])[:, :, None]
        deriv = deriv - jnp.where(mask, out_of_range * (y - jnp.clip(y, -OUTPUT_LIMIT, OUTPUT_LIMIT)), 0.0)
    return (value, post), (deriv, weights)


def _bwd(leaky: float, out_of_range: float, res: tuple, g: tuple) -> tuple:
    deriv, _ = res
    g_value, _g_post = g  # the posteriors are targets, constants to the gradient (as in Kaldi)
    return (g_value[:, None, None] * deriv, None, None, None, None, None)


_objf_per_sequence.defvjp(_fwd, _bwd)


def chain_objective(
    y: jax.Array,
    den: GraphArrays,
    num: GraphArrays,
    lengths: jax.Array | None = None,
    weights: jax.Array | None = None,
    options: ChainOptions = ChainOptions(),
    xent_output: jax.Array | None = None,
) -> ChainObjective:
    """Kaldi's chain objective of outputs `y` `[B, T, P]` (rows at the subsampled output frames) against the
    denominator graph `den` (`graph_arrays`) and per-sequence numerator graphs `num` (`stack_graphs`).

    `lengths` `[B]`: frames of each sequence (default all `T`; padded frames count for nothing);
    `weights` `[B]`: Kaldi's supervision weight (default 1). A sequence whose objective is not finite
    (a numerator with no path) counts as Kaldi's -10 per frame with zero derivative. `xent_output`:
    the `output-xent` log-softmax values `[B, T, P]`, for `xent_objf`. Maximise `total`."""
    if y.ndim != 3:
        raise ChainError(f"chain outputs must be [sequences, frames, pdfs], got shape {tuple(y.shape)}")
    b, t, p = y.shape
    if num.src.ndim != 2 or num.src.shape[0] != b:
        raise ChainError(f"{num.src.shape[0] if num.src.ndim == 2 else 'no'} numerator graphs for {b} sequences")
    for name, g in (("denominator", den), ("numerator", num)):
        if g.pdf.size and not isinstance(g.pdf, jax.core.Tracer) and (top := int(np.max(np.asarray(g.pdf)))) >= p:
            raise ChainError(f"the {name} graph has pdf {top}, the outputs only {p} pdfs")
    lengths = jnp.full((b,), t, jnp.int32) if lengths is None else jnp.asarray(lengths, jnp.int32)
    weights = jnp.ones((b,), y.dtype) if weights is None else jnp.asarray(weights, y.dtype)
    if lengths.shape != (b,) or weights.shape != (b,):
        raise ChainError(f"lengths {lengths.shape} and weights {weights.shape} must both have shape ({b},)")
    frames = weights * lengths.astype(y.dtype)
    default = DEFAULT_OBJF_PER_FRAME * frames
    leaky, out_of_range = float(options.leaky_hmm_coefficient), float(options.out_of_range_regularize)
    value, num_post = _objf_per_sequence(y, den, num, lengths, weights, default, leaky, out_of_range)
    mask = (jnp.arange(t)[None, :] < lengths[:, None])[:, :, None]
    l2 = options.l2_regularize
    squares = jnp.sum(weights[:, None, None] * jnp.where(mask, y, 0.0) ** 2)
    l2_term = -0.5 * l2 * squares if l2 else jnp.zeros((), y.dtype)
    num_post = jax.lax.stop_gradient(num_post)
    xent = jnp.zeros((), y.dtype)
    if xent_output is not None:
        if xent_output.shape != y.shape:
            raise ChainError(f"xent_output has shape {tuple(xent_output.shape)}, the chain output {tuple(y.shape)}")
        xent = jnp.sum(xent_output * num_post)
    objf = value.sum()
    total = objf + l2_term + options.xent_regularize * xent
    return ChainObjective(objf, l2_term, frames.sum(), num_post, xent, total)


def subsample(outputs: jax.Array, factor: int) -> jax.Array:
    """The rows a chain objective with frame-subsampling factor `factor` sees: frames 0, f, 2f, ... of
    `outputs` `[B, T, P]` computed at every input frame."""
    if not isinstance(factor, int) or factor < 1:
        raise ChainError(f"frame subsampling factor {factor!r} must be a positive integer")
    return outputs[:, ::factor]
