"""Training on corpora larger than memory: peak memory against corpus size, reading speed against kaldiio, and
the share of a TDNN-F step spent waiting for input.

    python benchmarks/streaming.py --folder /tmp/corpus --gigabytes 1,20 --steps 60

For each size it writes a Kaldi corpus (80-dim float32 features in archives of about 1 GB with feats.scp,
alignments of 2,000 pdfs; utterances of 200-1,500 frames) unless `--folder` already holds it, then in a fresh
process trains a TDNN-F xconfig (`fit` on `stream_kaldi_data`, minibatches of 64 chunks of 150 frames, 2 threads
of XLA) for `--steps` steps and reports: the seconds to index the corpus, the process's peak resident memory,
the median step, and the share of step time spent waiting for a minibatch. Then it reads the first `--read-mb`
MB of features with symnet's reader and with kaldiio (plain and compressed archives, alternating, best of three).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from machine import cpu_model

DIM, PDFS = 80, 2000
ARCHIVE_BYTES = 1 << 30


def write_corpus(folder: Path, gigabytes: float, seed: int = 0) -> None:
    """feats.scp over archives of about 1 GB, and ali.ark; utterance lengths drawn uniformly in [200, 1500]."""
    import kaldiio

    if (folder / "done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    block = rng.standard_normal((1 << 20, DIM), dtype=np.float32)  # features are slices of one random block
    total, archive, written, index = int(gigabytes * (1 << 30)), 0, 0, 0
    scp = open(folder / "feats.scp", "w")
    ali_writer = kaldiio.WriteHelper(f"ark:{folder / 'ali.ark'}")
    while written < total:
        name = folder / f"feats.{archive}.ark"
        with kaldiio.WriteHelper(f"ark,scp:{name},{folder / f'part.{archive}.scp'}") as writer:
            size = 0
            while size < ARCHIVE_BYTES and written < total:
                frames = int(rng.integers(200, 1501))
                start = int(rng.integers(0, len(block) - frames))
                key = f"utt{index:08d}"
                writer(key, block[start : start + frames])
                ali_writer(key, rng.integers(0, PDFS, size=frames).astype(np.int32))
                size += frames * DIM * 4 + 30
                written += frames * DIM * 4 + 30
                index += 1
        scp.write(open(folder / f"part.{archive}.scp").read())
        archive += 1
    scp.close()
    ali_writer.close()
    (folder / "done").write_text(str(index))


def tdnnf_network() -> object:
    from symnet.kaldi.xconfig import parse_xconfig_network

    lines = [
        f"input dim={DIM} name=input",
        "relu-batchnorm-layer name=tdnn1 input=Append(-1,0,1) dim=512",
        "tdnnf-layer name=tdnnf2 dim=512 bottleneck-dim=128 time-stride=1",
        "tdnnf-layer name=tdnnf3 dim=512 bottleneck-dim=128 time-stride=1",
        "tdnnf-layer name=tdnnf4 dim=512 bottleneck-dim=128 time-stride=3",
        "tdnnf-layer name=tdnnf5 dim=512 bottleneck-dim=128 time-stride=3",
        "linear-component name=prefinal-l dim=192 orthonormal-constraint=-1.0",
        "prefinal-layer name=prefinal input=prefinal-l small-dim=192 big-dim=512",
        f"output-layer name=output dim={PDFS}",
    ]
    return parse_xconfig_network("\n".join(lines), seed=0)


def measure_training(folder: Path, steps: int) -> dict[str, float]:
    """In this process: index the corpus, train `steps` steps, report times and peak memory."""
    import optax

    from symnet.train import fit, stream_kaldi_data

    started = time.perf_counter()
    stream = stream_kaldi_data(f"scp:{folder / 'feats.scp'}", f"ark:{folder / 'ali.ark'}")
    index_seconds = time.perf_counter() - started
    seen: list[tuple[float, float]] = []
    fit(
        tdnnf_network(),
        stream,
        optax.adam(1e-3),
        batch_size=64,
        chunk=150,
        frame_subsampling_factor=3,
        max_steps=steps,
        progress=False,
        rules=False,
        on_step=lambda s: seen.append((s.seconds, s.waited)),
    )
    timed = seen[3:]  # after compilation and the first window
    return {
        "utterances": len(stream),
        "frames": stream.num_frames,
        "index_seconds": index_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_ms": float(np.median([s for s, _ in timed]) * 1e3),
        "waiting_share": float(sum(w for _, w in timed) / max(sum(s for s, _ in timed), 1e-9)),
    }


def reading_speed(folder: Path, megabytes: int) -> dict[str, float]:
    """MB/s of symnet's reader and kaldiio's over the first `megabytes` of features, plain and compressed."""
    import kaldiio

    from symnet._src.kaldi_io.scp import read_entry

    entries, size = [], 0
    for line in open(folder / "feats.scp"):
        key, entry = line.split()
        entries.append((key, entry))
        size += 0
        if len(entries) * 850 * DIM * 4 > megabytes << 20:
            break
    compressed = folder / "compressed"
    if not (compressed / "feats.scp").exists():
        compressed.mkdir(exist_ok=True)
        with kaldiio.WriteHelper(
            f"ark,scp:{compressed / 'feats.ark'},{compressed / 'feats.scp'}", compression_method=2
        ) as writer:
            for key, entry in entries:
                writer(key, kaldiio.load_mat(entry))
    compressed_entries = [line.split() for line in open(compressed / "feats.scp")]
    out: dict[str, float] = {}
    for kind, table in (("plain", entries), ("compressed", compressed_entries)):
        mb = sum(kaldiio.load_mat(e).nbytes for _, e in table) / (1 << 20)
        best = {"symnet": float("inf"), "kaldiio": float("inf")}
        for _ in range(3):
            for reader in ("symnet", "kaldiio"):
                started = time.perf_counter()
                for key, entry in table:
                    if reader == "symnet":
                        read_entry(entry, "feats.scp", key)
                    else:
                        kaldiio.load_mat(entry)
                best[reader] = min(best[reader], time.perf_counter() - started)
        out[f"{kind}_symnet_mb_s"] = mb / best["symnet"]
        out[f"{kind}_kaldiio_mb_s"] = mb / best["kaldiio"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True, help="where the corpora are written (kept for the next run)")
    p.add_argument("--gigabytes", default="1,20", help="corpus sizes in GB, comma-separated")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--read-mb", type=int, default=512)
    p.add_argument("--measure", help=argparse.SUPPRESS)  # a child process: the corpus folder to train on
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure_training(Path(args.measure), args.steps)))
        return
    print(f"CPU: {cpu_model()}; {os.cpu_count()} cores; XLA on 2 threads")
    rows = []
    for gigabytes in (float(g) for g in args.gigabytes.split(",")):
        folder = Path(args.folder) / f"{gigabytes:g}GB"
        started = time.perf_counter()
        write_corpus(folder, gigabytes)
        print(f"{gigabytes:g} GB corpus ready in {time.perf_counter() - started:.0f} s", flush=True)
        env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2"}
        command = [
            sys.executable,
            __file__,
            "--folder",
            args.folder,
            "--measure",
            str(folder),
            "--steps",
            str(args.steps),
        ]
        result = json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)
        rows.append((gigabytes, result))
        print(
            f"{gigabytes:g} GB: {result['utterances']} utterances, {result['frames']} frames; index "
            f"{result['index_seconds']:.1f} s; peak memory {result['peak_rss_mb']:.0f} MB; step "
            f"{result['step_ms']:.0f} ms; waiting {100 * result['waiting_share']:.1f}% of step time",
            flush=True,
        )
    if len(rows) > 1:
        low, high = rows[0][1]["peak_rss_mb"], rows[-1][1]["peak_rss_mb"]
        print(f"peak memory, {rows[-1][0]:g} GB / {rows[0][0]:g} GB: {high / low:.3f}")
    speed = reading_speed(Path(args.folder) / f"{rows[0][0]:g}GB", args.read_mb)
    for kind in ("plain", "compressed"):
        s, k = speed[f"{kind}_symnet_mb_s"], speed[f"{kind}_kaldiio_mb_s"]
        print(f"reading {kind} features: symnet {s:.0f} MB/s, kaldiio {k:.0f} MB/s (symnet / kaldiio {s / k:.2f})")


if __name__ == "__main__":
    main()
