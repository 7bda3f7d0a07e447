"""xent, CTC and chain (LF-MMI) training of one TDNN-F xconfig on the built-in task, each run in its own process.

    python benchmarks/objectives.py [--sequences 200] [--epochs 16] [--chunk 30] [--k 3] [--lr 3e-3]
        [--topology chain|two-state] [--only RUN]

The task (`HmmTask`, 5 phones of 2 states, 6-dim features) gives state alignments, phone alignments and
transcripts, and the reference phone error rate of Viterbi decoding with the true model. Every run trains the
same TDNN-F, written as a Kaldi xconfig (tdnnf-layers, a prefinal layer, Kaldi's l2-regularize,
orthonormal-constraint and max-change options) with Kaldi's training rules on (fit's default for a network from
an xconfig), Adam inside them (3e-3: of 1e-2, 3e-3 and 1e-3 the best for chain; xent is within 0.012 PER
across the three):

- `xent`: cross-entropy on the state alignment at every frame (a hybrid model);
- `ctc`: CTC on the phone transcripts (blank 0), outputs at every k-th frame;
- `chain-bigram`: chain on the state alignment, symnet's pdf-bigram denominator and alignment numerators;
- `chain`: chain as Kaldi's recipes train it: Kaldi's chain topology (2 pdfs per phone), numerators from the
  phone alignment with tolerance 5/5 (chain-get-supervision), the phone-LM denominator (chain-est-phone-lm +
  chain-make-den-fst's graph), the `output-xent` branch with xent_regularize 0.1 and the leaky-HMM
  coefficient 0.1 (the recipes' --chain.xent-regularize and --chain.leaky-hmm-coefficient).

Reported on held-out sequences: frame accuracy (argmax vs the alignment at the trained frames: states, or
phones for `chain`), phone error rate by argmax (pdfs -> phones, repeats collapsed; CTC: greedy), and with an
HMM decode (xent: posteriors over state priors with the training alignments' state bigram; chain-bigram: its
outputs with that bigram; chain: its outputs on its own denominator graph, the phone LM through the topology),
training steps/s (after the first epoch, which compiles) and the run's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import numpy as np
import optax

from symnet._src.chain.phone_numerator import phone_runs
from symnet._src.train.objectives import collapse
from symnet.chain import ChainOptions, Topology, estimate_phone_lm, phone_lm_denominator
from symnet.datasets import HmmTask, phone_error_rate
from symnet.kaldi.xconfig import parse_xconfig_network
from symnet.train import Chain, fit

FEAT = 6
RUNS = ("xent", "ctc", "chain-bigram", "chain")


def tdnnf(out_dim: int, chain: bool, xent_branch: bool = False) -> object:
    """The benchmark's TDNN-F as a Kaldi xconfig; `chain`: no log-softmax on `output`."""
    lines = [
        f"input dim={FEAT} name=input",
        "relu-batchnorm-layer name=tdnn1 input=Append(-2,-1,0,1,2) dim=64",
        "tdnnf-layer name=tdnnf2 dim=64 bottleneck-dim=16 time-stride=1 l2-regularize=0.01",
        "tdnnf-layer name=tdnnf3 dim=64 bottleneck-dim=16 time-stride=3 l2-regularize=0.01",
        "linear-component name=prefinal-l dim=32 orthonormal-constraint=-1.0 l2-regularize=0.01",
        "prefinal-layer name=prefinal-chain input=prefinal-l small-dim=32 big-dim=64 l2-regularize=0.01",
        f"output-layer name=output dim={out_dim} l2-regularize=0.005" + (" include-log-softmax=false" if chain else ""),
    ]
    if xent_branch:
        lines += [
            "prefinal-layer name=prefinal-xent input=prefinal-l small-dim=32 big-dim=64 l2-regularize=0.01",
            f"output-layer name=output-xent dim={out_dim} learning-rate-factor=5.0 l2-regularize=0.005",
        ]
    return parse_xconfig_network("\n".join(lines), seed=0)


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


def graph_viterbi(scores: np.ndarray, graph) -> np.ndarray:
    """The pdf sequence of the best path through a chain graph (initial probabilities, arc probabilities,
    per-frame pdf scores `[T, P]`)."""
    with np.errstate(divide="ignore"):
        best, log_prob = np.log(graph.initial.astype(np.float64)), np.log(graph.prob.astype(np.float64))
    back = []
    for frame in scores:
        candidate = best[graph.src] + log_prob + frame[graph.pdf]
        new = np.full(graph.num_states, -np.inf)
        np.maximum.at(new, graph.dst, candidate)
        winner = np.full(graph.num_states, -1)
        order = np.argsort(candidate)  # the last write per state is its best arc
        winner[graph.dst[order]] = order
        back.append(winner)
        best = new
    state, pdfs = int(best.argmax()), []
    for winner in reversed(back):
        arc = winner[state]
        pdfs.append(int(graph.pdf[arc]))
        state = int(graph.src[arc])
    return np.array(pdfs[::-1])


