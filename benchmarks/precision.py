"""Mixed precision (issue 29, item 2): a training step and the outputs under float32, bfloat16 and float16.

W3 (BENCHMARKS.md, the default): one LSTM layer of 256 cells, 32 sequences x
200 frames, affine to 100, log-softmax, cross-entropy, `optax.adam(1e-3)`.
`--workload w2`: the 7-layer TDNN W2 (512 wide, 2000 outputs, context
(10, 10)), 64 sequences x 150 output frames by default, whose products are
large enough for a GPU's tensor cores. Each policy's
step is what `fit` runs (`Computation.forward` + `tape.backward` + optax, one
`jax.jit`, donated parameters and optimiser state), compiled with
`compile(..., precision=policy)`; parameters stay float32. Rounds are
interleaved; each ratio is the median step time of a policy over float32's,
measured in the same run. `max |out - float32-highest|` is the largest
difference of the log-probabilities of one forward call from float32's with
every product at `jax.default_matmul_precision("highest")` (the
`float32-highest` row): on a GPU, JAX's default precision may run float32
products in TensorFloat-32, which the `float32` row shows.

On a CPU, 16-bit floats are emulated or converted around float32 kernels:
expect them slower, not faster. The figures for a GPU's tensor cores need a
GPU.

    python benchmarks/precision.py [--workload w3|w2] [--rounds 3] [--steps 3] [--sequences N] [--frames T]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from machine import header
from symnet import IndexSet
from symnet.engine import ComputationRequest, compile
from workloads import lstm_network, w2_network

DIM, CELLS = 40, 256
#: Per workload: default sequences, default (output) frames, outputs, frames of context either side.
WORKLOADS = {"w3": (32, 200, 100, 0), "w2": (64, 150, 2000, 10)}
#: `float32-highest` is no policy, its products at `jax.default_matmul_precision("highest")`: on a GPU, plain
#: float32 products may run in TensorFloat-32 (JAX's default precision); on a CPU the two are the same.
POLICIES = ("float32", "float32-highest", "bfloat16", "float16")


def matmul_precision(policy: str) -> contextlib.AbstractContextManager:
    return jax.default_matmul_precision("highest") if policy == "float32-highest" else contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sequences", type=int, help="default: the workload's")
    parser.add_argument("--frames", type=int, help="output frames a sequence; default: the workload's")
    args = parser.parse_args()
    default_n, default_t, OUTPUTS, context = WORKLOADS[args.workload]
    n, t = args.sequences or default_n, args.frames or default_t
    net = lstm_network(DIM, CELLS, OUTPUTS, seed=0) if args.workload == "w3" else w2_network(seed=0)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=(-context, t + context))}, outputs={"output": IndexSet.range(n=n, t=t)}
    )
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(((t + 2 * context) * n, DIM)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, OUTPUTS, t * n), jnp.int32)
    optimizer = optax.adam(1e-3)
    computations = {p: compile(net, request, precision=None if p.startswith("float32") else p) for p in POLICIES}

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
        with matmul_precision(p):
            state[p][1:] = jitted(params, opt_state)[:2]  # compile and warm up
    outputs = {}
    for p, computation in computations.items():
        with matmul_precision(p):
            outputs[p] = np.asarray(computation(net, {"input": x})["output"], np.float32)
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    for _ in range(args.rounds):
        for p in POLICIES:
            jitted, params, opt_state = state[p]
            with matmul_precision(p):
                for _ in range(args.steps):
                    start = time.perf_counter()
                    params, opt_state, loss = jitted(params, opt_state)
                    jax.block_until_ready(loss)
                    times[p].append(time.perf_counter() - start)
            state[p][1:] = [params, opt_state]
    base = float(np.median(times["float32"]))
    sizes = f"{CELLS} cells" if args.workload == "w3" else "512 wide"
    device = jax.devices()[0].device_kind
    print(header())
    print(f"{args.workload.upper()} ({n} sequences x {t} frames, {sizes}) on {device}")
    print(f"{'policy':16} {'step ms':>9} {'vs float32':>11} {'max |out - float32-highest|':>28}")
    for p in POLICIES:
        median = float(np.median(times[p]))
        diff = float(np.abs(outputs[p] - outputs["float32-highest"]).max())
        print(f"{p:16} {median * 1e3:9.2f} {median / base:10.2f}x {diff:28.2e}")


if __name__ == "__main__":
    main()
