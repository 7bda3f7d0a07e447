"""Compute each xconfig case's network with Kaldi's own nnet3-compute and with `symnet compute`; print the
largest difference, and with `--write` keep Kaldi's outputs (projected) as the fixtures of
tests/kaldi/test_recipes_vs_kaldi.py. For developers with Kaldi's binaries (`../shared/kaldi-bin.tar.xz`).

    python tests/data/xconfig-kaldi/compare_with_kaldi.py --kaldi-bin ../kaldi-bin/bin [--write] [CASE ...]

For every case (default: every `cases/recipe-*.xconfig`), in a scratch folder (`prepare`):

1. `symnet xconfig --config-dir configs CASE`, run in that folder as a recipe runs
   xconfig_to_configs.py (an idct-layer writes its matrix at the path the
   config names);
2. a random matrix for every fixed-affine-layer's `affine-transform-file`
   (the recipe's LDA, `[dim, dim + 1]`);
3. final.config's network with random parameters (matrices N(0, 1/in), biases
   N(0, 0.1), batch-norm statistics of count 1), written by symnet as a Kaldi
   raw model, which Kaldi reads: a chain recipe's output layer starts at zero,
   so Kaldi's own nnet3-init would compare zeros;
4. three utterances of 157, 230 and 61 frames of N(0, 1) features (and an
   i-vector each where the network has that input) through Kaldi's
   `nnet3-compute` (one thread, OpenBLAS told the CPU's best core) and
   `symnet compute`, with nnet3-compute's default options (50-frame chunks).

Prints, per case, the largest absolute difference and the largest absolute output; exits 1 if any case
fails or differs by more than `--tolerance` times the largest output; a case both refuse (an x-vector
network, whose statistics need more frames than a chunk: Kaldi runs those with nnet3-xvector-compute) agrees.
`--write` adds each agreeing case's outputs, times `projection(dim)` (`PROJECTIONS` random columns: 448 x 4
numbers a case, not 448 x 3456), and the largest output to `kaldi-outputs.npz` (no pickle), or that both
refused it (`NAME.refused`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import kaldiio
import numpy as np

HERE = Path(__file__).resolve().parent
LENGTHS = (157, 230, 61)
#: Random projections of each output frame the fixtures keep (`projection`).
PROJECTIONS = 4
#: The fixtures: per recipe case, Kaldi's outputs of the three utterances projected, and their largest value.
FIXTURES = HERE / "kaldi-outputs.npz"


def randomized_model(config: Path, path: Path, seed: int = 0) -> None:
    """The network of `config` with random parameters and batch-norm statistics, as a Kaldi raw model."""
    from symnet._src.kaldi.models.model import write_model
    from symnet.kaldi import read_network

    network = read_network(str(config), seed=seed)
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for name, value in {**network.params, **network.state}.items():
        shape = np.shape(value)
        if name.endswith(".count"):
            values[name] = np.ones(shape, np.float32)
        elif name.endswith(".stats_mean"):
            values[name] = rng.normal(0, 0.1, shape).astype(np.float32)
        elif name.endswith("params") and len(shape) == 2:
            values[name] = rng.normal(0, shape[1] ** -0.5, shape).astype(np.float32)
        elif name.endswith("bias_params"):
            values[name] = rng.normal(0, 0.1, shape).astype(np.float32)
    for name, value in network.state.items():
        if name.endswith(".stats_var"):
            mean = values[name.replace(".stats_var", ".stats_mean")]
            values[name] = (mean**2 + rng.uniform(0.5, 1.5, np.shape(value))).astype(np.float32)
    write_model(path, network.assign(values), raw=True)


def _environment(core: str | None) -> dict[str, str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", SYMNET_COMPILE_CACHE="off")
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return env


def _openblas_core() -> str | None:
    """The OPENBLAS_CORETYPE benchmarks/kaldi_job.py gives Kaldi on this CPU (its `openblas_core`)."""
    spec = importlib.util.spec_from_file_location("kaldi_job", HERE.parents[2] / "benchmarks" / "kaldi_job.py")
    assert spec is not None and spec.loader is not None
    kaldi_job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kaldi_job)
    core: str | None = kaldi_job.openblas_core()
    return core


def prepare(case: Path, folder: Path) -> tuple[Path, list[np.ndarray], list[np.ndarray] | None]:
    """In `folder`: the case's configs (`symnet xconfig --config-dir configs`, run there as a recipe runs it),
    a random matrix for each fixed-affine-layer's file, the random model `model.raw`, and `feats.ark` (and
    `ivectors.ark`); returns the model's path, the features and the i-vectors (None without that input)."""
    from symnet._src.kaldi.text.xconfig import read_xconfig
    from symnet._src.kaldi.text.xconfig.expand import kaldi_matrix_text

    cwd = os.getcwd()
    os.chdir(folder)  # the configs' matrix paths are relative, as in the recipe's folder
    try:
        # final.config and the layers' matrices, as `symnet xconfig --config-dir` writes them, without its
        # xconfig_to_configs.py checks: Kaldi's script refuses three of the recipes (a label delay the LDA does
        # not share), and nnet3-init of their final.config is what both sides compute here
        xconfig = read_xconfig(case)
        (folder / "configs").mkdir()
        (folder / "configs" / "final.config").write_text(xconfig.config_text("final") or "")
        for name, matrix in xconfig.matrices.items():
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text(kaldi_matrix_text(matrix))
        expanded = xconfig.expanded(True)
        rng = np.random.default_rng(1)
        for match in re.finditer(r"fixed-affine-layer name=\S+ affine-transform-file=(\S+) .*?\bdim=(\d+)", expanded):
            target, dim = folder / match.group(1), int(match.group(2))
            target.parent.mkdir(parents=True, exist_ok=True)
            rows = rng.normal(0, dim**-0.5, (dim, dim + 1))
            target.write_text("[\n" + "\n".join(" ".join(f"{v:.6f}" for v in row) for row in rows) + " ]\n")
        randomized_model(folder / "configs" / "final.config", folder / "model.raw")
    finally:
        os.chdir(cwd)
    text = case.read_text()
    dims = {m.group(2): int(m.group(1)) for m in re.finditer(r"input dim=(\d+) name=(\S+)", text)}
    dims.update({m.group(1): int(m.group(2)) for m in re.finditer(r"input name=(\S+) dim=(\d+)", text)})
    feats = [rng.standard_normal((frames, dims["input"])).astype(np.float32) for frames in LENGTHS]
    kaldiio.save_ark(str(folder / "feats.ark"), {f"utt{i}": f for i, f in enumerate(feats)})
    ivectors = None
    if "ivector" in dims:
        ivectors = [rng.standard_normal(dims["ivector"]).astype(np.float32) for _ in LENGTHS]
        kaldiio.save_ark(str(folder / "ivectors.ark"), {f"utt{i}": v for i, v in enumerate(ivectors)})
    return folder / "model.raw", feats, ivectors


