"""Mixed precision on W3 (issue 29, item 2): a training step and the outputs under float32, bfloat16 and float16.

W3 (BENCHMARKS.md): one LSTM layer of 256 cells, 32 sequences x 200 frames,
affine to 100, log-softmax, cross-entropy, `optax.adam(1e-3)`. Each policy's
step is what `fit` runs (`Computation.forward` + `tape.backward` + optax, one
`jax.jit`, donated parameters and optimiser state), compiled with
`compile(..., precision=policy)`; parameters stay float32. Rounds are
interleaved; each ratio is the median step time of a policy over float32's,
measured in the same run. `max |out - float32|` is the largest difference of
the log-probabilities of one forward call from float32's.

On a CPU, 16-bit floats are emulated or converted around float32 kernels:
expect them slower, not faster. The figures for a GPU's tensor cores need a
GPU.

    python benchmarks/precision.py [--rounds 3] [--steps 3] [--sequences 32] [--frames 200]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from symnet import IndexSet
from symnet.engine import ComputationRequest, compile
from workloads import lstm_network

DIM, CELLS, OUTPUTS = 40, 256, 100
POLICIES = ("float32", "bfloat16", "float16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--frames", type=int, default=200)
    args = parser.parse_args()
    n, t = args.sequences, args.frames
    net = lstm_network(DIM, CELLS, OUTPUTS, seed=0)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=t)}, outputs={"output": IndexSet.range(n=n, t=t)}
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((t * n, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, t * n), jnp.int32)
    optimizer = optax.adam(1e-3)
    computations = {p: compile(net, request, precision=None if p == "float32" else p) for p in POLICIES}

    def make_step(computation):
        def step(params, opt_state):
            tape = computation.forward(net.replace(params=params), {"input": x})["output"]
            onehot = jax.nn.one_hot(labels, OUTPUTS, dtype=tape.value.dtype)
            loss = -(onehot * tape.value).sum() / len(labels)
            grads = tape.backward(-onehot / len(labels))
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return jax.jit(step, donate_argnums=(0, 1))

    state = {}
    for p, computation in computations.items():
        params = jax.tree.map(jnp.array, net.params)
        state[p] = [make_step(computation), params, optimizer.init(params)]
        jitted, params, opt_state = state[p]
        state[p][1:] = jitted(params, opt_state)[:2]  # compile and warm up
    outputs = {p: np.asarray(c(net, {"input": x})["output"]) for p, c in computations.items()}
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    for _ in range(args.rounds):
        for p in POLICIES:
            jitted, params, opt_state = state[p]
            for _ in range(args.steps):
                start = time.perf_counter()
                params, opt_state, loss = jitted(params, opt_state)
                jax.block_until_ready(loss)
                times[p].append(time.perf_counter() - start)
            state[p][1:] = [params, opt_state]
    base = float(np.median(times["float32"]))
    print(f"W3 ({n} sequences x {t} frames, {CELLS} cells) on {jax.devices()[0].device_kind}; {jax.__version__=}")
    print(f"{'policy':10} {'step ms':>9} {'vs float32':>11} {'max |out - float32|':>20}")
    for p in POLICIES:
        median = float(np.median(times[p]))
        diff = float(np.abs(outputs[p] - outputs["float32"]).max())
        print(f"{p:10} {median * 1e3:9.1f} {median / base:10.2f}x {diff:20.4f}")


if __name__ == "__main__":
    main()
