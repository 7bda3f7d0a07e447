"""The benchmark workloads W1, W2, W3 (docs/performance.md describes them): each with symnet and as hand-written JAX.

Each builder returns a `Workload`: a symnet train step (`Computation.forward`
+ `tape.backward` + optax, one `jax.jit` with donated buffers) and several
hand-written reference train steps (`jax.value_and_grad`), one per reasonable
way to write the network in JAX, sharing the initial parameters and data so all
do the same math. A ratio is taken against the fastest of them (run_all.py), as
a user would pick that one:

- a spliced product (W1, W2; `SPLICE_VARIANTS`, `spliced`): slices concatenated
  then one product, a product per offset summed, or a dilated convolution over
  time on `[T, N, D]` or on `[N, T, D]` activations;
- a recurrence (W3 and recurrent.py's rows; `RECURRENT_VARIANTS`,
  `recurrence`): the input projection hoisted out of the `lax.scan` or inside
  its body, the scan unrolled 1 or 4 frames a step.
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
    """A benchmark row; each step is a thunk that runs one train step and returns its loss (blocking)."""

    name: str
    symnet_step: Callable[[], Any]
    references: dict[str, Callable[[], Any]]  # the hand-written variants' steps, by variant
    #: each variant's largest difference from the first variant in loss and gradients at the initial parameters,
    #: relative to the largest magnitude of each (run_all.py checks the variants at its --quick sizes)
    reference_differences: Callable[[], dict[str, float]]
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
    net: Network,
    computation,
    optimizer,
    inputs: dict,
    labels: jax.Array,
    reference_losses: dict[str, Callable],
    through: str = "tape",
):
    """Jitted symnet and reference train steps with donated parameters and optimiser state (one reference step
    per hand-written variant, by name), the variants' differences from the first one, and the symnet step's HLO
    text and compiled program: a `Workload`'s fields after its name. The symnet step's gradient comes `through`
    the Tape (`Computation.forward` + `tape.backward`, what `fit` runs) or `jax.value_and_grad` of a loss of a
    Computation call (`jax.grad`: what a JAX user writes)."""
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

    def reference_step(reference_loss):
        def step(params, opt_state, inputs, labels):
            loss, grads = jax.value_and_grad(reference_loss)(params, inputs, labels)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return step

    def runner(fn):
        jitted = jax.jit(fn, donate_argnums=(0, 1))
        params = jax.tree.map(jnp.array, net.params)
        state = [params, optimizer.init(params)]

        def run():
            state[0], state[1], loss = jitted(state[0], state[1], inputs, labels)
            return jax.block_until_ready(loss)

        return run

    def differences() -> dict[str, float]:
        (loss0, grads0), *others = [
            jax.jit(jax.value_and_grad(f))(net.params, inputs, labels) for f in reference_losses.values()
        ]

        def relative(a, b) -> float:
            return float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))

        return {
            name: max(relative(loss, loss0), *(relative(grads[k], grads0[k]) for k in grads0))
            for name, (loss, grads) in zip(list(reference_losses)[1:], others)
        }

    def lowered():
        return jax.jit(symnet_step).lower(net.params, optimizer.init(net.params), inputs, labels)

    references = {name: runner(reference_step(f)) for name, f in reference_losses.items()}
    return runner(symnet_step), references, differences, lambda: lowered().as_text(), lambda: lowered().compile()


#: The hand-written ways to write a spliced product, `Append(Offset(h, o) for o in offsets) @ w` (`spliced`).
SPLICE_VARIANTS = ("concat", "per-offset", "conv", "conv NTD")


def spliced(h: jax.Array, w: jax.Array, offsets: tuple[int, ...], variant: str) -> jax.Array:
    """`Append(Offset(h, o) for o in offsets) @ w` on the frames every offset reaches, `h` `[T, N, D]` (`[N, T, D]`
    for `conv NTD`), as `variant` writes it: `concat` slices along time concatenated then one product;
    `per-offset` a product per offset (`h[t + o] @ w_o`) summed; `conv` and `conv NTD` one
    `lax.conv_general_dilated` over time, the evenly spaced offsets as a kernel of `len(offsets)` taps dilated
    by their step (W2's (-3, 0, 3): 3 taps, dilation 3). A single offset is a plain product in every variant."""
    time_axis = 1 if variant == "conv NTD" else 0
    if variant.startswith("conv") and len(offsets) > 1:
        step = offsets[1] - offsets[0]
        if offsets != tuple(range(offsets[0], offsets[-1] + 1, step)):
            raise ValueError(f"a convolution needs evenly spaced offsets, got {offsets}")
        layout = "NWC" if time_axis else "WNC"
        kernel = w.reshape(len(offsets), h.shape[-1], -1)  # [taps, D, out]
        spec = (layout, "WIO", layout)
        return jax.lax.conv_general_dilated(h, kernel, (1,), "VALID", rhs_dilation=(step,), dimension_numbers=spec)
    lo, d = -min(offsets), h.shape[-1]
    n = h.shape[time_axis] - lo - max(offsets)
    parts = [jax.lax.slice_in_dim(h, lo + o, lo + o + n, axis=time_axis) for o in offsets]
    if variant != "per-offset":
        return jnp.concatenate(parts, axis=-1) @ w
    out = parts[0] @ w[:d]
    for j, part in enumerate(parts[1:], start=1):
        out = out + part @ w[j * d : (j + 1) * d]
    return out


def _frames_by_sequence(x: jax.Array, variant: str) -> jax.Array:
    """`x` `[T, N, ...]` as `variant` computes on it: `[N, T, ...]` for `conv NTD` (its own inverse)."""
    return jnp.swapaxes(x, 0, 1) if variant == "conv NTD" else x


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

    def reference_loss(variant: str):
        def loss(p, inputs, labels):
            x3 = _frames_by_sequence(inputs["input"].reshape(frames_in, num_sequences, 12), variant)
            h = jax.nn.relu(spliced(x3, p["affine1.w"], (-1, 0, 1, 2), variant) + p["affine1.b"])
            logp = jax.nn.log_softmax(h @ p["affine2.w"] + p["affine2.b"]).reshape(-1, 115)
            return _cross_entropy_delta(logp, _frames_by_sequence(labels.reshape(frames_out, -1), variant).ravel())[0]

        return loss

    losses = {v: reference_loss(v) for v in SPLICE_VARIANTS}
    steps = _make_steps(net, computation, optax.sgd(0.01), {"input": feats}, labels, losses)
    return Workload("W1 seed", *steps, computation)


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

    def reference_loss(variant: str):
        def loss(p, inputs, labels):
            h = _frames_by_sequence(inputs["input"].reshape(frames_in, num_sequences, 40), variant)
            for i, offsets in enumerate(W2_SPLICES, start=1):
                h = _kaldi_normalize(jax.nn.relu(spliced(h, p[f"tdnn{i}.w"], offsets, variant) + p[f"tdnn{i}.b"]))
            logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, outputs)
            return _cross_entropy_delta(logp, _frames_by_sequence(labels.reshape(frames_out, -1), variant).ravel())[0]

        return loss

    losses = {v: reference_loss(v) for v in SPLICE_VARIANTS}
    steps = _make_steps(net, computation, optax.adam(1e-3), {"input": feats}, labels, losses, through)
    label = "W2 tdnn" + (f" ({lowering})" if lowering != "auto" else "")
    return Workload(label + (" (jax.value_and_grad)" if through != "tape" else ""), *steps, computation)


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


