"""Chain training throughput against Kaldi's `nnet3-chain-train` on the same merged egs, one thread each.

    python benchmarks/chain_training.py [--kaldi-bin DIR] [--utterances 160] [--minibatch 64] [--hidden 512]
        [--minibatches 6] [--rounds 3] [--keep DIR]

The data are made the way a recipe makes them, by Kaldi's own programs (found on PATH or in `--kaldi-bin`,
`../shared/kaldi-bin.tar.xz`'s `kaldi-bin/bin`): random phone sequences of 40 phones with random durations
(3 to 12 frames), Kaldi's chain topology, a monophone tree (gmm-init-mono), a 4-gram phone LM
(chain-est-phone-lm), den.fst and normalization.fst (chain-make-den-fst), supervision with tolerances 5/5 at
frame subsampling 3 (chain-get-supervision), egs of 150 frames (nnet3-chain-get-egs) of 40-dim N(0, 1)
features, merged into minibatches of `--minibatch` chunks for Kaldi (nnet3-chain-merge-egs). Two networks,
each with `output` and `output-xent` (learning-rate factor 5, xent-regularize 0.1), l2-regularize and
max-change on every component, no natural gradient (AffineComponent: symnet trains it with Kaldi's rules
without natural gradient, and Kaldi's is then at its fastest):

- `tdnn`: 4 TDNN layers of `--hidden` units with ReLU (splices -1,0,1 / -1,0,1 / -3,0,3 / -3,0,3);
- `objective`: one affine layer, so that the step is almost all chain objective (numerators, the
  denominator's forward-backward with the leaky HMM, the update): its rows compare symnet's objective with
  Kaldi's DenominatorComputation and NumeratorComputation per frame.

Times are CPU seconds (user + system), which the load of a shared machine changes least. Kaldi:
`nnet3-chain-train --use-gpu=no` on `--minibatches` + 1 minibatches, one core (taskset), one OpenBLAS
thread, OpenBLAS told the CPU's core (as benchmarks/kaldi_job.py does); its time per minibatch is the
difference between that run and a run on the first minibatch alone (reading the model and den.fst,
start-up and writing cancel out) divided by `--minibatches`. symnet: `fit` on the same egs (single, as
nnet3-chain-get-egs wrote them; `fit` merges `--minibatch` of them per step) with `kaldi_rules`
(max-param-change 2, the model's learning rates), XLA's CPU runtime on one thread, one core; its time per
minibatch is the median over the steps after the first two (compilation excluded, as Kaldi compiles nothing
that costs). Throughput is input frames (chunks x 150) per second; the ratio is symnet's over Kaldi's, per
round, rounds interleaved. Also printed: symnet's chain objective alone (value and gradient, jitted) on the
minibatch's shape, batched and one sequence per call, per sequence.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kaldi_job import environment, find_kaldi, openblas_core
from machine import cpu_model

PHONES, FEAT_DIM, FACTOR, FRAMES_PER_EG = 40, 40, 3, 150
TOPO = """<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>"""
OPTS = ["--l2-regularize=5e-4", "--leaky-hmm-coefficient=0.1", "--xent-regularize=0.1"]
SPLICES = ((-1, 0, 1), (-1, 0, 1), (-3, 0, 3), (-3, 0, 3))


def network_config(kind: str, hidden: int, pdfs: int) -> tuple[str, int]:
    """(nnet3 config, context on each side) of the `tdnn` or `objective` network."""
    lines = [f"input-node name=input dim={FEAT_DIM}"]
    last, dim, context = "input", FEAT_DIM, 0
    if kind == "tdnn":
        for i, splice in enumerate(SPLICES, 1):
            parts = ", ".join(last if o == 0 else f"Offset({last}, {o})" for o in splice)
            lines += [
                f"component name=tdnn{i}.affine type=AffineComponent input-dim={dim * 3} output-dim={hidden} "
                "max-change=0.75 l2-regularize=0.01",
                f"component-node name=tdnn{i}.affine component=tdnn{i}.affine input=Append({parts})",
                f"component name=tdnn{i}.relu type=RectifiedLinearComponent dim={hidden}",
                f"component-node name=tdnn{i}.relu component=tdnn{i}.relu input=tdnn{i}.affine",
            ]
            last, dim, context = f"tdnn{i}.relu", hidden, context + max(splice)
    for name, extra in (("output", ""), ("output-xent", " learning-rate-factor=5.0")):
        lines += [
            f"component name={name}.affine type=AffineComponent input-dim={dim} output-dim={pdfs} max-change=1.5 "
            f"l2-regularize=0.005{extra}",
            f"component-node name={name}.affine component={name}.affine input={last}",
        ]
    lines += [
        "output-node name=output input=output.affine objective=linear",
        f"component name=output-xent.log-softmax type=LogSoftmaxComponent dim={pdfs}",
        "component-node name=output-xent.log-softmax component=output-xent.log-softmax input=output-xent.affine",
        "output-node name=output-xent input=output-xent.log-softmax objective=linear",
    ]
    return "\n".join(lines) + "\n", context


def step_flops(kind: str, hidden: int, pdfs: int, minibatch: int) -> float:
    """The products' floating-point operations in one training step: each affine layer's forward product on the
    frames the chunk's outputs (every FACTOR-th of FRAMES_PER_EG) need through the splices, as Kaldi's compiler
    and symnet's both compute them, twice more backward (input and weight derivatives) except the first layer's
    input derivative, which nothing needs."""
    needed = set(range(0, FRAMES_PER_EG, FACTOR))
    flops = 2 * 2.0 * len(needed) * (hidden if kind == "tdnn" else FEAT_DIM) * pdfs * 3  # output, output-xent
    if kind == "tdnn":
        for i, splice in reversed(list(enumerate(SPLICES))):
            in_dim = FEAT_DIM if i == 0 else hidden
            flops += 2.0 * len(needed) * len(splice) * in_dim * hidden * (2 if i == 0 else 3)
            needed = {t + o for t in needed for o in splice}
    return flops * minibatch


def matmul_rate() -> float:
    """This core's float32 matrix-product rate (FLOP/s), best of 20 products of 2048x1536 by 1536x512 (the
    step's largest shapes), in the calling process (one thread in `measure_symnet`)."""
    import jax
    import jax.numpy as jnp

    a, b = jnp.ones((2048, 1536), jnp.float32), jnp.ones((1536, 512), jnp.float32)
    product = jax.jit(jnp.matmul)
    jax.block_until_ready(product(a, b))
    best = np.inf
    for _ in range(20):
        start = time.perf_counter()
        jax.block_until_ready(product(a, b))
        best = min(best, time.perf_counter() - start)
    return 2.0 * 2048 * 1536 * 512 / best


