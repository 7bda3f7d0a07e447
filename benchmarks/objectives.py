"""xent, CTC and chain (LF-MMI) training of the same small TDNN on the built-in task, in one run.

    python benchmarks/objectives.py [--sequences 200] [--epochs 8] [--chunk 30] [--k 3]

The task (`HmmTask`, 5 phones of 2 states, 6-dim features) gives state alignments (xent and chain's pdfs),
phone transcripts (CTC, blank 0) and the reference phone error rate of Viterbi decoding with the true model.
xent trains at every frame; CTC and chain at every `k`-th. Reported on held-out sequences: frame accuracy
(argmax vs the state alignment, at the trained frames; xent and chain), phone error rate (xent and chain:
argmax states -> phones, repeats collapsed; CTC: greedy decode), and training steps/s (after the first epoch,
which compiles). Chain uses symnet's alignment numerators and pdf-bigram denominator (docs/chain.md).
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
        per_epoch = math.ceil(sum(math.ceil(len(f) / args.chunk) for f in tr.features) / 16)
        steps = per_epoch * (args.epochs - 1) / max(sum(times[1:]), 1e-9)
        per = phone_error_rate(hyps, refs)
        print(f"{name:6s} k={k}: frame accuracy {acc:.3f}  phone error rate {per:.3f}  steps/s {steps:.1f}")


if __name__ == "__main__":
    main()
