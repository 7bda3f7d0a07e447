"""Reading the real-Kaldi corpus's cases (see its README.md): what nnet3-info printed, the commands that made
the recorded outputs, and the outputs themselves.

A case folder holds `cmd.txt`, the exact commands (run inside the folder). `compute_runs` turns every
`nnet3-compute` line of it into a `ComputeRun` (its options, the node it reads as `output`, its i-vectors and the
file it wrote), and adds the runs cmd.txt's notes vouch for: "--frames-per-chunk=8 gives the same output" is a
run with 8-frame chunks whose output is output.txt, and nnet3-compute's default `--frames-per-chunk=50` has the
output of output.txt wherever that is one chunk per utterance or chunking does not change the output.
`exact_run` reads the `nnet3-eval-exact` line, `exact_outputs` its two files.
"""

from __future__ import annotations

import csv
import functools
import math
import pathlib
import re
import shlex
from collections.abc import Mapping

import attrs
import kaldiio
import numpy as np

from helpers.kaldi_oracle import corpus_dir
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions

#: nnet3-compute's options as symnet's ComputeOptions fields, and how to read their values.
_COMPUTE_OPTIONS = {
    "frames-per-chunk": int,
    "extra-left-context": int,
    "extra-right-context": int,
    "extra-left-context-initial": int,
    "extra-right-context-final": int,
    "frame-subsampling-factor": int,
    "acoustic-scale": float,
}


@attrs.frozen
class ComputeRun:
    """One nnet3-compute run: `argv` (its options, as `symnet compute` takes them), the node read as `output`
    (nnet3-copy's rename-node), the i-vector archive, the file it wrote, and whether cmd.txt ran it or a note
    vouches for it."""

    argv: tuple[str, ...]
    options: ComputeOptions
    output: str
    ivectors: str | None
    result: str
    recorded: bool


@attrs.frozen
class ExactRun:
    """The nnet3-eval-exact line: the outputs it requested, its margin, its i-vector archive."""

    outputs: tuple[str, ...]
    margin: int
    ivectors: str | None


def case_folder(case: str) -> pathlib.Path:
    """The folder of a case (`cases/<case>`, or `rejected/<case>`)."""
    root = corpus_dir()
    folder = root / "cases" / case
    return folder if folder.is_dir() else root / "rejected" / case


@functools.cache
def index_rows(root: pathlib.Path | None = None) -> dict[str, dict[str, str]]:
    """index.tsv's rows by case (of the corpus unpacked at `root`, default the one under test): source,
    components, descriptors, recurrent, ..."""
    with open((root or corpus_dir()) / "index.tsv", newline="") as f:
        return {row["case"]: row for row in csv.DictReader(f, delimiter="\t")}


def rejected_names(root: pathlib.Path | None = None) -> list[str]:
    return sorted(p.name for p in ((root or corpus_dir()) / "rejected").iterdir() if p.is_dir())


def info_context(folder: pathlib.Path) -> dict[str, int]:
    """left-context, right-context and modulus as nnet3-info printed them (info.txt)."""
    text = (folder / "info.txt").read_text()
    return {
        key: int(re.search(rf"^{key}: (-?\d+)$", text, re.M).group(1))
        for key in ("left-context", "right-context", "modulus")
    }


def configs(folder: pathlib.Path) -> list[pathlib.Path]:
    """net.config, then net.config.1, net.config.2, ... (each nnet3-init'ed onto the model so far)."""
    extra = sorted(folder.glob("net.config.*"), key=lambda p: int(p.suffix[1:]))
    return [folder / "net.config", *extra]


_TEXT_ENTRY = re.compile(r"(\S+)\s+\[([^\]]*)\]")


def read_ark(path: pathlib.Path) -> dict[str, np.ndarray]:
    """A Kaldi archive: text (`key [ ... ]`, read with numpy, as kaldiio's text reader is slow) or binary."""
    data = pathlib.Path(path).read_bytes()
    if b"\0B" in data[:256]:
        return {key: np.asarray(value) for key, value in kaldiio.load_ark(str(path))}
    out = {}
    for key, body in _TEXT_ENTRY.findall(data.decode("ascii")):
        values = np.array(body.split(), dtype=np.float32)
        rows = [line for line in body.split("\n") if line.strip()]
        out[key] = values.reshape(len(rows), -1) if "\n" in body else values
    return out


def _commands(folder: pathlib.Path) -> list[str]:
    return [
        line for line in (folder / "cmd.txt").read_text().splitlines() if line and not line.startswith(("#", "export"))
    ]


def _rename(copy: str) -> str:
    edits = re.search(r'--edits="([^"]*)"', copy).group(1)
    return re.search(r"rename-node old-name=(\S+) new-name=output(?:;|$)", edits).group(1)


def _compute_run(line: str) -> ComputeRun:
    output = "output"
    if "|" in line:
        copy, line = (part.strip() for part in line.split("|"))
        output = _rename(copy)
    words = shlex.split(line)
    assert words[0] == "nnet3-compute", line
    flags = [w for w in words[1:] if w.startswith("--")]
    positional = [w for w in words[1:] if not w.startswith("--")]
    values: dict[str, object] = {}
    ivectors = None
    for flag in flags:
        key, _, value = flag[2:].partition("=")
        if key in _COMPUTE_OPTIONS:
            values[key.replace("-", "_")] = _COMPUTE_OPTIONS[key](value)
        elif key == "ivectors":
            ivectors = value.split(":", 1)[1]
        else:
            assert key == "use-gpu", flag
    result = positional[2].split(":", 1)[1]
    return ComputeRun(tuple(flags), ComputeOptions(**values), output, ivectors, result, True)


