"""xent, CTC and chain (LF-MMI) training of the same small TDNN on the built-in task, in one run.

    python benchmarks/objectives.py [--sequences 200] [--epochs 8] [--chunk 30] [--k 3]

The task (`HmmTask`, 5 phones of 2 states, 6-dim features) gives state alignments (xent and chain's pdfs),
phone transcripts (CTC, blank 0) and the reference phone error rate of Viterbi decoding with the true model.
xent trains at every frame; CTC and chain at every `k`-th. Reported on held-out sequences: frame accuracy
(argmax vs the state alignment, at the trained frames; xent and chain), phone error rate (xent and chain:
argmax states -> phones, repeats collapsed, and with an HMM decode: Viterbi with the training alignments' state
bigram, xent's posteriors over state priors, chain's outputs as they are; CTC: greedy decode), and training
steps/s (after the first epoch, which compiles). Chain uses symnet's alignment numerators and pdf-bigram
denominator (docs/chain.md).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import optax

from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, ReLU, Weight, Zeros
from symnet.datasets import HmmTask, phone_error_rate
from symnet.train import fit
from symnet.train.objectives import collapse

FEAT = 6


def affine(x, fan_in, fan_out, name):
    w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
    return x @ w + Weight(Zeros(fan_out), name=f"{name}.b")


def tdnn(out_dim: int, log_softmax: bool) -> Network:
    x = Input("input", FEAT)
    h = ReLU(affine(Append(*[Offset(x, o) if o else x for o in (-2, -1, 0, 1, 2)]), 5 * FEAT, 32, "l1"))
    h = ReLU(affine(Append(Offset(h, -3), h, Offset(h, 3)), 96, 32, "l2"))
    out = affine(h, 32, out_dim, "out")
    return Network(LogSoftmax(out) if log_softmax else out, seed=0)


def state_bigram(labels: list[np.ndarray], states: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Log initial and transition probabilities of the state sequences at every k-th frame (all k phases),
    add-one smoothed: the HMM an output is decoded with."""
    initial, pairs = np.ones(states), np.ones((states, states))
    for lab in labels:
        for phase in range(k):
            seq = lab[phase::k]
            if len(seq):
                initial[seq[0]] += 1
                np.add.at(pairs, (seq[:-1], seq[1:]), 1)
    return np.log(initial / initial.sum()), np.log(pairs / pairs.sum(1, keepdims=True))


def viterbi(scores: np.ndarray, log_initial: np.ndarray, log_trans: np.ndarray) -> np.ndarray:
    """The best state path for per-frame log scores `[T, S]` under the HMM."""
    best, back = log_initial + scores[0], []
    for frame in scores[1:]:
        candidates = best[:, None] + log_trans
        back.append(candidates.argmax(0))
        best = candidates.max(0) + frame
    path = [int(best.argmax())]
    for pointers in reversed(back):
        path.append(int(pointers[path[-1]]))
    return np.array(path[::-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=30)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    task = HmmTask.create(
        seed=0, num_phones=5, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=40, max_length=80
    )
    train, valid = task.sample(args.sequences, seed=1), task.sample(max(args.sequences // 4, 1), seed=2)
    refs = task.transcripts(valid)
    spp = 2
    print(f"reference phone error rate (Viterbi, true model): {task.viterbi_phone_error_rate(valid):.3f}")
    runs = {
        "xent": (tdnn(task.num_states, True), train, valid, "linear", 1),
        "ctc": (tdnn(task.num_phones + 1, True), task.phone_dataset(train), task.phone_dataset(valid), "ctc", args.k),
        "chain": (tdnn(task.num_states, False), train, valid, "chain", args.k),
    }
    for name, (net, tr, va, objective, k) in runs.items():
        times: list[float] = []
        start = [time.perf_counter()]

        def on_epoch(stats, times=times, start=start) -> None:
            now = time.perf_counter()
            times.append(now - start[0])
            start[0] = now

        result = fit(
            net,
            tr,
            optax.adam(1e-2),
            objective=objective,
            chunk=args.chunk,
            batch_size=16,
            epochs=args.epochs,
            progress=False,
            frame_subsampling_factor=k,
            on_epoch=on_epoch,
        )
        outputs = [np.asarray(o) for o in result.network.compute(list(va.features))]
        if name == "ctc":
            hyps = [collapse(o[::k].argmax(-1), 0) - 1 for o in outputs]
            acc = float("nan")
        else:
            hyps = [collapse(o[::k].argmax(-1) // spp) for o in outputs]
            right = sum(int((o[::k].argmax(-1) == lab[::k]).sum()) for o, lab in zip(outputs, valid.labels))
            acc = right / sum(len(lab[::k]) for lab in valid.labels)
            # An HMM decode, as a hybrid or chain model is decoded: the training alignments' state bigram at
            # the output frame rate; xent's posteriors divided by the state priors, chain's outputs as they are.
            log_initial, log_trans = state_bigram(list(tr.labels), task.num_states, k)
            counts = np.bincount(np.concatenate(list(tr.labels)), minlength=task.num_states) + 1.0
            log_prior = np.log(counts / counts.sum()) if name == "xent" else 0.0
            paths = [viterbi(o[::k] - log_prior, log_initial, log_trans) for o in outputs]
            decoded = phone_error_rate([collapse(p // spp) for p in paths], refs)
        per_epoch = math.ceil(sum(math.ceil(len(f) / args.chunk) for f in tr.features) / 16)
        steps = per_epoch * (args.epochs - 1) / max(sum(times[1:]), 1e-9)
        per = phone_error_rate(hyps, refs)
        hmm = f"  with an HMM decode {decoded:.3f}" if name != "ctc" else ""
        print(f"{name:6s} k={k}: frame accuracy {acc:.3f}  phone error rate {per:.3f}{hmm}  steps/s {steps:.1f}")


if __name__ == "__main__":
    main()
