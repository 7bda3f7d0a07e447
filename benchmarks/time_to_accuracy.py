"""Time to a validation frame accuracy on the built-in task: symnet, hand-written JAX + optax, and PyTorch.

    python benchmarks/time_to_accuracy.py [--targets 0.80,0.84] [--max-steps 1500] [--eval-every 25]

All three train the same TDNN (splices (-2..2), (-1, 0, 1), (-3, 0, 3),
width 128, ReLU, log-softmax; context (6, 6)) from the same
initial parameters on the same minibatches of `symnet.datasets.HmmTask`
(4,000 training sequences cut into 20-frame chunks with their context, 128
chunks per step, Adam 3e-3), and are scored on the same 150 validation
sequences (frame accuracy over all their frames, chunked the same way)
every `--eval-every` steps. The clock counts training steps only (each
blocked on its result), compilation included (the first step's time is
printed on its own); evaluation is not timed.

symnet's step is the custom-loop step the docs teach (`Computation.forward`,
`tape.backward`, optax, one `jax.jit`); the JAX reference slices time in a
`[T, N, D]` array and takes `jax.value_and_grad`; PyTorch (if installed:
`pip install torch`) uses the same slicing with `torch.optim.Adam`, on as many
threads as JAX has cores. Per target, each framework's seconds and steps to
reach it are printed with the ratio to the JAX reference.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from symnet import Append, IndexSet, Input, LogSoftmax, Network, Normal, Offset, ReLU, Weight, Zeros
from symnet.datasets import HmmTask
from symnet.engine import ComputationRequest, compile
from symnet.train import make_chunks

SPLICES = ((-2, -1, 0, 1, 2), (-1, 0, 1), (-3, 0, 3))
CONTEXT = sum(-min(s) for s in SPLICES)  # 6 frames each side
WIDTH, CHUNK, BATCH, LR = 128, 20, 128, 3e-3


def symnet_network(feat_dim: int, classes: int) -> Network:
    """The TDNN in symnet's expressions (weights `tdnn{i}.w`, `tdnn{i}.b`, `output.w`, `output.b`)."""
    h, dim = Input("input", feat_dim), feat_dim
    for i, offsets in enumerate(SPLICES, start=1):
        spliced = Append(*[h if o == 0 else Offset(h, o) for o in offsets])
        w = Weight(Normal((dim * len(offsets), WIDTH), 1.0 / math.sqrt(dim * len(offsets))), name=f"tdnn{i}.w")
        h = ReLU(spliced @ w + Weight(Zeros(WIDTH), name=f"tdnn{i}.b"))
        dim = WIDTH
    w = Weight(Normal((WIDTH, classes), 1.0 / math.sqrt(WIDTH)), name="output.w")
    return Network(LogSoftmax(h @ w + Weight(Zeros(classes), name="output.b")), seed=0)


def reference_logits(p: dict, x: jax.Array) -> jax.Array:
    """The same TDNN by hand: `x` is `[CHUNK + 2 * CONTEXT, N, D]`; log-probabilities `[CHUNK, N, classes]`."""
    h = x
    for i, offsets in enumerate(SPLICES, start=1):
        lo, hi = -min(offsets), max(offsets)
        n = h.shape[0] - lo - hi
        h = jax.nn.relu(
            jnp.concatenate([h[lo + o : lo + o + n] for o in offsets], -1) @ p[f"tdnn{i}.w"] + p[f"tdnn{i}.b"]
        )
    return jax.nn.log_softmax(h @ p["output.w"] + p["output.b"])


