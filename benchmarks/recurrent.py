"""Recurrent variants beside W3 (extra rows; BENCHMARKS.md's workloads are unchanged): GRU, BLSTM, Kaldi's LSTM cell.

Each has W3's sizes (input dim 40, 256 cells, 32 sequences x 200 frames,
affine to 100 outputs, log-softmax, cross-entropy, `optax.adam(1e-3)`), is
written with `IfDefined(Offset(Ref(...), -1))` as a user would, and has
hand-written `lax.scan` references in each of workloads.py's
`RECURRENT_VARIANTS` (input projections hoisted out of the scan or inside its
body, the scan unrolled or not).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from symnet import (
    Append,
    DimRange,
    IfDefined,
    IndexSet,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    Sigmoid,
    Tanh,
    Weight,
)
from symnet.components import LstmNonlinearityComponent
from symnet.engine import ComputationRequest, compile
from workloads import (
    RECURRENT_VARIANTS,
    Workload,
    _cross_entropy_delta,
    _make_steps,
    affine,
    lstm_reference,
    recurrence,
)

DIM, CELLS, OUTPUTS = 40, 256, 100


def _weight(name: str, fan_in: int, shape: tuple[int, ...]) -> Weight:
    return Weight(Normal(shape, 1.0 / math.sqrt(fan_in)), name=name)


def _bias(name: str, dim: int) -> Weight:
    return Weight(Normal((dim,), 0.1), name=name)


def _prev(name: str, lag: int = -1):
    return IfDefined(Offset(Ref(name), lag))


def lstm_layer(x, name: str, lag: int, cells: int = CELLS, dim: int = DIM):
    """W3's LSTM, named, reading itself `lag` frames away (+1: the backward half of a BLSTM)."""
    gates = x @ _weight(f"{name}.wx", dim, (dim, 4 * cells)) + _bias(f"{name}.b", 4 * cells)
    gates = gates + _prev(f"{name}.h", lag) @ _weight(f"{name}.wh", cells, (cells, 4 * cells))
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node(f"{name}.c", f * _prev(f"{name}.c", lag) + i * g)
    return Node(f"{name}.h", o * Tanh(c))


def gru_network(cells: int = CELLS, seed: int = 0) -> Network:
    """A GRU: update and reset gates from one recurrent matrix, the candidate from the reset state."""
    x = Input("input", DIM)
    h_prev = _prev("h")
    zr = x @ _weight("gru.wzr", DIM, (DIM, 2 * cells)) + _bias("gru.bzr", 2 * cells)
    zr = zr + h_prev @ _weight("gru.uzr", cells, (cells, 2 * cells))
    z, r = Sigmoid(DimRange(zr, 0, cells)), Sigmoid(DimRange(zr, cells, cells))
    n = x @ _weight("gru.wn", DIM, (DIM, cells)) + _bias("gru.bn", cells)
    n = Tanh(n + (r * h_prev) @ _weight("gru.un", cells, (cells, cells)))
    h = Node("h", (1.0 - z) * n + z * h_prev)
    return Network(LogSoftmax(affine(h, cells, OUTPUTS, "output")), seed=seed)


def gru_reference(p: dict, x3: jax.Array, cells: int, variant: str) -> jax.Array:
    def project(x):
        return x @ p["gru.wzr"] + p["gru.bzr"], x @ p["gru.wn"] + p["gru.bn"]

    def step(h, xs):
        xzr_t, xn_t = xs
        zr = xzr_t + h @ p["gru.uzr"]
        z, r = jax.nn.sigmoid(zr[:, :cells]), jax.nn.sigmoid(zr[:, cells:])
        n = jnp.tanh(xn_t + (r * h) @ p["gru.un"])
        h = (1.0 - z) * n + z * h
        return h, h

    return recurrence(project, step, jnp.zeros((x3.shape[1], cells), x3.dtype), x3, variant)


def blstm_network(cells: int = CELLS, seed: int = 0) -> Network:
    """A bidirectional LSTM: one LSTM forward in time, one backward, side by side, then the affine output."""
    x = Input("input", DIM)
    both = Append(lstm_layer(x, "fw", -1, cells), lstm_layer(x, "bw", +1, cells))
    return Network(LogSoftmax(affine(both, 2 * cells, OUTPUTS, "output")), seed=seed)