def compute_runs(folder: pathlib.Path) -> list[ComputeRun]:
    """Every nnet3-compute run of cmd.txt, and the runs its notes vouch for (see the module doc)."""
    runs = [_compute_run(line) for line in _commands(folder) if "nnet3-compute" in line]
    main = next(r for r in runs if r.result == "output.txt")
    notes = (folder / "cmd.txt").read_text()
    for chunk in re.findall(r"--frames-per-chunk=(\d+) gives the same output", notes):
        runs.append(_vouched(main, int(chunk)))
    lengths = [len(m) for m in read_ark(folder / "input.txt").values()]
    modulus = info_context(folder)["modulus"]
    one_chunk = math.ceil(50 / modulus) * modulus >= max(lengths)
    if (one_chunk or re.search("gives the same output", notes)) and main.options.frame_subsampling_factor == 1:
        runs.append(_vouched(main, None))  # nnet3-compute's default --frames-per-chunk=50
    return runs


def _vouched(main: ComputeRun, chunk: int | None) -> ComputeRun:
    argv = tuple(a for a in main.argv if not a.startswith("--frames-per-chunk="))
    if chunk is not None:
        argv += (f"--frames-per-chunk={chunk}",)
    options = attrs.evolve(main.options, frames_per_chunk=chunk if chunk is not None else 50)
    return attrs.evolve(main, argv=argv, options=options, recorded=False)


def exact_run(folder: pathlib.Path) -> ExactRun | None:
    line = next((line for line in _commands(folder) if line.startswith("nnet3-eval-exact")), None)
    if line is None:
        return None
    flags = dict(w[2:].partition("=")[::2] for w in shlex.split(line)[1:] if w.startswith("--"))
    assert flags.pop("input-t-start") == "0", line
    ivectors = flags.pop("ivectors", None)
    run = ExactRun(
        tuple(flags.pop("outputs").split(",")),
        int(flags.pop("margin")),
        ivectors.split(":", 1)[1] if ivectors else None,
    )
    assert not flags, line
    return run


def exact_outputs(folder: pathlib.Path) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(utterance, output) -> (computable t, values) from output_exact_ranges.txt and output_exact.txt."""
    values = read_ark(folder / "output_exact.txt")
    out = {}
    for line in (folder / "output_exact_ranges.txt").read_text().splitlines():
        words = line.split()
        utt, node = words[:2]
        if words[2] == "none":
            t = np.zeros(0, np.int64)
        elif "NONCONTIGUOUS:" in words:
            t = np.array([int(w) for w in words[words.index("NONCONTIGUOUS:") + 1 :]])
        else:
            t = np.arange(int(words[2]), int(words[3]) + 1)
        if len(words) > 4 and words[2] != "none":
            assert int(words[4]) == len(t), line
        out[utt, node] = (t, values.get(f"{utt}:{node}", np.zeros((0, 0), np.float32)))
    return out


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Kaldi's float32 outputs, written with 7 significant digits (the corpus README's precision)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, Kaldi's {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-5, err_msg=what)


def uses(row: Mapping[str, str], column: str) -> list[str]:
    """The component types or descriptors (index.tsv's `components`/`descriptors`) a case uses."""
    return [w for w in row[column].split(",") if w and w != "-"]


def _traits(row: Mapping[str, str]) -> set[str]:
    """What a case exercises: its component types, descriptors, generator family (the case name's stem, for
    the generator's cases), recurrence, i-vector input, follow-up configs and extra recorded outputs."""
    family = {f"family {row['case'].rsplit('_', 1)[0]}"} if row["source"] == "kaldi-gen" else set()
    return (
        {f"component {c}" for c in uses(row, "components")}
        | {f"descriptor {d}" for d in uses(row, "descriptors")}
        | family
        | {f"recurrent {row['recurrent']}", f"configs {row['num_configs']}"}
        | {f"ivector {row['ivector_dim'] != '0'}"}
        | {f"file {name}" for name in row["extra_outputs"].split(",") if name}
    )


@functools.cache
def quick_cases(per_trait: int = 1) -> frozenset[str]:
    """The cases `make test` runs (`make test-all` runs every case): every hand-written case, and of the xconfig
    cases and those from Kaldi's random generator, enough that every trait of theirs (`_traits`: each component
    type, descriptor, generator family, ...) is in `per_trait` of them (or all that have it). The generator's
    cases repeat one another; every xconfig case is also built from its xconfig and computed against Kaldi's
    outputs by tests/kaldi/test_xconfig_corpus.py, so here they add only the traits no other case has. Chosen
    greedily in index.tsv's order, so the same corpus gives the same cases."""
    rows = index_rows()
    chosen = {case for case, row in rows.items() if row["source"] == "hand"}
    others = [row for row in rows.values() if row["source"] != "hand"]
    counts: dict[str, int] = {}
    for row in others:
        for trait in _traits(row):
            counts[trait] = counts.get(trait, 0) + 1
    wanted = {trait: min(per_trait, n) for trait, n in counts.items()}
    covered = dict.fromkeys(counts, 0)
    rest = list(others)
    while any(covered[t] < n for t, n in wanted.items()):
        best = max(rest, key=lambda row: sum(covered[t] < wanted[t] for t in _traits(row)))
        rest.remove(best)
        chosen.add(best["case"])
        for trait in _traits(best):
            covered[trait] += 1
    return frozenset(chosen)
