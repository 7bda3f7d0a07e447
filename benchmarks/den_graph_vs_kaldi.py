"""symnet's denominator graph against Kaldi's on a recipe's data: `phone_lm_denominator` of chain-est-phone-lm's
phone LM, and the chunk numerators normalized by it, beside chain-make-den-fst's den.fst and the egs
nnet3-chain-get-egs made with its normalization.fst.

    python benchmarks/den_graph_vs_kaldi.py FOLDER/kaldi-chain [--egs 300]

FOLDER/kaldi-chain is what `digits_recipe.py --chain --kaldi-bin ...` leaves (kaldi_chain.py: lm.fst, den.fst,
cegs.ark, feats.scp, lengths.txt, chain.topo). Prints both graphs' states and arcs, the denominator
log-probability per frame of random outputs on each, and for the first `--egs` egs the difference between the
log-probability of random outputs under symnet's chunk numerator (`chain_examples` at Kaldi's chunks, normalized
by symnet's graph) and under Kaldi's eg's numerator.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def main() -> None:
    import kaldiio

    from symnet.chain import (
        Topology,
        denominator_graph,
        numerator_graph,
        phone_lm_denominator,
        read_fst,
    )
    from symnet.kaldi import read_cegs
    from symnet.train import chain_examples

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--egs", type=int, default=300)
    args = parser.parse_args()
    folder = args.folder
    topology = Topology.parse((folder / "chain.topo").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = phone_lm_denominator(read_fst(str(folder / "lm.fst")), topology)
    kaldi_fst = read_fst(str(folder / "den.fst"))
    pdfs = ours.num_pdfs
    kaldi = denominator_graph(kaldi_fst, pdfs)
    print(f"den graph: symnet {ours.num_states} states, {len(ours.src)} arcs; Kaldi's den.fst "
          f"{kaldi.num_states} states, {len(kaldi.src)} arcs")  # fmt: skip
    rng = np.random.default_rng(0)
    y = rng.normal(0, 2, size=(200, pdfs))
    den = [log_probability(g, y) / len(y) for g in (ours, kaldi)]
    print(f"denominator log-probability of 200 frames of random outputs, per frame: symnet {den[0]:.6f}, "
          f"Kaldi {den[1]:.6f}, difference {den[0] - den[1]:+.2e}")  # fmt: skip

    egs = []
    for eg in read_cegs(f"ark:{folder / 'cegs.ark'}"):
        egs.append(eg)
        if len(egs) == args.egs:
            break
    lengths = {}
    for line in (folder / "lengths.txt").read_text().splitlines():
        key, rest = line.split(None, 1)
        lengths[key] = np.array([[int(v) for v in pair.split()] for pair in rest.split(";")])
    output = egs[0].outputs[0].indexes  # (n, t, x) rows at t = 0, k, 2k, ...: k is the frame subsampling
    k = int(output[1, 1] - output[0, 1])
    chunks: dict[str, list[tuple[int, int]]] = {}
    for eg in egs:
        utt, first = eg.key.rsplit("-", 1)
        chunks.setdefault(utt, []).append((int(first), k * eg.outputs[0].supervision.frames_per_sequence))
    features = dict(kaldiio.load_scp(str(folder / "feats.scp")))
    mine = {
        eg.key: eg
        for eg in chain_examples(
            {u: features[u] for u in chunks},
            lengths,
            topology,
            ours,
            num_frames=max(n for c in chunks.values() for _, n in c),
            frame_subsampling_factor=k,
            chunks=chunks,
            left_context=0,
            right_context=0,
        )  # fmt: skip
    }
    differences = []
    for eg in egs:
        sup, theirs = mine[eg.key].outputs[0].supervision, eg.outputs[0].supervision
        out = rng.normal(0, 2, size=(sup.frames_per_sequence, pdfs))
        differences.append(
            log_probability(numerator_graph(sup.fst, pdfs), out)
            - log_probability(numerator_graph(theirs.fst, pdfs), out)
        )
    d = np.abs(np.asarray(differences))
    print(
        f"chunk numerators of {len(egs)} egs, symnet's normalization against Kaldi's: log-probability of random "
        f"outputs differs by {d.mean():.3f} on average, {np.median(d):.3f} median, {d.max():.3f} at most"
    )


def log_probability(graph: Any, outputs: np.ndarray) -> float:
    """log of the sum over `graph`'s paths (a ChainGraph: from its initial log-probabilities, to its final ones)
    of exp(arc log-probabilities + the outputs of their pdfs): a plain forward pass in float64."""
    from scipy.special import logsumexp

    alpha = np.asarray(graph.log_initial, np.float64)
    for frame in outputs:
        new = np.full(graph.num_states, -np.inf)
        np.logaddexp.at(new, graph.dst, alpha[graph.src] + graph.log_prob + frame[graph.pdf])
        alpha = new
    return float(logsumexp(alpha + graph.log_final))


if __name__ == "__main__":
    main()
