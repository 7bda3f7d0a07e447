"""A Computation call in groups of sequences (`compile(..., sequence_groups=k)`, symnet/_src/engine/groups.py)
against one group and the hand-written reference, each stepped by `jax.value_and_grad` as a JAX user writes it.

Workloads: W2 (BENCHMARKS.md: the 7-layer TDNN, 64 chunks of 150 output
frames), W3 (one LSTM layer, 32 sequences x 200 frames) and the 2-layer BLSTM
of `jax_grad.py`. Steps, all jitted with donated parameters and `optax.adam`
state: `reference` (the hand-written JAX network of benchmarks/workloads.py
or jax_grad.py) and `groups=k` for each k asked (a loss of
`compile(net, request, sequence_groups=k)(net, inputs)`). Within a round the
steps take turns (one step each, the order reversed every other turn); each
figure is a round's median step time over the reference's in that round.

`--forward` times the losses alone instead (symnet's: the forward of a
differentiated call, the value `jax.vjp` gives).

    python benchmarks/sequence_groups.py [--rounds 5] [--steps 6] [--groups 1 2 4] [--workloads w2 w3 blstm2]
        [--forward]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jax_grad
from machine import header
from symnet import IndexSet, Network
from symnet.engine import ComputationRequest, compile
from workloads import W2_SPLICES, _cross_entropy_delta, _kaldi_normalize, lstm_network, lstm_reference, w2_network


def cross_entropy(logp: jax.Array, labels: jax.Array) -> jax.Array:
    """The mean cross-entropy of every step, the reference's and symnet's alike (benchmarks/workloads.py's)."""
    return _cross_entropy_delta(logp, labels)[0]


def w2_case() -> tuple[Network, ComputationRequest, jax.Array, jax.Array, Callable]:
    """W2's network, request, inputs, labels and hand-written loss (benchmarks/workloads.py's `w2`)."""
    sequences, frames_out, outputs = 64, 150, 2000
    frames_in = frames_out + 20
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=sequences, t=(-10, frames_out + 10))},
        outputs={"output": IndexSet.range(n=sequences, t=frames_out)},
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((frames_in * sequences, 40)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, outputs, frames_out * sequences), jnp.int32)

    def reference_loss(p: dict, x: jax.Array) -> jax.Array:
        h = x.reshape(frames_in, sequences, 40)
        for i, offsets in enumerate(W2_SPLICES, start=1):
            lo, hi = -min(offsets), max(offsets)
            n = h.shape[0] - lo - hi
            spliced = jnp.concatenate([h[lo + o : lo + o + n] for o in offsets], axis=-1)
            h = _kaldi_normalize(jax.nn.relu(spliced @ p[f"tdnn{i}.w"] + p[f"tdnn{i}.b"]))
        logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, outputs)
        return cross_entropy(logp, labels)

    return w2_network(), request, x, labels, reference_loss


def recurrent_case(name: str) -> tuple[Network, ComputationRequest, jax.Array, jax.Array, Callable]:
    """W3 or the 2-layer BLSTM of benchmarks/jax_grad.py."""
    net, reference = (
        (lstm_network(jax_grad.DIM, jax_grad.CELLS, jax_grad.OUTPUTS, 0), lstm_reference)
        if name == "w3"
        else (jax_grad.blstm2_network(), jax_grad.blstm2_reference)
    )
    frames, sequences = jax_grad.FRAMES, jax_grad.SEQUENCES
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=sequences, t=frames)},
        outputs={"output": IndexSet.range(n=sequences, t=frames)},
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((frames * sequences, jax_grad.DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, jax_grad.OUTPUTS, frames * sequences), jnp.int32)

    def reference_loss(p: dict, x: jax.Array) -> jax.Array:
        h = reference(p, x.reshape(frames, sequences, jax_grad.DIM), jax_grad.CELLS)
        logp = jax.nn.log_softmax(h @ p["output.w"] + p["output.b"]).reshape(-1, jax_grad.OUTPUTS)
        return cross_entropy(logp, labels)

    return net, request, x, labels, reference_loss


def forwards(case: tuple, groups: list[int]) -> dict[str, Callable[[], jax.Array]]:
    """Jitted losses without their gradients (reference, then one per group count), each a thunk. Symnet's is
    the value `jax.vjp` gives of a loss of a call (the forward of a differentiated call, the one that runs in
    groups; XLA drops the unused backward)."""
    net, request, x, labels, reference_loss = case
    out = {"reference": jax.jit(reference_loss)}
    for k in groups:
        computation = compile(net, request, sequence_groups=k)

        def loss(p: dict, x: jax.Array, computation: Callable = computation) -> jax.Array:
            def of(p: dict) -> jax.Array:
                return cross_entropy(computation(net.replace(params=p), {"input": x})["output"], labels)

            return jax.vjp(of, p)[0]

        out[f"groups={k}"] = jax.jit(loss)
    params = jax.tree.map(jnp.array, net.params)
    return {name: (lambda f=f: jax.block_until_ready(f(params, x))) for name, f in out.items()}


def steps(case: tuple, groups: list[int]) -> dict[str, Callable[[], jax.Array]]:
    """Jitted training steps (reference, then one per group count), each a thunk running one step."""
    net, request, x, labels, reference_loss = case
    optimizer = optax.adam(1e-3)
    losses: dict[str, Callable] = {"reference": reference_loss}
    for k in groups:
        computation = compile(net, request, sequence_groups=k)

        def loss(p: dict, x: jax.Array, computation: Callable = computation) -> jax.Array:
            return cross_entropy(computation(net.replace(params=p), {"input": x})["output"], labels)

        losses[f"groups={k}"] = loss
    return {
        name: jax_grad.training_thunk(jax.value_and_grad(loss), net.params, optimizer, x)
        for name, loss in losses.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per round and step kind")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workloads", nargs="+", default=["w2", "w3", "blstm2"], choices=["w2", "w3", "blstm2"])
    parser.add_argument("--forward", action="store_true", help="time the losses alone, without gradients")
    args = parser.parse_args()
    print(f"{header()}; {jax.local_device_count()} device(s)")
    for name in args.workloads:
        case = w2_case() if name == "w2" else recurrent_case(name)
        thunks = (forwards if args.forward else steps)(case, args.groups)
        for run in thunks.values():  # compile and warm up
            run()
            run()
        kinds = list(thunks)
        seconds: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            times: dict[str, list[float]] = {k: [] for k in kinds}
            for i in range(args.steps):
                for kind in kinds[:: 1 if i % 2 == 0 else -1]:
                    start = time.perf_counter()
                    thunks[kind]()
                    times[kind].append(time.perf_counter() - start)
            for kind in kinds:
                seconds[kind].append(float(np.median(times[kind])))
        what = "loss" if args.forward else "step"
        print(f"\n{name}: | {what} | median ms per round | / reference per round | median |")
        print("|---|---|---|---|")
        for kind in kinds:
            ms = ", ".join(f"{1000 * s:.0f}" for s in seconds[kind])
            ratios = [a / b for a, b in zip(seconds[kind], seconds["reference"])]
            r = ", ".join(f"{v:.3f}" for v in ratios)
            print(f"| {kind} | {ms} | {r} | {np.median(ratios):.3f} |")
        if len(args.groups) > 1:
            base = f"groups={args.groups[0]}"
            for kind in kinds[2:]:
                per = ", ".join(f"{a / b:.3f}" for a, b in zip(seconds[kind], seconds[base]))
                print(f"{kind} / {base} per round: {per}")


if __name__ == "__main__":
    main()
