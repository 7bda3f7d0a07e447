"""Steady-state train step: `tape.backward` against `jax.value_and_grad`, on an MLP.

Both steps run the same symnet forward, the same loss (cross-entropy on a
LogSoftmax output) and the same optax Adam update inside one `jax.jit` with
donated parameter and optimiser buffers; they differ only in how the gradient
is computed: symnet's Tape walk, or JAX's autodiff of the same function. The
two are timed interleaved (A, B, B, A, ...) in one run, blocking on every
step's result, and the median step times are compared.

    python benchmarks/core_step.py [--steps N] [--batch B] [--hidden H]

`main()` returns the numbers as a dict; the script prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from symnet import Glorot, Identity, LayerTypeError, LogSoftmax, Network, ReLU, Tape, Weight, Zeros


def mlp(n_in: int, hidden: int, n_out: int) -> Network:
    """A two-hidden-layer MLP written as symnet expressions."""
    x = Identity()
    h1 = ReLU(x @ Weight(Glorot((n_in, hidden))) + Weight(Zeros(hidden)))
    h2 = ReLU(h1 @ Weight(Glorot((hidden, hidden))) + Weight(Zeros(hidden)))
    return Network(LogSoftmax(h2 @ Weight(Glorot((hidden, n_out))) + Weight(Zeros(n_out))))


def _forward(net: Network, x: jax.Array, params: dict[str, jax.Array]) -> Tape:
    try:
        return net.forward(x, params)
    except LayerTypeError:
        # Network.forward cannot yet take a traced array as input (it freezes the
        # input into a Literal); a Tape around the array is the accepted route.
        return net.forward(Tape(Identity(), x), params)


def make_steps(net: Network, optimizer: optax.GradientTransformation):
    """The two jitted train steps `(params, opt_state, x, y) -> (params, opt_state, loss)`."""

    def loss_of(log_probs: jax.Array, y: jax.Array) -> jax.Array:
        return -jnp.mean(jnp.sum(y * log_probs, axis=-1))

    def tape_step(params, opt_state, x, y):
        tape = _forward(net, x, params)
        loss = loss_of(tape.value, y)
        grads = tape.backward(-y / y.shape[0])
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def autodiff_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: loss_of(_forward(net, x, p).value, y))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return (
        jax.jit(tape_step, donate_argnums=(0, 1)),
        jax.jit(autodiff_step, donate_argnums=(0, 1)),
    )


def _copy(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), tree)


def _hlo_ops(step, *args) -> int:
    """The number of instructions in the compiled (optimised) XLA program of a step."""
    text = step.lower(*args).compile().as_text()
    return sum(1 for line in text.splitlines() if " = " in line and not line.lstrip().startswith(("HloModule", "//")))


def _relative_grad_error(net: Network, x: jax.Array, y: jax.Array) -> float:
    """max over parameters of |tape grad - jax.grad| / max |jax.grad|, at the initial parameters."""

    def loss(p):
        return -jnp.mean(jnp.sum(y * _forward(net, x, p).value, axis=-1))

    tape_grads = _forward(net, x, net.params).backward(-y / y.shape[0])
    ref = jax.grad(loss)(net.params)
    return max(
        float(jnp.max(jnp.abs(tape_grads[k] - ref[k])) / jnp.maximum(jnp.max(jnp.abs(ref[k])), 1e-30)) for k in ref
    )


def main(
    steps: int = 300,
    warmup: int = 20,
    batch: int = 256,
    n_in: int = 64,
    hidden: int = 256,
    n_out: int = 10,
    verbose: bool = True,
) -> dict[str, float]:
    """Run the benchmark; return median step times (ms), their ratio and checks."""
    if steps < 30:
        raise ValueError("steps must be at least 30")
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(batch, n_in)), jnp.float32)
    y = jax.nn.one_hot(rng.integers(0, n_out, size=batch), n_out, dtype=jnp.float32)
    net = mlp(n_in, hidden, n_out)
    optimizer = optax.adam(1e-3)
    tape_step, autodiff_step = make_steps(net, optimizer)

    # Same start, same result: one step of each from identical state.
    p0, s0 = net.params, optimizer.init(net.params)
    hlo_ops = {
        "tape": _hlo_ops(tape_step, p0, s0, x, y),
        "autodiff": _hlo_ops(autodiff_step, p0, s0, x, y),
    }
    grad_error = _relative_grad_error(net, x, y)

    runners = {"tape": [tape_step, _copy(p0), _copy(s0)], "autodiff": [autodiff_step, _copy(p0), _copy(s0)]}
    times: dict[str, list[float]] = {"tape": [], "autodiff": []}

    def run(name: str, record: bool) -> None:
        entry = runners[name]
        step, params, state = entry
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        jax.block_until_ready((params, state, loss))
        elapsed = time.perf_counter() - t0
        entry[1], entry[2] = params, state
        if record:
            times[name].append(elapsed)

    for i in range(warmup + steps):
        order = ("tape", "autodiff") if i % 2 == 0 else ("autodiff", "tape")
        for name in order:
            run(name, record=i >= warmup)

    tape_ms = statistics.median(times["tape"]) * 1e3
    autodiff_ms = statistics.median(times["autodiff"]) * 1e3
    result = {
        "tape_ms": tape_ms,
        "autodiff_ms": autodiff_ms,
        "ratio": tape_ms / autodiff_ms,
        "steps": float(steps),
        "tape_hlo_ops": float(hlo_ops["tape"]),
        "autodiff_hlo_ops": float(hlo_ops["autodiff"]),
        "relative_grad_error": grad_error,
    }
    if verbose:
        print(
            f"MLP {n_in}-{hidden}-{hidden}-{n_out}, batch {batch}, Adam; median of {steps} interleaved steps "
            f"after {warmup} warm-up, {jax.devices()[0].platform}\n"
        )
        print("| train step (one jax.jit) | median ms | vs value_and_grad | compiled HLO ops |")
        print("|---|---:|---:|---:|")
        print(f"| symnet tape.backward | {tape_ms:.3f} | {result['ratio']:.3f} | {hlo_ops['tape']} |")
        print(f"| jax.value_and_grad | {autodiff_ms:.3f} | 1.000 | {hlo_ops['autodiff']} |")
        print(f"\ngradients agree: max relative error {grad_error:.1e} (float32)")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    main(steps=args.steps, warmup=args.warmup, batch=args.batch, hidden=args.hidden)
