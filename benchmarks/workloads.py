"""The benchmark workloads W1, W2, W3 (docs/performance.md describes them): each with symnet and as hand-written JAX.

Each builder returns a `Workload`: a symnet train step (`Computation.forward`
+ `tape.backward` + optax, one `jax.jit` with donated buffers) and the
reference train step (slices along time, `lax.scan`, `jax.value_and_grad`),
sharing the initial parameters and data so both do the same math.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
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
    ReLU,
    Sigmoid,
    Tanh,
    Weight,
)
from symnet.components import NormalizeComponent
from symnet.engine import ComputationRequest, compile


@attrs.define
class Workload:
    name: str
    symnet_step: Callable[[], Any]  # runs one step, returns the loss (blocks)
    reference_step: Callable[[], Any]
    symnet_hlo: Callable[[], str]
    symnet_hlo_compile: Callable[[], Any]
    computation: Any


def affine(x, fan_in: int, fan_out: int, name: str):
    """`x @ W + b` with W drawn from Normal(0, 1/sqrt(fan_in)) and b from Normal(0, 0.1) (standard deviations)."""
    w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
    b = Weight(Normal((fan_out,), 0.1), name=f"{name}.b")
    return x @ w + b


def splice(x, offsets):
    parts = [x if o == 0 else Offset(x, o) for o in offsets]
    return parts[0] if len(parts) == 1 else Append(*parts)


def _cross_entropy_delta(logp: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean cross-entropy and its derivative with respect to the log-probabilities."""
    onehot = jax.nn.one_hot(labels, logp.shape[-1], dtype=logp.dtype)
    count = logp.shape[0]
    return -(onehot * logp).sum() / count, -onehot / count


def _make_steps(
    net: Network, computation, optimizer, inputs: dict, labels: jax.Array, reference_loss, through: str = "tape"
):
    """Jitted symnet and reference train steps with donated parameters and optimiser state. The symnet step's
    gradient comes `through` the Tape (`Computation.forward` + `tape.backward`, what `fit` runs) or
    `jax.value_and_grad` of a loss of a Computation call (`jax.grad`: what a JAX user writes)."""
    if through not in ("tape", "jax.grad"):
        raise ValueError(f"through must be 'tape' or 'jax.grad', got {through!r}")

    def call_loss(params, inputs, labels):
        return _cross_entropy_delta(computation(net.replace(params=params), inputs)["output"], labels)[0]

    def symnet_step(params, opt_state, inputs, labels):
        if through == "tape":
            tape = computation.forward(net.replace(params=params), inputs)["output"]
            loss, delta = _cross_entropy_delta(tape.value, labels)
            grads = tape.backward(delta)
        else:
            loss, grads = jax.value_and_grad(call_loss)(params, inputs, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def reference_step(params, opt_state, inputs, labels):
        loss, grads = jax.value_and_grad(reference_loss)(params, inputs, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    state = {}
    for key, fn in (("symnet", symnet_step), ("reference", reference_step)):
        params = jax.tree.map(jnp.array, net.params)
        state[key] = [jax.jit(fn, donate_argnums=(0, 1)), params, optimizer.init(params)]

    def runner(key):
        def run():
            jitted, params, opt_state = state[key]
            params, opt_state, loss = jitted(params, opt_state, inputs, labels)
            state[key][1:] = [params, opt_state]
            return jax.block_until_ready(loss)

        return run

    def lowered():
        return jax.jit(symnet_step).lower(net.params, optimizer.init(net.params), inputs, labels)

    return runner("symnet"), runner("reference"), lambda: lowered().as_text(), lambda: lowered().compile()


def w1(num_sequences: int = 256, seed: int = 0) -> Workload:
    """Kaldi's documentation example: splice (-1, 0, 1, 2) of dim 12, affine 48->65, ReLU, affine 65->115."""
    x = Input("input", 12)
    h = ReLU(affine(splice(x, (-1, 0, 1, 2)), 48, 65, "affine1"))
    net = Network(LogSoftmax(affine(h, 65, 115, "affine2")), seed=seed)
    frames_in, frames_out = 20, 17
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=num_sequences, t=frames_in)},
        outputs={"output": IndexSet.range(n=num_sequences, t=(1, 1 + frames_out))},
    )
    computation = compile(net, request)
    rng = np.random.default_rng(seed)
    feats = jnp.asarray(rng.standard_normal((frames_in * num_sequences, 12)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 115, frames_out * num_sequences), jnp.int32)

    def reference_loss(p, inputs, labels):
        x3 = inputs["input"].reshape(frames_in, num_sequences, 12)
        spliced = jnp.concatenate([x3[0:17], x3[1:18], x3[2:19], x3[3:20]], axis=-1)
        h = jax.nn.relu(spliced @ p["affine1.w"] + p["affine1.b"])
        logp = jax.nn.log_softmax(h @ p["affine2.w"] + p["affine2.b"]).reshape(-1, 115)
        return _cross_entropy_delta(logp, labels)[0]

    s, r, hlo, xla = _make_steps(net, computation, optax.sgd(0.01), {"input": feats}, labels, reference_loss)
    return Workload("W1 seed", s, r, hlo, xla, computation)


W2_SPLICES = ((-2, -1, 0, 1, 2), (-1, 0, 1), (-1, 0, 1), (-3, 0, 3), (-3, 0, 3), (0,))


