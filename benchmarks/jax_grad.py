"""`jax.value_and_grad` through a Computation call, as a JAX user writes a training step, against the Tape step
and a hand-written `lax.scan` reference (issue 29, item 1).

Workloads: W3 (BENCHMARKS.md: one LSTM layer of 256 cells, 32 sequences x 200
frames, affine to 100, log-softmax, cross-entropy, `optax.adam(1e-3)`) and a
2-layer BLSTM of the same sizes (256 cells a direction). Each is written with
`IfDefined(Offset(Ref(...), -1))` as the docs teach. Steps, all jitted with
donated parameters and optimiser state:

- `reference`: `jax.value_and_grad` of the hand-written `lax.scan` network;
- `tape`: `Computation.forward` + `tape.backward` (what `fit` runs);
- `jax.grad`: `jax.value_and_grad` of a loss of `computation(net, inputs)` (the default `gradient="tape"`);
- `jax autodiff`: the same with `compile(..., gradient="jax")`: JAX's own reverse mode of the lowered program.

Rounds are interleaved (every step of a round timed after the others of the
round before); each figure is the median step time of a round divided by the
reference's in the same round.

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

from recurrent import _named_lstm, lstm_layer
from symnet import Append, IndexSet, Input, LogSoftmax, Network
from symnet.engine import ComputationRequest, compile
from workloads import affine, lstm_network, lstm_reference

DIM, CELLS, OUTPUTS, SEQUENCES, FRAMES = 40, 256, 100, 32, 200


def blstm2_network(cells: int = CELLS, seed: int = 0) -> Network:
    """Two BLSTM layers (the second reads both directions of the first), then the affine output."""
    x = Input("input", DIM)
    h1 = Append(lstm_layer(x, "fw1", -1, cells), lstm_layer(x, "bw1", +1, cells))
    h2 = Append(lstm_layer(h1, "fw2", -1, cells, 2 * cells), lstm_layer(h1, "bw2", +1, cells, 2 * cells))
    return Network(LogSoftmax(affine(h2, 2 * cells, OUTPUTS, "output")), seed=seed)


def blstm2_reference(p: dict, x3: jax.Array, cells: int) -> jax.Array:
    def layer(x: jax.Array, k: int) -> jax.Array:
        fw = lstm_reference(_named_lstm(p, f"fw{k}"), x, cells)
        bw = lstm_reference(_named_lstm(p, f"bw{k}"), x[::-1], cells)[::-1]
        return jnp.concatenate([fw, bw], axis=-1)

    return layer(layer(x3, 1), 2)


def cross_entropy(logp: jax.Array, labels: jax.Array) -> jax.Array:
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def steps(net: Network, reference: Callable) -> dict[str, Callable[[], jax.Array]]:
    """The four jitted training steps of `net`, each a thunk that runs one step on its own parameters."""
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=SEQUENCES, t=FRAMES)},
        outputs={"output": IndexSet.range(n=SEQUENCES, t=FRAMES)},
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((FRAMES * SEQUENCES, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, FRAMES * SEQUENCES), jnp.int32)
    optimizer = optax.adam(1e-3)
    by_tape, by_jax = compile(net, request), compile(net, request, gradient="jax")

    def reference_loss(p: dict, x: jax.Array) -> jax.Array:
        h = reference(p, x.reshape(FRAMES, SEQUENCES, DIM), CELLS)
        return cross_entropy(jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, OUTPUTS), labels)

    def call_loss(computation: Callable) -> Callable:
        def loss(p: dict, x: jax.Array) -> jax.Array:
            return cross_entropy(computation(net.replace(params=p), {"input": x})["output"], labels)

        return loss

    def tape_value_and_grad(p: dict, x: jax.Array) -> tuple[jax.Array, dict]:
        tape = by_tape.forward(net.replace(params=p), {"input": x})["output"]
        loss, delta = jax.value_and_grad(cross_entropy)(tape.value, labels)
        return loss, tape.backward(delta)

    value_and_grads = {
        "reference": jax.value_and_grad(reference_loss),
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


def check_gradients(net: Network, reference: Callable) -> float:
    """The largest relative difference between the `jax.grad` step's and the reference's gradients."""
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=4, t=20)}, outputs={"output": IndexSet.range(n=4, t=20)}
    )
    computation = compile(net, request)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((80, DIM)), jnp.float32)
    ours = jax.grad(lambda p: jnp.sum(computation(net.replace(params=p), {"input": x})["output"]))(net.params)

    def theirs(p: dict) -> jax.Array:
        h = reference(p, x.reshape(20, 4, DIM), CELLS)
        return jnp.sum(jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]))

    ref = jax.grad(theirs)(dict(net.params))
    return max(float(jnp.max(jnp.abs(ours[k] - ref[k])) / (jnp.max(jnp.abs(ref[k])) + 1e-12)) for k in ref)


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
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {SEQUENCES} sequences x {FRAMES} frames, {CELLS} cells")
    for name in args.workloads:
        net, reference = nets[name]
        print(f"\n{name}: gradients of jax.grad vs the hand-written reference: {check_gradients(net, reference):.1e}")
        thunks = steps(net, reference)
        for run in thunks.values():  # compile and warm up
            run()
            run()
        ratios: dict[str, list[float]] = {k: [] for k in thunks if k != "reference"}
        seconds: dict[str, list[float]] = {k: [] for k in thunks}
        for _ in range(args.rounds):
            medians = {}
            for kind, run in thunks.items():
                times = []
                for _ in range(args.steps):
                    start = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - start)
                medians[kind] = float(np.median(times))
                seconds[kind].append(medians[kind])
            for kind in ratios:
                ratios[kind].append(medians[kind] / medians["reference"])
        print("| step | median ms (per round) | / reference (per round) | worst |")
        print("|---|---|---|---|")
        for kind in thunks:
            ms = ", ".join(f"{1000 * s:.1f}" for s in seconds[kind])
            if kind == "reference":
                print(f"| {kind} | {ms} | 1 | 1 |")
            else:
                r = ", ".join(f"{v:.2f}" for v in ratios[kind])
                print(f"| {kind} | {ms} | {r} | {max(ratios[kind]):.2f} |")
        tape, grad = np.array(seconds["tape"]), np.array(seconds["jax.grad"])
        print(f"jax.grad / tape per round: {', '.join(f'{v:.2f}' for v in grad / tape)}")


if __name__ == "__main__":
    main()
