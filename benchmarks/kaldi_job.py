"""The real job: `symnet compute` (the CLI, process start and compilation included) on 200 utterances.

The network is the Kaldi corpus's 6-layer 512-wide TDNN (`perf/tdnn6x512.config`
in `kaldi-oracle-dev.tar.xz`, read from the tarball, never copied into the
repository), with random batch-norm statistics (count 1) as in the corpus's
PERF.md. The job is 200 utterances of 100 to 1,500 frames (uniform, seeded)
of 40-dim N(0, 1) features, nnet3-compute's default options (50-frame chunks)
and one chunk per utterance (`--frames-per-chunk=3000`), run on one thread
(`taskset` to one core, XLA's CPU thread pool off) and on all threads. Frames
per second are printed beside Kaldi's own `nnet3-compute` on the same model,
features and chunk size, timed in the same run on one thread (Kaldi's
nnet3-compute is single-threaded), with each process's CPU seconds (user +
system) and the ratio per CPU second, which the load of a shared machine
changes least: found on PATH, or in `--kaldi-bin DIR`
(`../shared/kaldi-bin.tar.xz`'s `kaldi-bin/bin`). OpenBLAS is told the core
(`OPENBLAS_CORETYPE`: SkylakeX where the CPU has AVX-512, Haswell where it
has AVX2, whatever the environment says: `--openblas-core` to choose), or
Debian's build falls back to generic kernels on some CPUs and Kaldi runs
about two times slower (and an inherited `OPENBLAS_CORETYPE=Haswell` on a
CPU with AVX-512 made it 1.4 times slower on one machine). The outputs of both on the first
utterances are compared (the largest difference is printed).

Each process runs with a fresh, empty compile cache (`cold`: it compiles every
program and writes it) and then again with that cache (`warm`: a later run of
the same job, every program read from disk; `symnet._src.engine.compile_cache`).
`--rounds N` repeats Kaldi's run and symnet's runs N times, interleaved (Kaldi, then symnet, in each
round), and ends with each ratio's median and range over the rounds: Kaldi's own speed moves by a tenth
from one run to the next on a shared machine, so one round's ratio says little.
`--phases` also runs the job in-process (same thread settings) and prints
where the time goes: importing jax, importing the rest of symnet, reading the
model, the first pass over the job (planning and compiling, or reading the
compile cache, included) and a second pass (the compiled forward alone).

    python benchmarks/kaldi_job.py [--corpus ../shared/kaldi-oracle-dev.tar.xz | --config tdnn6x512.config]
        [--utterances 20 --frames 500] [--chunks 50 3000] [--threads one] [--cache cold warm] [--rounds 3]
        [--phases]
        [--kaldi-bin ../kaldi-bin/bin]
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import kaldiio
import numpy as np

REPO = Path(__file__).resolve().parents[1]
MEMBER = "perf/tdnn6x512.config"
#: Utterances whose outputs from symnet and Kaldi are compared.
COMPARED = 3


def default_corpus() -> Path:
    """The corpus the tests use: `shared/kaldi-oracle-dev.tar.xz` in the nearest ancestor of the repository that
    has one, else the copy that ships with the repository (tests/data)."""
    for folder in REPO.parents:
        candidate = folder / "shared" / "kaldi-oracle-dev.tar.xz"
        if candidate.exists():
            return candidate
    return REPO / "tests" / "data" / "kaldi-oracle-dev.tar.xz"


def config_text(corpus: Path) -> bytes:
    with tarfile.open(corpus) as tar:
        for member in tar.getmembers():
            if member.name.endswith(MEMBER):
                handle = tar.extractfile(member)
                if handle is not None:
                    return handle.read()
    raise SystemExit(f"{corpus} has no {MEMBER}")


def write_model(config: Path, path: Path, seed: int = 0) -> None:
    """The network of `config` with random batch-norm statistics, as a Kaldi model file."""
    from symnet._src.kaldi.models.model import write_model as write_kaldi
    from symnet.kaldi import read_network

    kaldi = read_network(str(config), seed=seed)
    rng = np.random.default_rng(seed)
    values = {}
    for name, value in kaldi.state.items():
        if name.endswith(".count"):
            values[name] = np.ones_like(np.asarray(value))
        elif name.endswith(".stats_mean"):
            values[name] = rng.normal(0, 0.1, np.shape(value)).astype(np.float32)
    for name, value in kaldi.state.items():
        if name.endswith(".stats_var"):
            mean = values[name.replace(".stats_var", ".stats_mean")]
            values[name] = (mean**2 + rng.uniform(0.5, 1.5, np.shape(value))).astype(np.float32)
    kaldi = kaldi.assign(values)
    write_kaldi(path, kaldi, raw=True)


def write_features(path: Path, count: int, low: int, high: int, seed: int = 0) -> int:
    """`count` utterances of `low`..`high` frames as a Kaldi binary archive; the total number of frames."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high + 1, size=count)
    with kaldiio.WriteHelper(f"ark:{path}") as writer:
        for i, length in enumerate(lengths):
            writer(f"utt{i:04d}", rng.standard_normal((int(length), 40)).astype(np.float32))
    return int(lengths.sum())


