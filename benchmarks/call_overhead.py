"""Host time per call of a jitted step that calls a compiled Computation, against the same step in plain JAX.

    python benchmarks/call_overhead.py [--calls 3000] [--rounds 9]

The network is tiny (one 8x8 affine and a ReLU on 16 rows), so a call's time
is dispatch, not arithmetic. Rows, each a jitted function called in a loop
and blocked on at the end, in alternating order per round; medians over
rounds, microseconds per call:

- `jit(step(params))`: `computation(net.replace(params=params), inputs)` inside `jax.jit`;
- `jit(step(net))`: the same with the Network itself as the argument (a pytree);
- `plain JAX`: `relu(x @ w + b)` in `jax.jit`;
- `Computation call`: the Computation called directly, outside any user `jax.jit`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from symnet import IndexSet, Input, Network, Normal, ReLU, Weight, Zeros
from symnet.engine import ComputationRequest, compile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    x = Input("input", 8)
    net = Network(ReLU(x @ Weight(Normal((8, 8), 0.3), name="w") + Weight(Zeros(8), name="b")), seed=0)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=4, t=4)}, outputs={"output": IndexSet.range(n=4, t=4)}
    )
    computation = compile(net, request)
    rows = jnp.ones((16, 8))
    params = dict(net.params)

    @jax.jit
    def step_params(params: dict, rows: jax.Array) -> jax.Array:
        return computation(net.replace(params=params), {"input": rows})["output"]

    @jax.jit
    def step_net(net: Network, rows: jax.Array) -> jax.Array:
        return computation(net, {"input": rows})["output"]

    @jax.jit
    def plain(p: dict, rows: jax.Array) -> jax.Array:
        return jax.nn.relu(rows @ p["w"] + p["b"])

    calls: dict[str, Callable[[], object]] = {
        "jit(step(params))": lambda: step_params(params, rows),
        "jit(step(net))": lambda: step_net(net, rows),
        "plain JAX": lambda: plain(params, rows),
        "Computation call": lambda: computation(net, {"input": rows})["output"],
    }
    reference = np.asarray(plain(params, rows))
    for name, call in calls.items():
        np.testing.assert_allclose(np.asarray(call()), reference, rtol=1e-6, err_msg=name)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(args.rounds):
        for name, call in list(calls.items())[:: 1 if r % 2 else -1]:
            started = time.perf_counter()
            for _ in range(args.calls):
                out = call()
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - started) / args.calls * 1e6)
    base = float(np.median(times["plain JAX"]))
    print("| call | µs per call | ratio to plain JAX |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {np.median(values):.1f} | {np.median(values) / base:.2f} |")


if __name__ == "__main__":
    main()