def run(command: str, folder: Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["bash", "-c", "set -o pipefail; " + command], cwd=folder, capture_output=True, text=True, env=env
    )
    if out.returncode:
        raise SystemExit(f"{command}\n{out.stderr[-3000:]}")
    return out.stderr


def make_data(folder: Path, kaldi: Path, utterances: int, minibatch: int, hidden: int) -> dict[str, int]:
    """The recipe's data, both networks and their initial models in `folder` (see the module docstring)."""
    env = dict(os.environ, PATH=f"{kaldi}:{os.environ.get('PATH', '')}")
    rng = np.random.default_rng(0)
    ids = " ".join(str(p) for p in range(1, PHONES + 1))
    (folder / "topo").write_text(
        f"<Topology>\n<TopologyEntry>\n<ForPhones>\n{ids}\n</ForPhones>\n{TOPO}\n</TopologyEntry>\n</Topology>\n"
    )
    lengths, sequences, feats = [], [], []
    for u in range(utterances):
        seq = [1] + list(rng.integers(2, PHONES + 1, size=int(rng.integers(40, 120)))) + [1]
        durations = rng.integers(3, 13, size=len(seq))
        key = f"utt{u:04d}"
        lengths.append(f"{key} " + " ; ".join(f"{p} {d}" for p, d in zip(seq, durations)))
        sequences.append(f"{key} " + " ".join(map(str, seq)))
        x = rng.normal(size=(int(durations.sum()), FEAT_DIM))
        feats.append(f"{key} [\n" + "\n".join(" ".join(f"{v:.3f}" for v in row) for row in x) + " ]")
    (folder / "lengths.txt").write_text("\n".join(lengths) + "\n")
    (folder / "phones.txt").write_text("\n".join(sequences) + "\n")
    (folder / "feats.txt").write_text("\n".join(feats) + "\n")
    pdfs = 2 * PHONES
    contexts = {}
    for kind in ("tdnn", "objective"):
        text, contexts[kind] = network_config(kind, hidden, pdfs)
        (folder / f"{kind}.config").write_text(text)
        run(
            f"nnet3-init --srand=1 {kind}.config {kind}.raw && nnet3-copy --learning-rate=0.002 {kind}.raw {kind}.mdl",
            folder,
            env,
        )
    run(f"gmm-init-mono topo {FEAT_DIM} mono.mdl mono.tree", folder, env)
    run("chain-est-phone-lm --ngram-order=4 ark:phones.txt lm.fst", folder, env)
    run("chain-make-den-fst mono.tree mono.mdl lm.fst den.fst normalization.fst", folder, env)
    run(
        f"chain-get-supervision --frame-subsampling-factor={FACTOR} mono.tree mono.mdl ark:lengths.txt ark:sup.ark",
        folder,
        env,
    )
    context = max(contexts.values())
    run(
        f"nnet3-chain-get-egs --frame-subsampling-factor={FACTOR} --num-frames={FRAMES_PER_EG} "
        f"--left-context={context} --right-context={context} normalization.fst ark:feats.txt ark:sup.ark "
        "ark:all.ark",
        folder,
        env,
    )
    # whole minibatches only, the same egs for both
    count = int(
        run("nnet3-chain-copy-egs ark:all.ark ark:/dev/null", folder, env).split("examples, wrote ")[-1].split()[0]
    )
    keep = count // minibatch * minibatch
    run(
        f'nnet3-chain-copy-egs ark:all.ark ark,t:- | python3 -c "import sys; t = sys.stdin.read(); '
        f"b = t.split('</Nnet3ChainEg>')[:{keep}]; sys.stdout.write('</Nnet3ChainEg>'.join(b) + '</Nnet3ChainEg>\\n')\""
        " | nnet3-chain-copy-egs ark:- ark:egs.ark",
        folder,
        env,
    )
    run(f"nnet3-chain-merge-egs --minibatch-size={minibatch} ark:egs.ark ark,scp:merged.ark,merged.scp", folder, env)
    return {"egs": keep, "pdfs": pdfs, "context": context}


