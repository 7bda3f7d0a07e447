"""Make the chain-recipe fixtures of tests/chain/test_chain_recipe.py with Kaldi's own programs (nnet3-init,
nnet3-copy, gmm-init-mono, chain-est-phone-lm, chain-make-den-fst, chain-get-supervision, nnet3-chain-get-egs,
nnet3-chain-copy-egs, nnet3-chain-compute-prob, nnet3-chain-train on PATH: ../shared/kaldi-bin.tar.xz, see
shared/KALDI-BUILD.md). Run from anywhere: `python make.py [SCENARIO ...]`; each scenario writes its folder here
(nnet3-chain-get-egs may cut other chunks on another run, so run make_merged.sh and make_lda.sh after it).

Each scenario is made the way a Kaldi recipe makes its chain egs: random phone sequences of 30-40 phones
(silence, phone 1, at both ends) with random durations, a topology (Kaldi's chain topology, or a 3-state
left-to-right one with unequal transition probabilities), a monophone tree and model (gmm-init-mono), a phone
LM (chain-est-phone-lm, order 3 or 4, pruned to few extra states), den.fst and normalization.fst
(chain-make-den-fst), supervision with tolerances (chain-get-supervision), and egs of 75 or 150 frames cut by
nnet3-chain-get-egs with the normalization FST composed in (so numerators carry its weights: tens of nats on
the first arcs) and derivative weights of 0.5 on frames that overlap a neighbouring chunk. The network is a
small TDNN with `output` and `output-xent` (nnet3-init), Kaldi's per-component max-change, l2-regularize and
learning-rate-factor (0.5 / xent_regularize on output-xent, as the recipes' xconfig gives it).

Kept, so that tests need no Kaldi: topo, lm.fst (chain-est-phone-lm's phone LM), den.fst, cegs.ark (the
chosen egs, binary as Kaldi writes them, compressed features), init.txt (the model, text), opts.txt (the
training options), and per eg KEY: prob/KEY.txt (nnet3-chain-compute-prob's log on that eg alone) and
step/KEY.txt (the model after one nnet3-chain-train step on that eg alone, as text).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

CHAIN_TOPO = """<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>"""
THREE_STATE_TOPO = """<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.6 <Transition> 2 0.4 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.3 <Transition> 3 0.7 </State>
<State> 3 </State>"""

SCENARIOS = {
    # name: phones, topology, pdf classes, LM order, extra LM states, tolerances, frames per eg, durations,
    # training options
    "chain-topo": dict(
        phones=40,
        topo=CHAIN_TOPO,
        classes=2,
        order=4,
        extra=30,
        tol=(5, 5),
        frames=150,
        durations=(3, 9),
        opts="--l2-regularize=5e-4 --leaky-hmm-coefficient=0.1 --xent-regularize=0.1",
    ),
    "three-state": dict(
        phones=30,
        topo=THREE_STATE_TOPO,
        classes=3,
        order=3,
        extra=20,
        tol=(2, 3),
        frames=75,
        durations=(9, 24),
        opts="--l2-regularize=0.01 --leaky-hmm-coefficient=1e-5 --xent-regularize=0.1",
    ),
}
UTTERANCES, FEAT_DIM, HIDDEN, FACTOR, CONTEXT, KEEP = 24, 13, 24, 3, 4, 6


def run(cmd: str, cwd: Path) -> str:
    out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{cmd}\n{out.stderr[-3000:]}")
    return out.stderr


def topology(phones: int, body: str) -> str:
    ids = " ".join(str(p) for p in range(1, phones + 1))
    return f"<Topology>\n<TopologyEntry>\n<ForPhones>\n{ids}\n</ForPhones>\n{body}\n</TopologyEntry>\n</Topology>\n"


def network(pdfs: int) -> str:
    h, d = HIDDEN, FEAT_DIM
    return f"""input-node name=input dim={d}