def environment(one_thread: bool, cache: Path | None) -> tuple[dict[str, str], list[str]]:
    """The environment and command prefix of a run: one thread (one core, no XLA thread pool) or all."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # symnet's bytecode is compiled once, as installing a package does
    env["SYMNET_COMPILE_CACHE"] = str(cache) if cache is not None else "off"
    prefix: list[str] = []
    if one_thread:
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
        if shutil.which("taskset"):
            prefix = ["taskset", "-c", "0"]
    return env, prefix


def run(
    model: Path, feats: Path, frames_per_chunk: int, one_thread: bool, cache: Path | None, out: str = "ark:/dev/null"
) -> tuple[float, float]:
    """Wall and CPU seconds of one `symnet compute` process (compile cache in `cache`, or none)."""
    env, prefix = environment(one_thread, cache)
    script = Path(sys.executable).with_name("symnet")
    command = [
        *prefix,
        str(script),
        "compute",
        f"--frames-per-chunk={frames_per_chunk}",
        str(model),
        f"ark:{feats}",
        out,
    ]
    return timed(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL)


def timed(command: list[str], **kwargs: Any) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and its children) of one command: on a shared
    machine the CPU seconds are what the load changes least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, **kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def openblas_core() -> str | None:
    """The OPENBLAS_CORETYPE for this CPU (None: leave OpenBLAS's own choice)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if " avx512f" in flags:
        return "SKYLAKEX"
    if " avx2" in flags:
        return "HASWELL"
    return None


def kaldi_run(
    nnet3_compute: Path,
    model: Path,
    feats: Path,
    frames_per_chunk: int,
    core: str | None,
    out: str = "ark:/dev/null",
) -> tuple[float, float]:
    """Wall and CPU seconds of Kaldi's `nnet3-compute` on one thread (one core, one OpenBLAS thread), OpenBLAS
    told the `core` (None: the environment's OPENBLAS_CORETYPE, or OpenBLAS's own choice)."""
    env, prefix = environment(True, None)
    if core is not None:
        env["OPENBLAS_CORETYPE"] = core
    command = [*prefix, str(nnet3_compute), f"--frames-per-chunk={frames_per_chunk}", str(model), f"ark:{feats}", out]
    return timed(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def find_kaldi(folder: Path | None) -> Path | None:
    """Kaldi's nnet3-compute: in `folder`, else on PATH (None: not found)."""
    if folder is not None:
        candidate = folder / "nnet3-compute"
        if not candidate.exists():
            raise SystemExit(f"--kaldi-bin {folder}: no nnet3-compute there")
        return candidate
    found = shutil.which("nnet3-compute")
    return Path(found) if found else None


def largest_difference(
    nnet3_compute: Path, model: Path, feats: Path, folder: Path, frames_per_chunk: int, core: str | None
) -> float:
    """The largest absolute difference between symnet's and Kaldi's outputs on the first utterances."""
    subset = folder / "subset.ark"
    with kaldiio.WriteHelper(f"ark:{subset}") as writer:
        for i, (key, value) in enumerate(kaldiio.load_ark(str(feats))):
            if i == COMPARED:
                break
            writer(key, value)
    ours, theirs = folder / "symnet-out.ark", folder / "kaldi-out.ark"
    run(model, subset, frames_per_chunk, True, None, out=f"ark:{ours}")
    kaldi_run(nnet3_compute, model, subset, frames_per_chunk, core, out=f"ark:{theirs}")
    a, b = dict(kaldiio.load_ark(str(ours))), dict(kaldiio.load_ark(str(theirs)))
    if set(a) != set(b):
        raise SystemExit(f"symnet wrote {sorted(a)}, Kaldi {sorted(b)}")
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def phases(model: Path, feats: Path, frames_per_chunk: int, cache: Path | None) -> None:
    """In this process: the time of each phase of the job (`--phase-child`, started by `--phases`)."""
    start = time.perf_counter()
    import jax
    import jax.monitoring

    jax_done = time.perf_counter()
    from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
    from symnet._src.kaldi_io.tables import iter_table
    from symnet._src.loading import load_network
    from symnet.engine import enable_compile_cache

    symnet_done = time.perf_counter()
    enable_compile_cache(cache if cache is not None else "off")
    compiles: list[float] = []

    def listener(event: str, duration_secs: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration_secs)

    jax.monitoring.register_event_duration_secs_listener(listener)
    network = load_network(str(model))
    read_done = time.perf_counter()
    read_compiles = len(compiles)
    computer = Nnet3Computer(network, ComputeOptions(frames_per_chunk=frames_per_chunk))
    utterances = [np.asarray(f) for _, f in iter_table(f"ark:{feats}", "features")]
    frames = sum(len(f) for f in utterances)
    passes = []
    for _ in range(2):
        begin = time.perf_counter()
        job = computer.job()  # as `symnet compute` runs it
        for i, feats in enumerate(utterances):
            job.add(i, feats)
        job.finish()
        passes.append(time.perf_counter() - begin)
    job_compiles = compiles[read_compiles:]
    print(
        f"phases ({frames} frames, --frames-per-chunk={frames_per_chunk}, compile cache "
        f"{'on' if cache is not None else 'off'}): import jax {jax_done - start:.2f} s, import symnet "
        f"{symnet_done - jax_done:.2f} s, read model {read_done - symnet_done:.2f} s "
        f"({read_compiles} programs, {sum(compiles[:read_compiles]):.2f} s compiling), first pass "
        f"{passes[0]:.2f} s ({len(job_compiles)} programs, {sum(job_compiles):.2f} s compiling), compiled pass "
        f"{passes[1]:.2f} s = {frames / passes[1]:.0f} frames/s",
        flush=True,
    )


def run_phases(model: Path, feats: Path, frames_per_chunk: int, one_thread: bool, cache: Path | None) -> None:
    env, prefix = environment(one_thread, cache)
    command = [*prefix, sys.executable, __file__, "--phase-child", str(model), str(feats), str(frames_per_chunk)]
    if cache is not None:
        command.append(str(cache))
    subprocess.run(command, check=True, env=env, cwd=REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", type=Path, default=None, help="kaldi-oracle-dev.tar.xz (default: ../shared's, else tests/data's)"
    )
    parser.add_argument("--config", type=Path, default=None, help="tdnn6x512.config itself, instead of the tarball")
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--min-frames", type=int, default=100)
    parser.add_argument("--max-frames", type=int, default=1500)
    parser.add_argument("--chunks", type=int, nargs="+", default=[50, 3000], help="--frames-per-chunk values")
    parser.add_argument("--frames", type=int, default=None, help="every utterance this long (min = max)")
    parser.add_argument("--threads", choices=["one", "all", "both"], default="both")
    parser.add_argument(
        "--cache", nargs="+", choices=["off", "cold", "warm"], default=["cold", "warm"], help="compile cache runs"
    )
    parser.add_argument("--rounds", type=int, default=1, help="Kaldi's and symnet's runs, interleaved, this often")
    parser.add_argument("--phases", action="store_true", help="also time each phase in-process")
    parser.add_argument("--kaldi-bin", type=Path, default=None, help="folder of Kaldi's nnet3-compute (default: PATH)")
    parser.add_argument(
        "--openblas-core",
        default=None,
        help="OPENBLAS_CORETYPE for Kaldi (default: the best this CPU has, whatever the environment says)",
    )
    parser.add_argument("--phase-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    compileall.compile_dir(REPO / "symnet", quiet=1)  # as installing the package does: no run pays for it
    if args.phase_child:
        model, feats, chunk, *cache = args.phase_child
        phases(Path(model), Path(feats), int(chunk), Path(cache[0]) if cache else None)
        return
    if args.frames is not None:
        args.min_frames = args.max_frames = args.frames
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = args.config
        if config is None:
            config = folder / "tdnn6x512.config"
            config.write_bytes(config_text(args.corpus or default_corpus()))
        model, feats = folder / "model.raw", folder / "feats.ark"
        write_model(config, model)
        frames = write_features(feats, args.utterances, args.min_frames, args.max_frames)
        print(f"{args.utterances} utterances, {frames} frames, {args.min_frames}-{args.max_frames} frames each")
        nnet3_compute = find_kaldi(args.kaldi_bin)
        core = args.openblas_core or openblas_core()
        if nnet3_compute is None:
            print("Kaldi's nnet3-compute not found (PATH or --kaldi-bin): no Kaldi figures")
        else:
            inherited = os.environ.get("OPENBLAS_CORETYPE")
            if core is not None and inherited and inherited.upper() != core.upper():
                print(f"OPENBLAS_CORETYPE={inherited} in the environment; Kaldi runs with {core} (--openblas-core)")
            shown = core or inherited or "OpenBLAS's choice"
            for chunk in args.chunks:
                difference = largest_difference(nnet3_compute, model, feats, folder, chunk, core)
                print(
                    f"--frames-per-chunk={chunk}: the outputs of the first {COMPARED} utterances differ from "
                    f"Kaldi's (OPENBLAS_CORETYPE={shown}) by at most {difference:.1e}",
                    flush=True,
                )
        print(
            "| round | threads | --frames-per-chunk | compile cache | wall (s) | symnet frames/s | "
            "Kaldi frames/s (1 thread, this round) | symnet / Kaldi | CPU (s) | symnet / Kaldi per CPU second |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        modes = {"one": [True], "all": [False], "both": [True, False]}[args.threads]
        ratios: dict[tuple[bool, int, str], list[tuple[float, float]]] = {}
        for round_ in range(1, args.rounds + 1):
            kaldi_fps: dict[int, tuple[float, float]] = {}  # per chunk size: frames per wall and per CPU second
            for chunk in args.chunks if nnet3_compute is not None else []:
                wall, cpu = kaldi_run(nnet3_compute, model, feats, chunk, core)
                kaldi_fps[chunk] = frames / wall, frames / cpu
            for one_thread in modes:
                for chunk in args.chunks:
                    cache = folder / f"cache-{round_}-{one_thread}-{chunk}"  # empty: the first run is cold
                    for state in args.cache:
                        wall, cpu = run(model, feats, chunk, one_thread, None if state == "off" else cache)
                        kaldi = kaldi_fps.get(chunk)
                        if kaldi:
                            ratios.setdefault((one_thread, chunk, state), []).append(
                                (frames / wall / kaldi[0], frames / cpu / kaldi[1])
                            )
                        print(
                            f"| {round_} | {'1' if one_thread else 'all'} | {chunk} | {state} | {wall:.2f} | "
                            f"{frames / wall:.0f} | {f'{kaldi[0]:.0f}' if kaldi else '-'} | "
                            f"{f'{frames / wall / kaldi[0]:.2f}' if kaldi else '-'} | {cpu:.2f} | "
                            f"{f'{frames / cpu / kaldi[1]:.2f}' if kaldi else '-'} |",
                            flush=True,
                        )
                    if args.phases and round_ == args.rounds:
                        warm = set(args.cache) != {"off"}  # after a cold run: the warm cache
                        run_phases(model, feats, chunk, one_thread, cache if warm else None)
        if args.rounds > 1 and ratios:
            print(f"\nsymnet / Kaldi over {args.rounds} rounds: median (range), wall clock and per CPU second")
            for (one_thread, chunk, state), pairs in ratios.items():
                walls, cpus = sorted(p[0] for p in pairs), sorted(p[1] for p in pairs)
                print(
                    f"- {'1 thread' if one_thread else 'all threads'}, --frames-per-chunk={chunk}, {state} cache: "
                    f"{float(np.median(walls)):.2f} ({walls[0]:.2f}-{walls[-1]:.2f}); per CPU second "
                    f"{float(np.median(cpus)):.2f} ({cpus[0]:.2f}-{cpus[-1]:.2f})"
                )


if __name__ == "__main__":
    main()
