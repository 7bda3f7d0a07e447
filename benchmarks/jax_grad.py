"""`jax.value_and_grad` through a Computation call, as a JAX user writes a training step, against the Tape step
and the fastest of several hand-written `lax.scan` references (issue 29, item 1; issue 50).

Workloads: W3 (BENCHMARKS.md: one LSTM layer of 256 cells, 32 sequences x 200
frames, affine to 100, log-softmax, cross-entropy, `optax.adam(1e-3)`) and a
2-layer BLSTM of the same sizes (256 cells a direction). Each is written with
`IfDefined(Offset(Ref(...), -1))` as the docs teach. Steps, all jitted with
donated parameters and optimiser state:

- `reference VARIANT`: `jax.value_and_grad` of the hand-written `lax.scan` network, one per
  workloads.py's `RECURRENT_VARIANTS` (the input projection hoisted out of the
  scan or inside its body; the scan unrolled 1 or 4 frames a step);
- `tape`: `Computation.forward` + `tape.backward` (what `fit` runs);
- `jax.grad`: `jax.value_and_grad` of a loss of `computation(net, inputs)` (the default `gradient="tape"`);
- `jax autodiff`: the same with `compile(..., gradient="jax")`: JAX's own reverse mode of the lowered program.

Within a round the step kinds take a step each in turn (the order reversed
every other step); each figure is the median step time of a round divided by the
fastest reference variant's in the same round, in wall-clock and in process CPU
time (which other jobs on a shared machine move less). Before timing, every
variant's gradients and the `jax.grad` step's are compared with the first
variant's on 4 sequences of 20 frames.

    python benchmarks/jax_grad.py [--rounds 5] [--steps 10] [--workloads w3 blstm2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from machine import header
from recurrent import _named_lstm, lstm_layer
from symnet import Append, IndexSet, Input, LogSoftmax, Network
from symnet.engine import ComputationRequest, compile
from workloads import RECURRENT_VARIANTS, affine, lstm_network, lstm_reference

DIM, CELLS, OUTPUTS, SEQUENCES, FRAMES = 40, 256, 100, 32, 200


def blstm2_network(cells: int = CELLS, seed: int = 0) -> Network:
    """Two BLSTM layers (the second reads both directions of the first), then the affine output."""
    x = Input("input", DIM)
    h1 = Append(lstm_layer(x, "fw1", -1, cells), lstm_layer(x, "bw1", +1, cells))
    h2 = Append(lstm_layer(h1, "fw2", -1, cells, 2 * cells), lstm_layer(h1, "bw2", +1, cells, 2 * cells))
    return Network(LogSoftmax(affine(h2, 2 * cells, OUTPUTS, "output")), seed=seed)


def blstm2_reference(p: dict, x3: jax.Array, cells: int, variant: str = "hoisted") -> jax.Array:
    """`blstm2_network` as hand-written `lax.scan`s, each direction's in `variant` (workloads.py's `recurrence`)."""

    def layer(x: jax.Array, k: int) -> jax.Array:
        fw = lstm_reference(_named_lstm(p, f"fw{k}"), x, cells, variant)
        bw = lstm_reference(_named_lstm(p, f"bw{k}"), x[::-1], cells, variant)[::-1]
        return jnp.concatenate([fw, bw], axis=-1)

    return layer(layer(x3, 1), 2)


def cross_entropy(logp: jax.Array, labels: jax.Array) -> jax.Array:
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def steps(net: Network, reference: Callable) -> dict[str, Callable[[], jax.Array]]:
    """The jitted training steps of `net` (a reference per variant, then `tape`, `jax.grad`, `jax autodiff`), each a
    thunk that runs one step on its own parameters."""
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=SEQUENCES, t=FRAMES)},
        outputs={"output": IndexSet.range(n=SEQUENCES, t=FRAMES)},
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((FRAMES * SEQUENCES, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, FRAMES * SEQUENCES), jnp.int32)
    optimizer = optax.adam(1e-3)
    by_tape, by_jax = compile(net, request), compile(net, request, gradient="jax")

    def reference_loss(variant: str) -> Callable:
        def loss(p: dict, x: jax.Array) -> jax.Array:
            h = reference(p, x.reshape(FRAMES, SEQUENCES, DIM), CELLS, variant)
            return cross_entropy(jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, OUTPUTS), labels)

        return loss

    def call_loss(computation: Callable) -> Callable:
        def loss(p: dict, x: jax.Array) -> jax.Array:
            return cross_entropy(computation(net.replace(params=p), {"input": x})["output"], labels)

        return loss

    def tape_value_and_grad(p: dict, x: jax.Array) -> tuple[jax.Array, dict]:
        tape = by_tape.forward(net.replace(params=p), {"input": x})["output"]
        loss, delta = jax.value_and_grad(cross_entropy)(tape.value, labels)
        return loss, tape.backward(delta)

    value_and_grads = {
        **{f"reference {v}": jax.value_and_grad(reference_loss(v)) for v in RECURRENT_VARIANTS},
        "tape": tape_value_and_grad,
        "jax.grad": jax.value_and_grad(call_loss(by_tape)),
        "jax autodiff": jax.value_and_grad(call_loss(by_jax)),
    }
    return {name: training_thunk(v, net.params, optimizer, x) for name, v in value_and_grads.items()}


def training_thunk(
    value_and_grad: Callable, params: dict, optimizer: optax.GradientTransformation, x: jax.Array
) -> Callable[[], jax.Array]:
    """A jitted training step (`value_and_grad(params, x)`, then `optimizer`) on its own copy of `params`, with
    donated parameters and optimiser state: a thunk that runs one step and returns the loss (blocking)."""

    def step(p: dict, s: optax.OptState, x: jax.Array) -> tuple:
        loss, grads = value_and_grad(p, x)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    own = jax.tree.map(jnp.array, params)
    state = [own, optimizer.init(own)]

    def run() -> jax.Array:
        state[0], state[1], loss = jitted(state[0], state[1], x)
        return jax.block_until_ready(loss)

    return run


def check_gradients(net: Network, reference: Callable) -> dict[str, float]:
    """The largest relative difference of each reference variant's gradients, and of the `jax.grad` step's, from
    the first variant's, on 4 sequences of 20 frames."""
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=4, t=20)}, outputs={"output": IndexSet.range(n=4, t=20)}
    )
    computation = compile(net, request)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((80, DIM)), jnp.float32)

    def of_reference(variant: str) -> Callable:
        def loss(p: dict) -> jax.Array:
            h = reference(p, x.reshape(20, 4, DIM), CELLS, variant)
            return jnp.sum(jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]))

        return loss

    def of_call(p: dict) -> jax.Array:
        return jnp.sum(computation(net.replace(params=p), {"input": x})["output"])

    first, *variants = RECURRENT_VARIANTS
    want = jax.grad(of_reference(first))(dict(net.params))
    losses = {v: of_reference(v) for v in variants} | {"jax.grad": of_call}
    out = {}
    for name, loss in losses.items():
        got = jax.grad(loss)(dict(net.params))
        out[name] = max(float(jnp.max(jnp.abs(got[k] - want[k])) / (jnp.max(jnp.abs(want[k])) + 1e-12)) for k in want)
    return out