def w2_network(width: int = 512, outputs: int = 2000, seed: int = 0) -> Network:
    """The 7-layer TDNN W2: six splice/affine/ReLU/normalise layers and a softmax layer."""
    h, dim = Input("input", 40), 40
    for i, offsets in enumerate(W2_SPLICES, start=1):
        relu = ReLU(affine(splice(h, offsets), dim * len(offsets), width, f"tdnn{i}"))
        h = NormalizeComponent(f"tdnn{i}.norm", relu, width, width)
        dim = width
    return Network(LogSoftmax(affine(h, width, outputs, "output")), seed=seed)


def w2(
    num_sequences: int = 64,
    frames_out: int = 150,
    width: int = 512,
    outputs: int = 2000,
    seed: int = 0,
    lowering: str = "auto",
    through: str = "tape",
) -> Workload:
    """The 7-layer TDNN, context (10, 10), `num_sequences` chunks of `frames_out` output frames; `lowering`
    `plain` keeps its splices as slices and a concatenation (`auto`: dilated convolutions, engine/splice.py);
    `through` `jax.grad` takes the gradient by `jax.value_and_grad` of a Computation call (`_make_steps`)."""
    net = w2_network(width, outputs, seed)
    frames_in = frames_out + 20
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=num_sequences, t=(-10, frames_out + 10))},
        outputs={"output": IndexSet.range(n=num_sequences, t=frames_out)},
    )
    computation = compile(net, request, lowering)
    rng = np.random.default_rng(seed)
    feats = jnp.asarray(rng.standard_normal((frames_in * num_sequences, 40)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, outputs, frames_out * num_sequences), jnp.int32)

    def reference_loss(p, inputs, labels):
        h = inputs["input"].reshape(frames_in, num_sequences, 40)
        for i, offsets in enumerate(W2_SPLICES, start=1):
            lo, hi = -min(offsets), max(offsets)
            n = h.shape[0] - lo - hi
            spliced = jnp.concatenate([h[lo + o : lo + o + n] for o in offsets], axis=-1)
            h = jax.nn.relu(spliced @ p[f"tdnn{i}.w"] + p[f"tdnn{i}.b"])
            h = _kaldi_normalize(h)
        logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, outputs)
        return _cross_entropy_delta(logp, labels)[0]

    s, r, hlo, xla = _make_steps(net, computation, optax.adam(1e-3), {"input": feats}, labels, reference_loss, through)
    label = "W2 tdnn" + (f" ({lowering})" if lowering != "auto" else "")
    return Workload(label + (" (jax.value_and_grad)" if through != "tape" else ""), s, r, hlo, xla, computation)


def _kaldi_normalize(h: jax.Array) -> jax.Array:
    """Kaldi's NormalizeComponent with target-rms 1: `x / sqrt(max(mean(x^2), 2^-66))`."""
    return h * jax.lax.rsqrt(jnp.maximum(jnp.mean(h * h, axis=-1, keepdims=True), 2.0**-66))


def lstm_network(input_dim: int = 40, cells: int = 256, outputs: int = 100, seed: int = 0) -> Network:
    """One LSTM layer (gates i, f, g, o; no peepholes) written with IfDefined(Offset(., -1))."""
    x = Input("input", input_dim)
    h_prev = IfDefined(Offset(Ref("h"), -1))
    c_prev = IfDefined(Offset(Ref("c"), -1))
    wx = Weight(Normal((input_dim, 4 * cells), 1.0 / math.sqrt(input_dim)), name="lstm.wx")
    wh = Weight(Normal((cells, 4 * cells), 1.0 / math.sqrt(cells)), name="lstm.wh")
    b = Weight(Normal((4 * cells,), 0.1), name="lstm.b")
    gates = x @ wx + b + h_prev @ wh
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node("c", f * c_prev + i * g)
    h = Node("h", o * Tanh(c))
    return Network(LogSoftmax(affine(h, cells, outputs, "output")), seed=seed)


def lstm_reference(p: dict, x3: jax.Array, cells: int) -> jax.Array:
    """The same LSTM as a hand-written `lax.scan` with the input projection hoisted; `[T, N, cells]`."""
    xs = x3 @ p["lstm.wx"] + p["lstm.b"]

    def step(carry, x_t):
        h, c = carry
        z = x_t + h @ p["lstm.wh"]
        i, f = jax.nn.sigmoid(z[:, :cells]), jax.nn.sigmoid(z[:, cells : 2 * cells])
        g, o = jnp.tanh(z[:, 2 * cells : 3 * cells]), jax.nn.sigmoid(z[:, 3 * cells :])
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((x3.shape[1], cells), x3.dtype)
    return jax.lax.scan(step, (zeros, zeros), xs)[1]


def w3(num_sequences: int = 32, frames: int = 200, cells: int = 256, seed: int = 0) -> Workload:
    """One LSTM layer, 32 sequences x 200 frames, affine 256->100, log-softmax."""
    net = lstm_network(40, cells, 100, seed)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=num_sequences, t=frames)},
        outputs={"output": IndexSet.range(n=num_sequences, t=frames)},
    )
    computation = compile(net, request)
    rng = np.random.default_rng(seed)
    feats = jnp.asarray(rng.standard_normal((frames * num_sequences, 40)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 100, frames * num_sequences), jnp.int32)

    def reference_loss(p, inputs, labels):
        h = lstm_reference(p, inputs["input"].reshape(frames, num_sequences, 40), cells)
        logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, 100)
        return _cross_entropy_delta(logp, labels)[0]

    s, r, hlo, xla = _make_steps(net, computation, optax.adam(1e-3), {"input": feats}, labels, reference_loss)
    return Workload("W3 lstm", s, r, hlo, xla, computation)