def _named_lstm(p: dict, name: str) -> dict:
    return {"lstm.wx": p[f"{name}.wx"], "lstm.wh": p[f"{name}.wh"], "lstm.b": p[f"{name}.b"]}


def blstm_reference(p: dict, x3: jax.Array, cells: int, variant: str) -> jax.Array:
    fw = lstm_reference(_named_lstm(p, "fw"), x3, cells, variant)
    bw = lstm_reference(_named_lstm(p, "bw"), x3[::-1], cells, variant)[::-1]
    return jnp.concatenate([fw, bw], axis=-1)


def kaldi_lstm_network(cells: int = CELLS, seed: int = 0) -> Network:
    """Kaldi's fast-LSTM cell: one affine to the four gate parts, LstmNonlinearityComponent (with peepholes)."""
    x = Input("input", DIM)
    gates = x @ _weight("lstm.wx", DIM, (DIM, 4 * cells)) + _bias("lstm.b", 4 * cells)
    gates = gates + _prev("m") @ _weight("lstm.wm", cells, (cells, 4 * cells))
    peepholes = Weight(Normal((3, cells), 0.5), name="lstm.params")
    out = LstmNonlinearityComponent("lstm", Append(gates, _prev("c")), peepholes)
    m = Node("m", DimRange(out, cells, cells))
    both = Append(m, Node("c", DimRange(out, 0, cells)))
    return Network(LogSoftmax(affine(DimRange(both, 0, cells), cells, OUTPUTS, "output")), seed=seed)


def kaldi_lstm_reference(p: dict, x3: jax.Array, cells: int, variant: str) -> jax.Array:
    w_ic, w_fc, w_oc = p["lstm.params"]

    def step(carry, x_t):
        m, c = carry
        g = x_t + m @ p["lstm.wm"]
        i_part, f_part, c_part, o_part = (g[:, k * cells : (k + 1) * cells] for k in range(4))
        i = jax.nn.sigmoid(i_part + w_ic * c)
        f = jax.nn.sigmoid(f_part + w_fc * c)
        c = f * c + i * jnp.tanh(c_part)
        o = jax.nn.sigmoid(o_part + w_oc * c)
        m = o * jnp.tanh(c)
        return (m, c), m

    zeros = jnp.zeros((x3.shape[1], cells), x3.dtype)
    return recurrence(lambda x: x @ p["lstm.wx"] + p["lstm.b"], step, (zeros, zeros), x3, variant)


def _recurrent(
    name: str, net: Network, reference, width: int, num_sequences: int, frames: int, cells: int, seed: int
) -> Workload:
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=num_sequences, t=frames)},
        outputs={"output": IndexSet.range(n=num_sequences, t=frames)},
    )
    computation = compile(net, request)
    rng = np.random.default_rng(seed)
    feats = jnp.asarray(rng.standard_normal((frames * num_sequences, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, frames * num_sequences), jnp.int32)

    def reference_loss(variant: str):
        def loss(p, inputs, labels):
            h = reference(p, inputs["input"].reshape(frames, num_sequences, DIM), cells, variant)
            logp = jax.nn.log_softmax(h[..., :width] @ p["output.w"] + p["output.b"]).reshape(-1, OUTPUTS)
            return _cross_entropy_delta(logp, labels)[0]

        return loss

    losses = {v: reference_loss(v) for v in RECURRENT_VARIANTS}
    steps = _make_steps(net, computation, optax.adam(1e-3), {"input": feats}, labels, losses)
    return Workload(name, *steps, computation)


def gru(num_sequences: int = 32, frames: int = 200, cells: int = CELLS, seed: int = 0) -> Workload:
    return _recurrent("W3 gru", gru_network(cells, seed), gru_reference, cells, num_sequences, frames, cells, seed)


def blstm(num_sequences: int = 32, frames: int = 200, cells: int = CELLS, seed: int = 0) -> Workload:
    net = blstm_network(cells, seed)
    return _recurrent("W3 blstm", net, blstm_reference, 2 * cells, num_sequences, frames, cells, seed)


def kaldi_lstm(num_sequences: int = 32, frames: int = 200, cells: int = CELLS, seed: int = 0) -> Workload:
    net = kaldi_lstm_network(cells, seed)
    return _recurrent("W3 kaldi lstm", net, kaldi_lstm_reference, cells, num_sequences, frames, cells, seed)