def kaldi_seconds(folder: Path, kaldi: Path, kind: str, minibatches: int, core: str | None) -> float:
    """Seconds per minibatch of nnet3-chain-train on one thread (see the module docstring)."""
    env, prefix = environment(True, None)
    env["PATH"] = f"{kaldi}:{env.get('PATH', '')}"
    if core is not None:
        env["OPENBLAS_CORETYPE"] = core

    def timed(n: int) -> float:
        scp = folder / f"first{n}.scp"
        scp.write_text("".join((folder / "merged.scp").read_text().splitlines(keepends=True)[:n]))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run(
            " ".join(
                [
                    *prefix,
                    "nnet3-chain-train",
                    "--use-gpu=no",
                    *OPTS,
                    "--max-param-change=2.0",
                    f"{kind}.mdl",
                    "den.fst",
                    f"scp:{scp.name}",
                    "/dev/null",
                ]
            ),
            folder,
            env,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    one, many = timed(1), timed(minibatches + 1)
    return (many - one) / minibatches


def measure_symnet(folder: Path, kind: str, minibatch: int, steps: int, pdfs: int) -> dict[str, float]:
    """In this process (run by `symnet_seconds` with one thread): `fit`'s median CPU seconds a step, and for the
    objective network the chain objective alone (value and gradient) per sequence, batched and one per call."""
    import warnings

    import jax
    import jax.numpy as jnp

    from symnet._src.kaldi_io.egs import read_cegs
    from symnet.chain import (
        ChainOptions,
        chain_objective,
        graph_arrays,
        numerator_graph,
        read_denominator_graph,
        read_fst,
        stack_graphs,
    )
    from symnet.kaldi import read_model
    from symnet.train import KaldiRulesWarning, chain_egs, fit, kaldi_rules

    options = ChainOptions(l2_regularize=5e-4, leaky_hmm_coefficient=0.1, xent_regularize=0.1)
    egs = list(read_cegs(f"ark:{folder}/egs.ark"))[: minibatch * steps]
    data = chain_egs(egs, den=read_fst(f"{folder}/den.fst"), options=options, xent_output="output-xent")
    net = read_model(folder / f"{kind}.mdl").network
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KaldiRulesWarning)
        rules = kaldi_rules(net, max_param_change=2.0)
    marks = [time.process_time()]
    fit(
        net,
        data.chunks,
        rules,
        objective=data.objective,
        frame_subsampling_factor=data.frame_subsampling_factor,
        batch_size=minibatch,
        progress=False,
        on_step=lambda _: marks.append(time.process_time()),
    )
    out = {"step": float(statistics.median(np.diff(marks)[2:])), "matmul_rate": matmul_rate()}
    if kind != "objective":
        return out
    den = graph_arrays(read_denominator_graph(str(folder / "den.fst"), pdfs))
    nums = [numerator_graph(e.outputs[0].supervision.fst, pdfs) for e in egs[:minibatch]]
    frames = egs[0].outputs[0].supervision.frames_per_sequence

    def per_call(b: int) -> float:
        g = stack_graphs(nums[:b])
        y = jnp.asarray(np.random.default_rng(0).normal(size=(b, frames, pdfs)), jnp.float32)
        step = jax.jit(jax.value_and_grad(lambda v: chain_objective(v, den, g, options=options).total))
        jax.block_until_ready(step(y))
        best = np.inf
        for _ in range(5):
            start = time.process_time()
            jax.block_until_ready(step(y))
            best = min(best, time.process_time() - start)
        return best

    out["objective_batched"] = per_call(minibatch) / minibatch
    out["objective_single"] = per_call(1)
    return out