#: The hand-written ways to write a recurrence (`recurrence`): (input projection hoisted out of the scan,
#: frames `lax.scan` unrolls a step).
RECURRENT_VARIANTS = {
    "hoisted": (True, 1),
    "hoisted unroll4": (True, 4),
    "in-body": (False, 1),
    "in-body unroll4": (False, 4),
}


def recurrence(project: Callable, cell: Callable, carry: Any, x3: jax.Array, variant: str) -> Any:
    """The outputs (`[T, ...]`) of `cell(carry, project(x_t)) -> (carry, out)` over the frames of `x3`
    (`[T, N, D]`) as `variant` writes it: `project` (the input projection) applied to every frame at once before
    the `lax.scan` (`hoisted`: one large product) or to `x_t` inside its body (`in-body`: `x_t @ Wx + h @ Wh`
    in the step), the scan unrolled 1 or 4 frames a step."""
    hoisted, unroll = RECURRENT_VARIANTS[variant]
    if hoisted:
        return jax.lax.scan(cell, carry, project(x3), unroll=unroll)[1]
    return jax.lax.scan(lambda c, x_t: cell(c, project(x_t)), carry, x3, unroll=unroll)[1]


def lstm_reference(p: dict, x3: jax.Array, cells: int, variant: str = "hoisted") -> jax.Array:
    """The same LSTM as a hand-written `lax.scan` (`recurrence`'s `variant`); `[T, N, cells]`."""

    def step(carry, xw_t):
        h, c = carry
        z = xw_t + h @ p["lstm.wh"]
        i, f = jax.nn.sigmoid(z[:, :cells]), jax.nn.sigmoid(z[:, cells : 2 * cells])
        g, o = jnp.tanh(z[:, 2 * cells : 3 * cells]), jax.nn.sigmoid(z[:, 3 * cells :])
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((x3.shape[1], cells), x3.dtype)
    return recurrence(lambda x: x @ p["lstm.wx"] + p["lstm.b"], step, (zeros, zeros), x3, variant)


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

    def reference_loss(variant: str):
        def loss(p, inputs, labels):
            h = lstm_reference(p, inputs["input"].reshape(frames, num_sequences, 40), cells, variant)
            logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, 100)
            return _cross_entropy_delta(logp, labels)[0]

        return loss

    losses = {v: reference_loss(v) for v in RECURRENT_VARIANTS}
    steps = _make_steps(net, computation, optax.adam(1e-3), {"input": feats}, labels, losses)
    return Workload("W3 lstm", *steps, computation)