component name=tdnn1.affine type=AffineComponent input-dim={3 * d} output-dim={h} max-change=0.75 l2-regularize=0.01
component-node name=tdnn1.affine component=tdnn1.affine input=Append(Offset(input, -1), input, Offset(input, 1))
component name=tdnn1.relu type=RectifiedLinearComponent dim={h}
component-node name=tdnn1.relu component=tdnn1.relu input=tdnn1.affine
component name=tdnn2.affine type=AffineComponent input-dim={3 * h} output-dim={h} max-change=0.75 l2-regularize=0.01
component-node name=tdnn2.affine component=tdnn2.affine input=Append(Offset(tdnn1.relu, -3), tdnn1.relu, Offset(tdnn1.relu, 3))
component name=tdnn2.relu type=RectifiedLinearComponent dim={h}
component-node name=tdnn2.relu component=tdnn2.relu input=tdnn2.affine
component name=output.affine type=AffineComponent input-dim={h} output-dim={pdfs} max-change=1.5 l2-regularize=0.005
component-node name=output.affine component=output.affine input=tdnn2.relu
output-node name=output input=output.affine objective=linear
component name=output-xent.affine type=AffineComponent input-dim={h} output-dim={pdfs} max-change=1.5 learning-rate-factor=5.0 l2-regularize=0.005
component-node name=output-xent.affine component=output-xent.affine input=tdnn2.relu
component name=output-xent.log-softmax type=LogSoftmaxComponent dim={pdfs}
component-node name=output-xent.log-softmax component=output-xent.log-softmax input=output-xent.affine
output-node name=output-xent input=output-xent.log-softmax objective=linear
"""  # noqa: E501


def make(name: str, s: dict, tmp: Path) -> None:
    rng = np.random.default_rng(sorted(SCENARIOS).index(name) + 11)
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    (out / "prob").mkdir(parents=True)
    (out / "step").mkdir()
    phones, (lo, hi) = s["phones"], s["durations"]
    (tmp / "topo").write_text(topology(phones, s["topo"]))
    lengths, sequences, feats = [], [], []
    for u in range(UTTERANCES):
        seq = [1] + list(rng.integers(2, phones + 1, size=int(rng.integers(20, 45)))) + [1]
        durs = rng.integers(lo, hi + 1, size=len(seq))
        key = f"utt{u:03d}"
        lengths.append(f"{key} " + " ; ".join(f"{p} {d}" for p, d in zip(seq, durs)))
        sequences.append(f"{key} " + " ".join(map(str, seq)))
        x = rng.normal(size=(int(durs.sum()), FEAT_DIM))
        feats.append(f"{key} [\n" + "\n".join(" ".join(f"{v:.4f}" for v in row) for row in x) + " ]")
    (tmp / "lengths.txt").write_text("\n".join(lengths) + "\n")
    (tmp / "phones.txt").write_text("\n".join(sequences) + "\n")
    (tmp / "feats.txt").write_text("\n".join(feats) + "\n")
    pdfs = phones * s["classes"]
    (tmp / "net.config").write_text(network(pdfs))
    left, right = s["tol"]
    run(f"gmm-init-mono topo {FEAT_DIM} mono.mdl mono.tree", tmp)
    run(f"chain-est-phone-lm --ngram-order={s['order']} --num-extra-lm-states={s['extra']} ark:phones.txt lm.fst", tmp)
    run("chain-make-den-fst mono.tree mono.mdl lm.fst den.fst normalization.fst", tmp)
    run(
        f"chain-get-supervision --frame-subsampling-factor={FACTOR} --left-tolerance={left} "
        f"--right-tolerance={right} mono.tree mono.mdl ark:lengths.txt ark:sup.ark",
        tmp,
    )
    run(
        f"nnet3-chain-get-egs --frame-subsampling-factor={FACTOR} --num-frames={s['frames']} "
        f"--left-context={CONTEXT} --right-context={CONTEXT} normalization.fst ark:feats.txt ark:sup.ark "
        "ark:all.ark",
        tmp,
    )
    run("nnet3-init --srand=3 net.config init.raw && nnet3-copy --learning-rate=0.002 init.raw init.mdl", tmp)
    run("nnet3-copy --binary=false init.mdl init.txt", tmp)
    # Which egs to keep: some with derivative weights below 1, some without, each the first of its kind.
    run("nnet3-chain-copy-egs ark:all.ark ark,t:all.txt", tmp)
    text = (tmp / "all.txt").read_text()
    chosen, half, whole = [], 0, 0
    for block in text.split("</Nnet3ChainEg>")[:-1]:
        key = block.split()[0]
        has_half = "<DW2>" in block and " 0.5" in block.split("<DW2>")[1].split("]")[0]
        if has_half and half < KEEP // 2:
            chosen.append(key)
            half += 1
        elif not has_half and whole < KEEP - KEEP // 2:
            chosen.append(key)
            whole += 1
    (tmp / "keys.txt").write_text("\n".join(chosen) + "\n")
    run("nnet3-chain-copy-egs ark:all.ark ark,scp:cegs.ark,cegs.scp", tmp)
    scp = dict(line.split(maxsplit=1) for line in (tmp / "cegs.scp").read_text().splitlines())
    opts = s["opts"]
    (out / "opts.txt").write_text(opts + "\n")
    for key in chosen:
        (tmp / "one.scp").write_text(f"{key} {scp[key]}\n")
        log = run(f"nnet3-chain-compute-prob {opts} init.mdl den.fst scp:one.scp", tmp)
        (out / "prob" / f"{key}.txt").write_text(
            "\n".join(line for line in log.splitlines() if "Overall" in line) + "\n"
        )
        run(
            f"nnet3-chain-train --use-gpu=no {opts} --max-param-change=2.0 init.mdl den.fst scp:one.scp step.mdl "
            f"&& nnet3-copy --binary=false step.mdl step.txt",
            tmp,
        )
        shutil.copy(tmp / "step.txt", out / "step" / f"{key}.txt")
    (tmp / "kept.scp").write_text("".join(f"{k} {scp[k]}\n" for k in chosen))
    run("nnet3-chain-copy-egs scp:kept.scp ark:kept.ark", tmp)
    shutil.copy(tmp / "kept.ark", out / "cegs.ark")
    shutil.copy(tmp / "den.fst", out / "den.fst")
    shutil.copy(tmp / "lm.fst", out / "lm.fst")
    (out / "topo").write_text((tmp / "topo").read_text())
    shutil.copy(tmp / "init.txt", out / "init.txt")
    print(name, "egs", len(text.split("</Nnet3ChainEg>")) - 1, "kept", chosen)


def main() -> None:
    names = sys.argv[1:] or sorted(SCENARIOS)
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            make(name, SCENARIOS[name], Path(tmp))


if __name__ == "__main__":
    main()