def run(name: str, args: argparse.Namespace) -> dict:
    task = HmmTask.create(
        seed=0, num_phones=5, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=40, max_length=80
    )
    train, valid = task.sample(args.sequences, seed=1), task.sample(max(args.sequences // 4, 1), seed=2)
    refs = task.transcripts(valid)
    spp, k = task.states_per_phone, args.k
    phones = range(1, task.num_phones + 1)
    topology = Topology.chain(phones) if args.topology == "chain" else Topology.left_to_right(phones, 2)
    phone_of_pdf = np.repeat(np.arange(task.num_phones), 2)  # either topology's pdfs: 2 per phone
    if name == "xent":
        net, tr, va, objective, k = tdnnf(task.num_states, False), train, valid, "linear", 1
    elif name == "ctc":
        net, tr, va, objective = tdnnf(task.num_phones + 1, False), task.phone_dataset(train), None, "ctc"
    elif name == "chain-bigram":
        net, tr, va, objective = tdnnf(task.num_states, True), train, valid, "chain"
    else:
        tr, va = task.phone_dataset(train), task.phone_dataset(valid)
        lm = estimate_phone_lm(phone_runs(p)[0] for p in tr.labels)
        den = phone_lm_denominator(lm, topology)
        objective = Chain(
            den=den,
            topology=topology,
            xent_output="output-xent",
            options=ChainOptions(xent_regularize=0.1, leaky_hmm_coefficient=0.1),
        )
        net = tdnnf(den.num_pdfs, True, xent_branch=True)
    times: list[float] = []
    start = [time.perf_counter()]

    def on_epoch(stats, times=times, start=start) -> None:
        now = time.perf_counter()
        times.append(now - start[0])
        start[0] = now

    result = fit(
        net,
        tr,
        optax.adam(args.lr),
        objective=objective,
        chunk=args.chunk,
        batch_size=16,
        epochs=args.epochs,
        progress=False,
        frame_subsampling_factor=k,
        on_epoch=on_epoch,
    )
    outputs = [np.asarray(o) for o in result.network.compute(list(valid.features), output="output")]
    acc = decoded = float("nan")
    if name == "ctc":
        hyps = [collapse(o[::k].argmax(-1), 0) - 1 for o in outputs]
    elif name == "chain":
        hyps = [collapse(phone_of_pdf[o[::k].argmax(-1)]) for o in outputs]
        phones = list(va.labels)
        right = sum(int((phone_of_pdf[o[::k].argmax(-1)] + 1 == p[::k]).sum()) for o, p in zip(outputs, phones))
        acc = right / sum(len(p[::k]) for p in phones)
        decoded = phone_error_rate([collapse(phone_of_pdf[graph_viterbi(o[::k], den)]) for o in outputs], refs)
    else:
        hyps = [collapse(o[::k].argmax(-1) // spp) for o in outputs]
        right = sum(int((o[::k].argmax(-1) == lab[::k]).sum()) for o, lab in zip(outputs, valid.labels))
        acc = right / sum(len(lab[::k]) for lab in valid.labels)
        log_initial, log_trans = state_bigram(list(train.labels), task.num_states, k)
        counts = np.bincount(np.concatenate(list(train.labels)), minlength=task.num_states) + 1.0
        log_prior = np.log(counts / counts.sum()) if name == "xent" else 0.0
        paths = [viterbi(o[::k] - log_prior, log_initial, log_trans) for o in outputs]
        decoded = phone_error_rate([collapse(p // spp) for p in paths], refs)
    per_epoch = math.ceil(sum(math.ceil(len(f) / args.chunk) for f in tr.features) / 16)
    return {
        "run": name,
        "k": k,
        "frame_accuracy": acc,
        "per_argmax": phone_error_rate(hyps, refs),
        "per_hmm": decoded,
        "steps_per_s": per_epoch * (args.epochs - 1) / max(sum(times[1:]), 1e-9),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "reference_per": task.viterbi_phone_error_rate(valid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=30)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate (inside Kaldi's rules)")
    parser.add_argument(
        "--topology",
        choices=("chain", "two-state"),
        default="chain",
        help="the chain run's HMM: Kaldi's chain topology, or 2 states per phone in a row (the task's own)",
    )
    parser.add_argument("--only", choices=RUNS, help="run one objective here and print its figures as JSON")
    args = parser.parse_args()
    if args.only:
        print(json.dumps(run(args.only, args)))
        return
    rows = []
    for name in RUNS:
        command = [sys.executable, __file__, "--only", name] + [
            f"--{key}={getattr(args, key)}" for key in ("sequences", "epochs", "chunk", "k", "lr", "topology")
        ]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"reference phone error rate (Viterbi, true model): {rows[0]['reference_per']:.3f}")
    print("| run | k | frame accuracy | PER (argmax) | PER (HMM decode) | steps/s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['run']} | {r['k']} | {r['frame_accuracy']:.3f} | {r['per_argmax']:.3f} | {r['per_hmm']:.3f} | "
            f"{r['steps_per_s']:.0f} | {r['peak_rss_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
