"""symnet's own readers under mutated and crafted files, in a child process with an address-space limit:
every input is read or refused with a symnet error, memory stays bounded, nothing a file says runs.

The readers: `symnet._src.base.safe_read.NpzArchive` (the container of symnet model files and checkpoints),
checkpoints, Kaldi archives and scp files (`symnet._src.kaldi_io.ark`, `symnet._src.kaldi_io.tables`). The crafted
campaigns and 300 mutants per reader run in `make test-all` (SYMNET_FUZZ_CASES sets how many).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from helpers import fuzz_crafted
from helpers.fuzz_runner import run_campaign
from helpers.fuzz_seeds import write_seeds

#: A campaign: `make test-all` runs it, `make test` leaves it out.
pytestmark = pytest.mark.slow

#: Resident memory a reader's child may reach (symnet and JAX loaded take about 200-300 MB of it).
MAX_RSS_MB = 1024
# mutants per campaign; SYMNET_FUZZ_CASES=10000 make test-all runs a longer campaign
CASES = int(os.environ.get("SYMNET_FUZZ_CASES", "300"))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return write_seeds(tmp_path_factory.mktemp("seeds"))


def check(summary: dict) -> None:
    """Only symnet errors, bounded memory."""
    others = "\n".join(f"{o['label']}: {o['error']} (reproducer {o['reproducer']})" for o in summary["others"])
    assert not summary["others"], f"non-symnet outcomes:\n{others}"
    assert set(summary["outcomes"]) <= {"ok"} | {k for k in summary["outcomes"] if k.startswith("symnet:")}
    assert summary["max_rss_mb"] < MAX_RSS_MB, summary


# ----- crafted inputs -------------------------------------------------------------------------------------


def test_crafted_npz_archives_are_refused_before_anything_big_is_read(tmp_path):
    summary = run_campaign({"target": "npz", "crafted": "npz", "folder": str(tmp_path)})
    check(summary)
    assert summary["accepted"] == ["10000 members"]  # every other one is refused
    assert summary["outcomes"]["symnet:ModelFormatError"] == summary["inputs"] - 1


def test_crafted_checkpoints_are_refused_field_by_field(tmp_path):
    summary = run_campaign({"target": "checkpoint", "crafted": "checkpoint", "folder": str(tmp_path)})
    check(summary)
    # what is accepted: the good one, a version-1 header, and unused extra/run contents of the right types
    assert set(summary["accepted"]) == {
        "the good one",
        "header version=1",
        "header extra={}",
        "header extra={'a': [1]}",
        "header run={}",
        "header run={'a': [1]}",
        "header is a 0-d string",
    }
    assert summary["inputs"] > 150


def test_crafted_archives_never_unpickle_and_never_allocate_what_a_header_says(tmp_path):
    summary = run_campaign({"target": "ark", "crafted": "ark", "folder": str(tmp_path)})
    check(summary)
    # Kaldi's text matrices may hold nan and inf (ConvertStringToReal reads them)
    good = {"FM 2x3", "blank", "two good entries", "text with nan", "text matrix of 10^6 rows of one value"}
    assert set(summary["accepted"]) == good
    assert not (tmp_path / "work" / "PWNED").exists()


def test_crafted_scp_files_run_no_command_and_read_no_device(tmp_path):
    files = {"good.ark": fuzz_crafted.good_archive().hex()}
    summary = run_campaign({"target": "scp", "crafted": "scp", "folder": str(tmp_path), "files": files})
    check(summary)
    assert set(summary["accepted"]) == {"a good line", "range [0:99999999999]", "range []", "range [:]"}
    assert not (tmp_path / "work" / "PWNED").exists()


# ----- mutants ----------------------------------------------------------------------------------------------

CAMPAIGNS = {  # name: (target, seed kind, text mutators)
    "npz (symnet model files)": ("npz", "symnet_model", False),
    "checkpoints": ("checkpoint", "checkpoint", False),
    "binary archives": ("ark", "ark", False),
    "text archives": ("ark", "ark_text", True),
    "scp files": ("scp", "scp", True),
}


def _mutants(name: str, count: int, seeds: dict[str, list[str]], folder: Path) -> dict:
    target, kind, text = CAMPAIGNS[name]
    job = {
        "target": target,
        "seeds": seeds[kind],
        "count": count,
        "text": text,
        "seed": zlib.crc32(name.encode()),
        "folder": str(folder),
    }
    return run_campaign(job, timeout=1800)


@pytest.mark.parametrize("name", CAMPAIGNS)
def test_mutants(name, seeds, tmp_path):
    summary = _mutants(name, CASES, seeds, tmp_path)
    check(summary)
    assert summary["inputs"] == CASES