def symnet_seconds(folder: Path, kind: str, minibatch: int, minibatches: int, pdfs: int) -> dict[str, float]:
    """`measure_symnet` in a process of its own on one thread (one core, XLA's thread pool off)."""
    env, prefix = environment(True, None)
    arguments = json.dumps([str(folder), kind, minibatch, minibatches + 2, pdfs])
    command = [*prefix, sys.executable, __file__, "--measure-symnet", arguments]
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kaldi-bin", type=Path, default=None)
    p.add_argument("--utterances", type=int, default=160)
    p.add_argument("--minibatch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--minibatches", type=int, default=8, help="minibatches timed per run (after the first)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--networks", nargs="+", default=["tdnn", "objective"])
    p.add_argument("--keep", type=Path, default=None, help="make (or reuse) the data in this folder")
    p.add_argument("--measure-symnet", help=argparse.SUPPRESS)  # the one-thread process symnet_seconds runs
    a = p.parse_args()
    if a.measure_symnet:
        folder, kind, minibatch, steps, pdfs = json.loads(a.measure_symnet)
        print(json.dumps(measure_symnet(Path(folder), kind, minibatch, steps, pdfs)))
        return
    found = find_kaldi(a.kaldi_bin)
    if found is None:
        raise SystemExit(
            "Kaldi's programs were not found: give --kaldi-bin (../shared/kaldi-bin.tar.xz's kaldi-bin/bin)"
        )
    kaldi = found.parent
    folder = a.keep or Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "merged.ark").exists():
        t0 = time.perf_counter()
        info = make_data(folder, kaldi, a.utterances, a.minibatch, a.hidden)
        (folder / "info.json").write_text(json.dumps(info))
        print(
            f"data: {info['egs']} egs of {FRAMES_PER_EG} frames, {info['pdfs']} pdfs, made in "
            f"{time.perf_counter() - t0:.0f} s"
        )
    info = json.loads((folder / "info.json").read_text())
    core = openblas_core()
    print(
        f"CPU: {cpu_model()}; one thread each; OpenBLAS core {core}; minibatch {a.minibatch} x {FRAMES_PER_EG} "
        f"frames; {a.minibatches} minibatches timed per run"
    )
    needed = a.minibatches + 2
    if info["egs"] < needed * a.minibatch:
        raise SystemExit(f"{info['egs']} egs are fewer than {needed} minibatches: give more --utterances")
    frames = a.minibatch * FRAMES_PER_EG
    for kind in a.networks:
        ratios, ceilings = [], []
        for r in range(a.rounds):
            k = kaldi_seconds(folder, kaldi, kind, a.minibatches, core)
            s = symnet_seconds(folder, kind, a.minibatch, a.minibatches, info["pdfs"])
            ratios.append(k / s["step"])
            line = (
                f"{kind} round {r + 1}: Kaldi {k * 1e3:.0f} ms ({frames / k:.0f} frames/s), symnet "
                f"{s['step'] * 1e3:.0f} ms ({frames / s['step']:.0f} frames/s): {ratios[-1]:.2f}x Kaldi"
            )
            if kind == "tdnn":  # the objective network's products are a rounding error
                floor = step_flops(kind, a.hidden, info["pdfs"], a.minibatch) / s["matmul_rate"]
                ceilings.append(k / floor)
                line += (
                    f"; the products alone at this core's matmul rate ({s['matmul_rate'] / 1e9:.0f} GFLOP/s) take "
                    f"{floor * 1e3:.0f} ms ({ceilings[-1]:.2f}x Kaldi with nothing else in the step)"
                )
            if "objective_batched" in s:
                line += (
                    f"; objective alone {s['objective_batched'] * 1e3:.2f} ms/sequence batched, "
                    f"{s['objective_single'] * 1e3:.2f} one per call"
                )
            print(line, flush=True)
        print(
            f"{kind}: median {statistics.median(ratios):.2f}x Kaldi's throughput (rounds {min(ratios):.2f}-"
            f"{max(ratios):.2f})" + (f"; products-only ceiling {statistics.median(ceilings):.2f}x" if ceilings else "")
        )
    if a.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
