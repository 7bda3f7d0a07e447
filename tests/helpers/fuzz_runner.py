"""Run symnet's readers on many mutated or crafted inputs in a child process with an address-space limit.

    python -m helpers.fuzz_runner JOB.json      (run with tests/ on PYTHONPATH; `run_campaign` does this)

A job names a target (a reader: `kaldi_model`, `kaldi_config`, `xconfig`,
`symnet_model`, `npz`, `checkpoint`, `ark`, `scp`, `cli_info`, `cli_copy`, `egs`,
`cegs`, `fst`, `topology`), the
seed files to mutate (or `crafted`: the target's hand-made hostile inputs),
how many mutants and a random seed. Each input is written to a file and given
to the target; the outcome is `ok`, a symnet error (by class), or anything
else: another exception, a MemoryError under the limit, a time-out. Inputs of
the last kind are kept in the job's folder as reproducers. The child prints
one JSON summary; `run_campaign` (for tests) starts it under `RLIMIT_AS` and
returns the summary, with any crash (a signal, the limit) reported with the
input that caused it. The summary's `slowest` is the CPU seconds of the slowest input and its label.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The child's address-space limit: symnet with JAX loaded takes about 1.5 GiB of it.
MEMORY_LIMIT = 3 << 30
#: Seconds one input may take.
INPUT_TIMEOUT = 30


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


# ----- targets: one input file -> the reader under test --------------------------------------------


def _kaldi_model(path: str, work: str) -> None:
    from symnet.kaldi import read_model

    read_model(path)


def _kaldi_config(path: str, work: str) -> None:
    from symnet.kaldi import read_network

    read_network(path)


def _xconfig(path: str, work: str) -> None:
    from symnet._src.kaldi.text.xconfig import read_xconfig

    read_xconfig(path).network()


def _symnet_model(path: str, work: str) -> None:
    import symnet

    symnet.load(path)


def _npz(path: str, work: str) -> None:
    from symnet._src.base.safe_read import NpzArchive
    from symnet.errors import ModelFormatError

    with NpzArchive(path, error=ModelFormatError, what="npz file") as archive:
        for name in archive.names:
            spec = archive.spec(name)
            if spec.dtype.kind == "U":
                archive.read_text(name)
            else:
                archive.read(name, max_bytes=1 << 26)


_CHECKPOINT_NET: Any = None


def checkpoint_network() -> tuple[Any, Any]:
    """The small network and optimiser state the checkpoint target loads into."""
    global _CHECKPOINT_NET
    if _CHECKPOINT_NET is None:
        import optax

        from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, ReLU, Weight, Zeros

        x = Input("input", 3)
        h = ReLU(
            Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((9, 5), 0.3), name="l1.w")
            + Weight(Zeros(5), name="l1.b")
        )
        net = Network(LogSoftmax(h @ Weight(Normal((5, 4), 0.3), name="out.w")))
        _CHECKPOINT_NET = (net, optax.adam(1e-2).init(net.params))
    return _CHECKPOINT_NET


def _checkpoint(path: str, work: str) -> None:
    from symnet._src.train import checkpoint, resume

    net, state = checkpoint_network()
    _, _, position, extra, _ = checkpoint.load_run(path, net, state)
    resume.check_extra(path, extra, position, batches=10)


def _ark(path: str, work: str) -> None:
    from symnet._src.kaldi_io.tables import iter_table

    for _ in iter_table("ark:" + path, "archive"):
        pass


def _scp(path: str, work: str) -> None:
    from symnet._src.kaldi_io.tables import read_table

    table = read_table("scp:" + path, "scp")
    for key in table:
        table[key]


def _cli(args: list[str]) -> None:
    import io

    from symnet._src.app.cli import main

    status = main(args, stdout=io.StringIO(), stderr=io.StringIO())
    if status not in (0, 1):
        raise AssertionError(f"exit status {status}")


def _cli_info(path: str, work: str) -> None:
    _cli(["info", path])


def _cli_copy(path: str, work: str) -> None:
    binary = "true" if os.path.getsize(path) % 2 else "false"
    _cli(["copy", "--binary=" + binary, path, os.path.join(work, "copy.out")])


def _egs(path: str, work: str) -> None:
    from symnet._src.kaldi_io.egs import egs_chunks, read_egs

    examples = list(read_egs(path))
    if examples:  # the training chunks: targets from sparse outputs
        egs_chunks(examples, soft="max")


def _cegs(path: str, work: str) -> None:
    from symnet._src.kaldi_io.egs import read_cegs

    for _ in read_cegs(path):
        pass


def _fst(path: str, work: str) -> None:
    from symnet.chain import read_fst

    read_fst(path)


def _topology(path: str, work: str) -> None:
    from helpers import costly

    costly.read("topology", path)


TARGETS: dict[str, Callable[[str, str], None]] = {
    "kaldi_model": _kaldi_model,
    "kaldi_config": _kaldi_config,
    "xconfig": _xconfig,
    "symnet_model": _symnet_model,
    "npz": _npz,
    "checkpoint": _checkpoint,
    "ark": _ark,
    "scp": _scp,
    "cli_info": _cli_info,
    "cli_copy": _cli_copy,
    "egs": _egs,
    "cegs": _cegs,
    "fst": _fst,
    "topology": _topology,
}


# ----- the inputs of a job ------------------------------------------------------------------------------


def job_inputs(job: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """`(label, bytes)` of every input of a job."""
    from helpers import fuzz, fuzz_crafted

    if job.get("crafted"):
        only = job.get("only")
        for label, data in fuzz_crafted.CRAFTED[job["crafted"]](job):
            if only is None or label in only:
                yield label, data
        return
    rng = random.Random(job.get("seed", 0))
    seeds = [(name, Path(name).read_bytes()) for name in job["seeds"]]
    for i in range(job["count"]):
        name, data = seeds[i % len(seeds)]
        (mutant,) = fuzz.mutations(data, rng, 1, text=job.get("text", False), rounds=job.get("rounds", 3))
        yield f"{Path(name).name}#{i}", mutant


def peak_rss_mb() -> int:
    """This process's peak resident memory since it started its program (VmHWM; `ru_maxrss` would count the
    parent it was forked from)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _classify(error: BaseException) -> str:
    from symnet.errors import SymnetError

    if isinstance(error, SymnetError):
        return "symnet:" + type(error).__name__
    return "other"


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run every input of `job` in this process; the summary (see the module doc)."""
    target = TARGETS[job["target"]]
    folder = Path(job["folder"])
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    for extra in job.get("files", {}).items():  # files the inputs may refer to (an scp's archives)
        (work / extra[0]).write_bytes(bytes.fromhex(extra[1]))
    progress = folder / "progress"
    outcomes: Counter[str] = Counter()
    others: list[dict[str, str]] = []
    accepted: list[str] = []  # crafted inputs read without an error
    slowest: list[Any] = [0.0, ""]  # CPU seconds, label
    suffix = job.get("suffix", "")
    signal.signal(signal.SIGALRM, _alarm)
    started = time.time()
    start = job.get("start", 0)

    def summary() -> dict[str, Any]:
        return {
            "target": job["target"],
            "inputs": sum(outcomes.values()),
            "outcomes": dict(outcomes),
            "others": others,
            "accepted": accepted,
            "max_rss_mb": peak_rss_mb(),
            "seconds": round(time.time() - started, 1),
            "slowest": slowest,
        }

    for index, (label, data) in enumerate(job_inputs(job)):
        if index < start:
            continue
        path = work / f"input{suffix}"
        path.write_bytes(data)
        (folder / "current.bin").write_bytes(data)
        progress.write_text(json.dumps({"index": index, "label": label, "summary": json.dumps(summary())}))
        signal.alarm(INPUT_TIMEOUT)
        cpu = time.process_time()
        try:
            target(str(path), str(work))
            outcome = "ok"
        except _Timeout:
            outcome, error = "other", "timeout"
        except BaseException as e:  # everything counts: this is what the fuzzing is for
            outcome = _classify(e)
            error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            if outcome == "other":
                error += "\n" + "".join(traceback.format_exception(e)[-3:])[-1500:]
        finally:
            signal.alarm(0)
        if time.process_time() - cpu > slowest[0]:
            slowest[:] = [round(time.process_time() - cpu, 2), label]
        outcomes[outcome] += 1
        if outcome == "ok" and job.get("crafted"):
            accepted.append(label)
        if outcome == "other":
            keep = folder / f"reproducer-{index}.bin"
            keep.write_bytes(data)
            others.append({"label": label, "error": error, "reproducer": str(keep)})
    return summary()


def run_campaign(job: dict[str, Any], *, limit: int = MEMORY_LIMIT, timeout: float = 1200) -> dict[str, Any]:
    """Run `job` in child processes under `RLIMIT_AS` = `limit`; the summary. An input that kills the child
    (a signal, an abort in native code) is reported as an `other` outcome with its reproducer, and the
    campaign goes on from the next input in a new child."""
    folder = Path(job.get("folder") or tempfile.mkdtemp(prefix=f"fuzz-{job['target']}-"))
    folder.mkdir(parents=True, exist_ok=True)
    tests = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
        "JAX_PLATFORMS": "cpu",
        "SYMNET_FUZZ_MEMORY_LIMIT": str(limit),
    }
    total: dict[str, Any] = {
        "target": job["target"],
        "inputs": 0,
        "outcomes": Counter(),
        "others": [],
        "accepted": [],
        "max_rss_mb": 0,
        "seconds": 0.0,
        "slowest": [0.0, ""],
    }
    deadline = time.time() + timeout
    start = 0
    while True:
        spec = {**job, "folder": str(folder), "start": start}
        (folder / "job.json").write_text(json.dumps(spec))
        (folder / "progress").unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "helpers.fuzz_runner", str(folder / "job.json")],
            capture_output=True,
            text=True,
            timeout=max(deadline - time.time(), 1),
            env=env,
            cwd=folder,
        )
        if proc.returncode == 0:
            part = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            where = json.loads((folder / "progress").read_text()) if (folder / "progress").exists() else None
            if where is None:  # died before its first input: nothing to blame an input for
                raise RuntimeError(f"the fuzz child failed to start: {proc.stderr[-3000:]}")
            keep = folder / f"reproducer-{where['index']}.bin"
            (folder / "current.bin").replace(keep)
            part = json.loads(where["summary"])
            part["outcomes"]["other"] = part["outcomes"].get("other", 0) + 1
            part["others"].append(
                {
                    "label": where["label"],
                    "reproducer": str(keep),
                    "error": f"the process died (status {proc.returncode}): {proc.stderr[-1500:]}",
                }
            )
            part["inputs"] += 1
        total["inputs"] += part["inputs"]
        total["outcomes"].update(part["outcomes"])
        total["others"] += part["others"]
        total["accepted"] += part.get("accepted", [])
        total["max_rss_mb"] = max(total["max_rss_mb"], part.get("max_rss_mb") or 0)
        total["seconds"] += part.get("seconds") or 0
        total["slowest"] = max(total["slowest"], part.get("slowest") or [0.0, ""])
        if proc.returncode == 0:
            break
        start = where["index"] + 1
    total["outcomes"] = dict(total["outcomes"])
    return total


def _limit_memory() -> None:
    limit = os.environ.get("SYMNET_FUZZ_MEMORY_LIMIT")
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


if __name__ == "__main__":
    _limit_memory()  # first, before symnet and JAX are imported: they count too
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(run_job(spec)))
