"""Attention at utterance length: `MultiHeadAttention` against hand-written JAX attention, forward and gradient.

One sequence of T frames through `MultiHeadAttention("att", x, heads, key_dim, window=...)` (the key, value,
query and position-bias projection, the attention, the output projection), windowed (`window=(64, 64)`) and
full (`window=None, max_frames=T`), T = 1,000 and 3,000 by default. The reference is the same function written
by hand: the same projection, the position biases put at their frames (a gather, or a pad-and-reshape skew:
whichever is faster in the run is the reference), `jax.nn.dot_product_attention` over all T x T pairs (XLA's
implementation; a band mask for the window), the output projection. Both are `jax.jit`ted functions of the
parameters and `[1, T, D]` features: symnet's calls `net.compute` on them (`jax.grad` through it for the
gradient, the sum of the output times a fixed random cotangent). The outputs and gradients are checked equal
first. Steps are interleaved within a round (after warm-up); each round reports the median of `--steps`; the
ratio is symnet's median over the reference's in the same round. Memory is XLA's planned temporary buffers of
each compiled program (`memory_analysis().temp_size_in_bytes`).

    python benchmarks/attention.py --rounds 3 --steps 10
    python benchmarks/attention.py --frames 1000 --cases windowed --plain   # the expansion too (before: slow)
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from symnet import Input, Network
from symnet.layers import MultiHeadAttention


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def network(dim: int, heads: int, key_dim: int, window: tuple[int, int] | None, frames: int) -> Network:
    options: dict[str, Any] = {"window": window} if window is not None else {"window": None, "max_frames": frames}
    net = Network(MultiHeadAttention("att", Input("input", dim), heads=heads, key_dim=key_dim, **options))
    rng = np.random.default_rng(0)
    params = {k: (0.3 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in net.params.items()}
    return net.replace(params=params)


def reference(
    heads: int, key_dim: int, left: int, right: int, frames: int, skew: bool
) -> Callable[[dict[str, jax.Array], jax.Array], jax.Array]:
    """The hand-written layer: `[1, T, D]` features to `[1, T, D]` outputs."""
    c = left + 1 + right
    t = frames
    rel = np.arange(t)[None, :] - np.arange(t)[:, None] + left  # context position of frame s for frame t
    band = (rel >= 0) & (rel < c)
    index = np.clip(rel, 0, c - 1)

    def positions(bias: jax.Array) -> jax.Array:  # [1, H, T, C] -> [1, H, T, T]: bias at its frame, -inf outside
        if not skew:
            gathered = jnp.take_along_axis(bias, jnp.asarray(np.broadcast_to(index, bias.shape[:2] + (t, t))), -1)
            return jnp.where(band, gathered, -jnp.inf)
        # Transformer-XL's relative shift: row r of [T, T + C'] flattened and re-cut at width T + C' - 1
        lo = left - (t - 1)  # column k of the padded rows is context position lo + k
        q = jnp.pad(bias, ((0, 0), (0, 0), (0, 0), (max(0, -lo), max(0, lo + 2 * t - c))), constant_values=-jnp.inf)
        q = q[..., max(0, lo) : max(0, lo) + 2 * t]
        flat = q.reshape(1, heads, 2 * t * t)[..., t - 1 : t - 1 + t * (2 * t - 1)]
        return flat.reshape(1, heads, t, 2 * t - 1)[..., :t]

    def layer(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        qkv = x @ p["att.qkv.linear_params"].T + p["att.qkv.bias_params"]
        per = qkv.reshape(1, t, heads, 3 * key_dim + c)
        k, v, q = per[..., :key_dim], per[..., key_dim : 2 * key_dim], per[..., 2 * key_dim : 3 * key_dim]
        bias = jnp.moveaxis(per[..., 3 * key_dim :], 1, 2)  # [1, H, T, C]
        y = jax.nn.dot_product_attention(
            q, k, v, bias=positions(bias), scale=1.0 / math.sqrt(key_dim), implementation="xla"
        )
        return y.reshape(1, t, heads * key_dim) @ p["att.out.linear_params"].T + p["att.out.bias_params"]

    return layer


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def temp_bytes(jitted: Any, *args: Any) -> int:
    analysis = jitted.lower(*args).compile().memory_analysis()
    return int(getattr(analysis, "temp_size_in_bytes", -1)) if analysis is not None else -1


def case(args: argparse.Namespace, name: str, frames: int) -> None:
    window = (args.window, args.window) if name == "windowed" else None
    net = network(args.dim, args.heads, args.key_dim, window, frames)
    left = right = args.window if window else frames - 1
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((1, frames, args.dim)).astype(np.float32))
    g = jnp.asarray(rng.standard_normal((1, frames, args.dim)).astype(np.float32))
    params = {k: jnp.asarray(v) for k, v in net.params.items()}

    def ours(lowering: str) -> Callable[[dict[str, jax.Array], jax.Array], jax.Array]:
        return lambda p, x: net.replace(params=p).compute(x, lowering=lowering)

    def grad_of(f: Callable[..., jax.Array]) -> Any:
        return jax.jit(jax.grad(lambda p, x: jnp.sum(f(p, x) * g)))

    contenders: dict[str, Callable[..., jax.Array]] = {"symnet": ours("auto")}
    if args.plain:
        contenders["symnet plain"] = ours("plain")
    refs = {
        "gather": reference(args.heads, args.key_dim, left, right, frames, skew=False),
        "skew": reference(args.heads, args.key_dim, left, right, frames, skew=True),
    }
    programs = {
        **{(k, "forward"): jax.jit(f) for k, f in {**contenders, **refs}.items()},
        **{(k, "gradient"): grad_of(f) for k, f in {**contenders, **refs}.items()},
    }
    want = programs["gather", "forward"](params, x)
    want_grad = programs["gather", "gradient"](params, x)
    for (who, what), prog in programs.items():
        got = prog(params, x)
        if what == "forward":
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=who)
        else:
            for key in want_grad:
                scale = float(jnp.max(jnp.abs(want_grad[key])))
                np.testing.assert_allclose(got[key], want_grad[key], rtol=2e-3, atol=2e-3 * scale, err_msg=who)
    memory = {key: temp_bytes(prog, params, x) for key, prog in programs.items()}
    for what in ("forward", "gradient"):
        names = [k for k, w in programs if w == what]
        rounds: dict[str, list[float]] = {k: [] for k in names}
        for _ in range(args.rounds):
            times: dict[str, list[float]] = {k: [] for k in names}
            for _ in range(args.steps):
                for k in names:  # interleaved
                    times[k].append(timed(lambda k=k, what=what: programs[k, what](params, x)))
            for k in names:
                rounds[k].append(statistics.median(times[k]))
        ref = [min(rounds["gather"][i], rounds["skew"][i]) for i in range(args.rounds)]
        fastest = "gather" if statistics.median(rounds["gather"]) <= statistics.median(rounds["skew"]) else "skew"
        for k in contenders:
            ratios = [a / b for a, b in zip(rounds[k], ref)]
            print(
                f"{name:8} T={frames:5} {what:8} {k:12} {1e3 * statistics.median(rounds[k]):9.1f} ms  reference "
                f"{1e3 * statistics.median(ref):8.1f} ms ({fastest} fastest)  ratio {statistics.median(ratios):.3f} "
                f"({', '.join(f'{r:.3f}' for r in ratios)})  temp {memory[k, what] / 2**20:8.1f} MiB  reference temp "
                f"gather {memory['gather', what] / 2**20:.1f} / skew {memory['skew', what] / 2**20:.1f} MiB",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--cases", nargs="+", default=["windowed", "full"], choices=["windowed", "full"])
    parser.add_argument("--window", type=int, default=64, help="frames each way of the windowed case")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--key-dim", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plain", action="store_true", help="also the expansion (lowering='plain'): slow, O(T^2)")
    args = parser.parse_args()
    print(f"{cpu_model()}, {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}")
    print(f"MultiHeadAttention dim {args.dim}, {args.heads} heads, key_dim {args.key_dim}; one sequence")
    for frames in args.frames:
        for name in args.cases:
            case(args, name, frames)


if __name__ == "__main__":
    main()