def masked_loss(logp: jax.Array, labels: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean cross-entropy over real frames and its derivative with respect to `logp` (all `[rows, ...]`)."""
    total = jnp.maximum(weights.sum(), 1.0)
    onehot = jax.nn.one_hot(labels, logp.shape[-1], dtype=logp.dtype)
    return -(weights * (onehot * logp).sum(-1)).sum() / total, -onehot * (weights / total)[:, None]


class Runner:
    """One framework's `step(batch) -> loss` (blocking) and `accuracy(params) -> float` on the validation chunks."""

    def __init__(self, name: str, step: Callable[[tuple], float], accuracy: Callable[[], float]):
        self.name, self.step, self.accuracy = name, step, accuracy


def symnet_runner(net: Network, valid: tuple) -> Runner:
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=BATCH, t=(-CONTEXT, CHUNK + CONTEXT))},
        outputs={"output": IndexSet.range(n=BATCH, t=CHUNK)},
    )
    computation = compile(net, request)
    optimizer = optax.adam(LR)

    @jax.jit
    def step(params, opt_state, x, labels, weights):
        tape = computation.forward(net.replace(params=params), {"input": x})["output"]
        loss, delta = masked_loss(tape.value, labels, weights)
        updates, opt_state = optimizer.update(tape.backward(delta), opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def correct(params, x, labels, weights):
        logp = computation(net.replace(params=params), {"input": x})["output"]
        return (weights * (jnp.argmax(logp, -1) == labels)).sum()

    state = [net.params, optimizer.init(net.params)]

    def run(batch: tuple) -> float:
        x, labels, weights = batch  # [T_in, N, D], [T, N], [T, N]
        params, opt_state, loss = step(*state, x.reshape(-1, x.shape[-1]), labels.reshape(-1), weights.reshape(-1))
        state[:] = [params, opt_state]
        return float(loss)

    def accuracy() -> float:
        hits = sum(
            float(correct(state[0], x.reshape(-1, x.shape[-1]), y.reshape(-1), w.reshape(-1))) for x, y, w in valid
        )
        return hits / sum(float(w.sum()) for _, _, w in valid)

    return Runner("symnet", run, accuracy)


def jax_runner(params: dict, valid: tuple) -> Runner:
    optimizer = optax.adam(LR)

    def loss_fn(p, x, labels, weights):
        logp = reference_logits(p, x)
        return masked_loss(logp.reshape(-1, logp.shape[-1]), labels.reshape(-1), weights.reshape(-1))[0]

    @jax.jit
    def step(p, opt_state, x, labels, weights):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, labels, weights)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss

    @jax.jit
    def correct(p, x, labels, weights):
        return (weights * (jnp.argmax(reference_logits(p, x), -1) == labels)).sum()

    state = [jax.tree.map(jnp.array, params), optimizer.init(params)]

    def run(batch: tuple) -> float:
        p, opt_state, loss = step(*state, *batch)
        state[:] = [p, opt_state]
        return float(loss)

    def accuracy() -> float:
        return sum(float(correct(state[0], *b)) for b in valid) / sum(float(w.sum()) for _, _, w in valid)

    return Runner("JAX + optax", run, accuracy)