def timed_rounds(thunks: dict[str, Callable[[], jax.Array]], rounds: int, steps: int) -> list[dict[str, tuple]]:
    """Per round, each step kind's median (wall-clock, process CPU) time of `steps` steps, seconds; the kinds take
    a step each in turn (the order reversed every other step), after two warm-up steps each."""
    for run in thunks.values():  # compile and warm up
        run()
        run()
    out = []
    for _ in range(rounds):
        wall: dict[str, list[float]] = {kind: [] for kind in thunks}
        cpu: dict[str, list[float]] = {kind: [] for kind in thunks}
        for i in range(steps):
            for kind in list(thunks)[:: 1 if i % 2 == 0 else -1]:
                start, start_cpu = time.perf_counter(), time.process_time()
                thunks[kind]()
                wall[kind].append(time.perf_counter() - start)
                cpu[kind].append(time.process_time() - start_cpu)
        out.append({kind: (float(np.median(wall[kind])), float(np.median(cpu[kind]))) for kind in thunks})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and step kind")
    parser.add_argument("--workloads", nargs="+", default=["w3", "blstm2"], choices=["w3", "blstm2"])
    args = parser.parse_args()
    nets = {
        "w3": (lstm_network(DIM, CELLS, OUTPUTS, 0), lstm_reference),
        "blstm2": (blstm2_network(), blstm2_reference),
    }
    print(header())
    print(f"{SEQUENCES} sequences x {FRAMES} frames, {CELLS} cells")
    for name in args.workloads:
        net, reference = nets[name]
        differences = ", ".join(f"{k} {v:.1e}" for k, v in check_gradients(net, reference).items())
        print(f"\n{name}: gradients against the reference {next(iter(RECURRENT_VARIANTS))}: {differences}")
        rounds = timed_rounds(steps(net, reference), args.rounds, args.steps)
        references = [k for k in rounds[0] if k.startswith("reference")]
        print("| step | median ms (per round) | / fastest reference (per round) | CPU time / least (per round) |")
        print("|---|---|---|---|")
        for kind in rounds[0]:
            ms = ", ".join(f"{1000 * r[kind][0]:.1f}" for r in rounds)
            wall = ", ".join(f"{r[kind][0] / min(r[k][0] for k in references):.2f}" for r in rounds)
            cpu = ", ".join(f"{r[kind][1] / min(r[k][1] for k in references):.2f}" for r in rounds)
            print(f"| {kind} | {ms} | {wall} | {cpu} |")
        fastest = ", ".join(min(references, key=lambda k: r[k][0]).removeprefix("reference ") for r in rounds)
        print(f"fastest reference per round: {fastest}")
        grad_over_tape = ", ".join(f"{r['jax.grad'][0] / r['tape'][0]:.2f}" for r in rounds)
        print(f"jax.grad / tape per round: {grad_over_tape}")


if __name__ == "__main__":
    main()
