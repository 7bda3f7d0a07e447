"""A chain TDNN-F's natural-gradient step with OpenBLAS's default threads and with one (`one_blas_thread`).

    python benchmarks/blas_threads.py [--sequences 32] [--rounds 5] [--steps 6]

The network is the digits recipe's chain TDNN-F (`benchmarks/digits_chain.py`'s xconfig, 40 input dims, 40
pdfs: 48 preconditioners), on `--sequences` chunks of 150 frames with its context, random input. The step is
jitted: forward to both outputs, backward from fixed derivatives inside a `natural_gradient.Preconditioning`
(the preconditioners' states come in and go out). Three steps are timed, each `--steps` times per round, the
median per round: the plain step (no natural gradient), a step where every preconditioner updates (its
`skipped` counter at update_period - 1: eigendecompositions and, where needed, re-orthogonalisation, which XLA
hands to LAPACK: scipy's OpenBLAS) and a step where none does. Rounds alternate OpenBLAS's default thread
count and `symnet.train.one_blas_thread()` (what `fit` trains inside), so both see the same machine load.
Prints per round and the median over rounds, with the CPU model.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Any

from machine import cpu_model, header


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6, help="timed calls of each step per round")
    args = p.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from digits_chain import xconfig
    from symnet import natural_gradient as ng
    from symnet._src.core.index import IndexSet
    from symnet._src.core.tape import backward
    from symnet.engine import ComputationRequest, compile
    from symnet.kaldi.xconfig import parse_xconfig_network
    from symnet.train import one_blas_thread

    print(header())
    net = parse_xconfig_network(xconfig(40, 40), seed=0)
    rng = np.random.default_rng(0)
    # Kaldi's output layers start at zero, which would zero every gradient below them: a trained-like start.
    net = net.replace(
        params={k: v + 0.05 * rng.standard_normal(v.shape).astype(np.float32) for k, v in net.params.items()}
    )
    left, right = net.context()
    n = args.sequences
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=(-left, 150 + right))},
        outputs={"output": IndexSet.range(n=n, t=150), "output-xent": IndexSet.range(n=n, t=150)},
    )
    computation = compile(net, request)
    x = jnp.asarray(rng.standard_normal((len(request.inputs["input"]), 40)).astype(np.float32))
    deltas = {
        o: jnp.asarray(rng.standard_normal((len(request.outputs[o]), 40)).astype(np.float32) * 1e-3)
        for o in request.outputs
    }

    def step(net: Any, states: Any, x: jax.Array, enabled: bool) -> Any:
        with ng.Preconditioning(states, enabled=enabled) as ctx:
            tapes = computation.forward(net, {"input": x})
            grads = backward([(tapes[o], deltas[o]) for o in deltas])
        return grads, ctx.states

    jitted = jax.jit(step, static_argnums=3)
    states = ng.init_states(net)
    for _ in range(12):  # past Kaldi's Init and its first 10 updates: from here update_period applies
        _, states = jitted(net, states, x, True)
    jax.block_until_ready(states)

    def counter(value: float) -> Any:
        return jax.tree.map(
            lambda s: s._replace(skipped=jnp.full_like(s.skipped, value)),
            states,
            is_leaf=lambda s: isinstance(s, ng.State),
        )

    cases = {
        "plain step": (states, False),
        "updating step": (counter(3.0), True),
        "skipping step": (counter(0.0), True),
    }

    def timed(case: str) -> float:
        s, enabled = cases[case]
        jax.block_until_ready(jitted(net, s, x, enabled))
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            jax.block_until_ready(jitted(net, s, x, enabled))
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    results: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for threads in ("default", "one"):
            with one_blas_thread() if threads == "one" else contextlib.nullcontext():
                for case in cases:
                    seconds = timed(case)
                    results.setdefault((threads, case), []).append(seconds)
                    print(f"round {r}: OpenBLAS threads {threads:>7}: {case}: {seconds:.3f} s", flush=True)
    print(f"\nmedian over {args.rounds} rounds, {cpu_model()}, {n} chunks of 150 frames:")
    print("| step | OpenBLAS default threads | one OpenBLAS thread |\n|---|---|---|")
    for case in cases:
        a, b = (statistics.median(results[(t, case)]) for t in ("default", "one"))
        print(f"| {case} | {a:.3f} s | {b:.3f} s |")


if __name__ == "__main__":
    main()