def projection(dim: int) -> np.ndarray:
    """`[dim, PROJECTIONS]`: what the fixtures keep of each output frame is its product with these columns."""
    return np.random.default_rng(2).standard_normal((dim, PROJECTIONS)) / np.sqrt(dim)


def compute(who: str, program: list[str], folder: Path, core: str | None) -> dict[str, np.ndarray] | str:
    """`program` (Kaldi's nnet3-compute, or `symnet compute`) on the prepared folder with nnet3-compute's default
    options: the outputs by utterance, or what failed."""
    out = folder / f"{who}.ark"
    extra = [f"--ivectors=ark:{folder / 'ivectors.ark'}"] if (folder / "ivectors.ark").exists() else []
    command = [*program, *extra, str(folder / "model.raw"), f"ark:{folder / 'feats.ark'}", f"ark:{out}"]
    result = subprocess.run(command, cwd=folder, env=_environment(core), capture_output=True, text=True)
    if result.returncode:
        lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("LOG")]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["?"]  # Kaldi's, else the last
        return f"{who} failed: {errors[-1][:300]}"
    return {key: np.asarray(value) for key, value in kaldiio.load_ark(str(out))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names or paths (default: every recipe case)")
    parser.add_argument("--kaldi-bin", type=Path, required=True, help="folder of Kaldi's nnet3-compute")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest difference / largest output")
    parser.add_argument("--write", action="store_true", help=f"also write Kaldi's projected outputs to {FIXTURES.name}")
    args = parser.parse_args()
    cases = [Path(c) if c.endswith(".xconfig") else HERE / "cases" / f"{c}.xconfig" for c in args.cases] or sorted(
        (HERE / "cases").glob("recipe-*.xconfig")
    )
    core, bad, fixtures = _openblas_core(), 0, {}
    symnet = [str(Path(sys.executable).with_name("symnet")), "compute"]
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="compare-") as scratch:
            folder = Path(scratch)
            try:
                prepare(case.resolve(), folder)
                kaldi = compute("kaldi", [str(args.kaldi_bin / "nnet3-compute")], folder, core)
                ours = compute("symnet", symnet, folder, core)
            except Exception as e:  # reported per case, as a failed computation is
                kaldi = ours = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if isinstance(kaldi, str) and isinstance(ours, str):  # an x-vector network: nnet3-xvector-compute's
            message, ok = f"both refuse it; Kaldi: {kaldi}; symnet: {ours}", True
            fixtures[f"{case.stem}.refused"] = np.array(True)
        elif isinstance(kaldi, str) or isinstance(ours, str):
            message, ok = kaldi if isinstance(kaldi, str) else str(ours), False
        elif set(kaldi) != set(ours) or any(kaldi[k].shape != ours[k].shape for k in kaldi):
            message, ok = f"shapes differ: Kaldi {[v.shape for v in kaldi.values()]}", False
        else:
            difference = max(float(np.max(np.abs(kaldi[k] - ours[k]))) for k in kaldi)
            largest = max(float(np.max(np.abs(kaldi[k]))) for k in kaldi)
            ok = difference <= args.tolerance * max(largest, 1.0)
            message = f"largest difference {difference:.2e}, largest output {largest:.2e}"
            if ok:
                joined = np.concatenate([kaldi[f"utt{i}"] for i in range(len(LENGTHS))], axis=0).astype(np.float64)
                fixtures[case.stem] = (joined @ projection(joined.shape[1])).astype(np.float32)
                fixtures[f"{case.stem}.largest"] = np.array(largest)
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case.stem}: {message}", flush=True)
    print(f"{len(cases) - bad} of {len(cases)} cases agree with Kaldi")
    if args.write:
        kept = dict(np.load(FIXTURES)) if FIXTURES.exists() else {}
        kept.update(fixtures)
        np.savez_compressed(FIXTURES, **kept)
        print(f"wrote {FIXTURES} ({len(fixtures)} arrays written, {len(kept)} in all)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