def torch_runner(params: dict, valid: tuple) -> Runner | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    p = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in params.items()}
    optimizer = torch.optim.Adam(list(p.values()), lr=LR)

    def logits(x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, offsets in enumerate(SPLICES, start=1):
            lo, hi = -min(offsets), max(offsets)
            n = h.shape[0] - lo - hi
            h = torch.relu(torch.cat([h[lo + o : lo + o + n] for o in offsets], -1) @ p[f"tdnn{i}.w"] + p[f"tdnn{i}.b"])
        return torch.log_softmax(h @ p["output.w"] + p["output.b"], -1)

    def run(batch: tuple) -> float:
        x, labels, weights = (torch.from_numpy(np.asarray(b)) for b in batch)
        logp = logits(x)
        picked = logp.gather(-1, labels.long()[..., None])[..., 0]
        loss = -(weights * picked).sum() / weights.sum().clamp(min=1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    def accuracy() -> float:
        with torch.no_grad():
            hits = 0.0
            for x, y, w in valid:
                pred = logits(torch.from_numpy(np.asarray(x))).argmax(-1)
                hits += float((torch.from_numpy(np.asarray(w)) * (pred == torch.from_numpy(np.asarray(y)))).sum())
        return hits / sum(float(w.sum()) for _, _, w in valid)

    return Runner(f"PyTorch {torch.__version__}", run, accuracy)


def batches(chunks, order: np.ndarray) -> list[tuple]:
    """Minibatches `([T_in, N, D], [T, N], [T, N])` in `order`, full ones only."""
    out = []
    for start in range(0, len(order) - BATCH + 1, BATCH):
        idx = order[start : start + BATCH]
        out.append(
            (
                np.ascontiguousarray(chunks.features[idx].transpose(1, 0, 2)),
                np.ascontiguousarray(chunks.targets[idx].T.astype(np.int32)),
                np.ascontiguousarray(chunks.weights[idx].T),
            )
        )
    return out


def race(runner: Runner, train: list[tuple], targets: list[float], max_steps: int, eval_every: int) -> dict:
    """Train until the last target is reached or `max_steps`; per target (seconds, steps) or None."""
    reached: dict[float, tuple[float, int] | None] = {t: None for t in targets}
    clock, step, best, first = 0.0, 0, 0.0, 0.0
    while step < max_steps and reached[targets[-1]] is None:
        batch = train[step % len(train)]
        started = time.perf_counter()
        runner.step(batch)
        clock += time.perf_counter() - started
        step += 1
        first = first or clock  # the first step includes compilation
        if step % eval_every == 0:
            acc = runner.accuracy()
            best = max(best, acc)
            for t in targets:
                if reached[t] is None and acc >= t:
                    reached[t] = (clock, step)
    return {"reached": reached, "best": best, "seconds": clock, "steps": step, "first": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="0.80,0.84", help="validation accuracies, ascending")
    parser.add_argument("--max-steps", type=int, default=1500)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--sequences", type=int, default=4000, help="training sequences")
    args = parser.parse_args()
    targets = sorted(float(t) for t in args.targets.split(","))

    task = HmmTask.create(seed=0)
    data, held_out = task.sample(args.sequences, seed=1), task.sample(150, seed=2)
    chunks = make_chunks(data.features, data.labels, chunk=CHUNK, left=CONTEXT, right=CONTEXT)
    valid_chunks = make_chunks(held_out.features, held_out.labels, chunk=CHUNK, left=CONTEXT, right=CONTEXT)
    train = batches(chunks, np.random.default_rng(0).permutation(len(chunks)))
    pad = (-len(valid_chunks)) % BATCH  # the last validation batch filled with weightless copies
    order = np.concatenate([np.arange(len(valid_chunks)), np.zeros(pad, np.int64)])
    valid = batches(valid_chunks, order)
    for i in range(1, pad + 1):
        valid[-1][2][:, -i] = 0.0
    net = symnet_network(task.feat_dim, task.num_states)
    params = {k: np.asarray(v) for k, v in net.params.items()}
    print(
        f"HmmTask: {len(data)} training sequences ({len(train)} minibatches of {BATCH} x {CHUNK} frames), "
        f"{held_out.num_frames} validation frames; Bayes limit {task.bayes_accuracy(held_out):.3f}; "
        f"jax {jax.__version__}, {os.cpu_count()} cores"
    )
    runners = [symnet_runner(net, tuple(valid)), jax_runner(params, tuple(valid))]
    torch = torch_runner(params, tuple(valid))
    if torch is None:
        print("PyTorch is not installed (pip install torch): its row is left out")
    else:
        runners.append(torch)
    results = {r.name: race(r, train, targets, args.max_steps, args.eval_every) for r in runners}
    reference = results["JAX + optax"]["reached"]
    print(
        "\n| framework | "
        + " | ".join(f"to {t:.2f}: s (steps)" for t in targets)
        + " | ratio to JAX | first step (s) | best |"
    )
    print("|---|" + "---|" * len(targets) + "---|---|---|")
    for name, res in results.items():
        cells, ratios = [], []
        for t in targets:
            hit, ref = res["reached"][t], reference[t]
            cells.append(f"{hit[0]:.1f} ({hit[1]})" if hit else f"not in {res['steps']} steps")
            if hit and ref:
                ratios.append(f"{hit[0] / ref[0]:.2f}")
        print(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {' / '.join(ratios) or '-'} | {res['first']:.2f} | {res['best']:.3f} |"
        )


if __name__ == "__main__":
    main()
