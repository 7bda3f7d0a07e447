"""Every case of the real-Kaldi corpus (tests/data/kaldi-oracle-dev.tar.xz; its README.md explains the files).

Per case, against what real Kaldi wrote:

- the context: `symnet info` on the config(s) (net.config, then net.config.1, ... on top, as nnet3-init did)
  and on the model file prints nnet3-info's left-context, right-context and modulus (info.txt);
- nnet3-compute: every nnet3-compute command of cmd.txt run as `symnet compute` with the same options, inside
  the case folder, gives the archive Kaldi wrote (output.txt, output_fpc8.txt, output_fsf3.txt, ...; a run on a
  renamed output node through `Nnet3Computer`), and so do the runs cmd.txt's notes vouch for
  (`--frames-per-chunk=8` where it "gives the same output", nnet3-compute's default 50 frames per chunk
  where that is one chunk per utterance or chunking does not matter) through `Nnet3Computer.compute_many`;
- exact evaluation: `symnet.kaldi.exact_outputs` computes exactly the Indexes Kaldi's NnetComputer found
  computable, with its numbers, for every output node the corpus evaluated;
- rejected configs: what Kaldi refuses, symnet refuses with an error naming the node; where Kaldi's only
  objection is its context probe, the exact evaluation still gives the corpus's numbers.

The table of component types and descriptors in docs/kaldi.md is generated here (`SYMNET_WRITE_DOCS=1`
rewrites it): every corpus case that uses a type is counted, and passes unless it is in KNOWN_FAILURES (a
strict xfail, so the table cannot claim a pass the suite does not see).

`make test` runs the hand-written cases and enough of the xconfig and generator cases to exercise every
component type, descriptor and generator family once (`helpers.kaldi_corpus.quick_cases`, 42 of 218; every
xconfig case is computed against Kaldi in tests/kaldi/test_xconfig_corpus.py as well); `make test-all`, which
CI runs, runs every case.
"""

from __future__ import annotations

import functools
import io
import os
import re
import warnings

import numpy as np
import pytest

from helpers import REPO
from helpers.kaldi_corpus import (
    assert_close,
    case_folder,
    compute_runs,
    configs,
    exact_outputs,
    exact_run,
    index_rows,
    info_context,
    quick_cases,
    read_ark,
    rejected_names,
    uses,
)
from helpers.kaldi_oracle import SHIPPED, case_names, corpus_dir
from symnet import Network
from symnet._src.app.cli import main
from symnet._src.kaldi.components import records
from symnet._src.kaldi.compute.exact import exact_outputs as symnet_exact_outputs
from symnet._src.kaldi.compute.nnet3_compute import Nnet3Computer
from symnet._src.kaldi.text.info import info_lines
from symnet.errors import PlanError, SymnetError
from symnet.kaldi import read_model, read_network

CASES = [c for source in ("hand", "xconfig", "kaldi-gen") for c in case_names(source)]
REJECTED = rejected_names()

#: Cases symnet does not reproduce yet, and why (strict xfails: they fail the suite once they pass).
KNOWN_FAILURES: dict[str, str] = {}


def _marked(cases: list) -> list:
    """The cases as parameters: a known failure a strict xfail; a generator case outside `quick_cases` slow (only
    `make test-all` runs it: the quick ones already exercise every component type, descriptor and family twice)."""
    quick = quick_cases()
    out = []
    for c in cases:
        marks = [] if c in quick else [pytest.mark.slow]
        if c in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[c]))
        out.append(pytest.param(c, marks=marks))
    return out


@pytest.fixture(autouse=True)
def _quiet():
    """Generated configs leave nodes unused, which symnet warns about (as Kaldi logs it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not used by any.*", category=UserWarning)
        yield


@functools.cache
def _model(case: str):
    return read_model(case_folder(case) / "model.txt")


def _info(kaldi_network) -> dict[str, int]:
    lines = info_lines(kaldi_network.structure, kaldi_network.objectives)
    return {
        key: int(re.search(rf"^{key}: (-?\d+)$", "\n".join(lines), re.M).group(1))
        for key in ("left-context", "right-context", "modulus")
    }


@pytest.mark.parametrize("case", _marked(CASES))
def test_symnet_info_gives_nnet3_infos_context(case, monkeypatch):
    folder = case_folder(case)
    want = info_context(folder)
    monkeypatch.chdir(folder)  # a config's matrix=lda.mat is read from where Kaldi ran
    kn = None
    for path in configs(folder):
        kn = read_network(path.name, base=kn)
    assert _info(kn) == want, "from the config"
    assert _info(_model(case).network) == want, "from the model file"


def _features(folder) -> dict[str, np.ndarray]:
    return read_ark(folder / "input.txt")


def _renamed(network: Network, output: str) -> Network:
    """The network with node `output` as its output named 'output' (nnet3-copy --edits=rename-node)."""
    return network.select({"output": output})


@pytest.mark.parametrize("case", _marked(CASES))
def test_symnet_compute_gives_nnet3_computes_outputs(case, monkeypatch, tmp_path):
    folder = case_folder(case)
    monkeypatch.chdir(folder)
    feats = _features(folder)
    network = _model(case).network
    for run in compute_runs(folder):
        want = read_ark(folder / run.result)
        what = f"{case}: {' '.join(run.argv)} ({run.result})"
        if run.recorded and run.output == "output":  # cmd.txt's own command, through the command line
            out = tmp_path / "out.txt"
            status = main(
                ["compute", *run.argv, "model.txt", "ark,t:input.txt", f"ark,t:{out}"],
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
            assert status == 0, what
            got = read_ark(out)
        else:
            net = network if run.output == "output" else _renamed(network, run.output)
            ivectors = read_ark(folder / run.ivectors) if run.ivectors else None
            outs = Nnet3Computer(net, run.options).compute_many(
                list(feats.values()), ivectors=[ivectors[u] for u in feats] if ivectors else None
            )
            got = dict(zip(feats, outs, strict=True))
        assert list(got) == list(want), what
        for utt in want:
            assert_close(got[utt], want[utt], f"{what} {utt}")


def _check_exact(case: str, network) -> None:
    folder = case_folder(case)
    run = exact_run(folder)
    feats = _features(folder)
    ivectors = read_ark(folder / run.ivectors) if run.ivectors else None
    got = symnet_exact_outputs(
        network,
        list(feats.values()),
        outputs=run.outputs,
        margin=run.margin,
        ivectors=[ivectors[u] for u in feats] if ivectors else None,
    )
    want = exact_outputs(folder)
    assert {(u, o) for u in feats for o in run.outputs} == set(want)
    for utt, outputs in zip(feats, got, strict=True):
        for name in run.outputs:
            (t, values), (want_t, want_values) = outputs[name], want[utt, name]
            assert t.tolist() == want_t.tolist(), f"{case} {utt} {name}: the computable frames"
            if len(t):
                assert_close(values, want_values, f"{case} {utt} {name}")


@pytest.mark.parametrize("case", _marked(CASES))
def test_exact_evaluation_gives_kaldis_computable_indexes_and_numbers(case):
    _check_exact(case, _model(case).network)


# ----- configs Kaldi rejects ---------------------------------------------------------------------

#: How Kaldi refuses each rejected case, and how symnet does (what its error says).
REFUSALS = {
    # nnet3-init and nnet3-info take them; Kaldi's compiler refuses a node read with two scales in one part.
    "b10_switch": ("compute", r"output-node output: .*node 'input' with two different scales, 1 and 10"),
    "b10c_switch_two_nodes": ("compute", r"output-node output: .*node 'a1' with two different scales"),
    # nnet3-info's context leaves outputs uncomputable, so nnet3-compute refuses; the exact evaluation works.
    "b11_switch_in_append": ("compute", r"output 'output': .* cannot be computed"),
    # No context at all (ReplaceIndex(input, t, 0)): nnet3-info and nnet3-compute refuse; exact evaluation works.
    "b14_replaceindex_t": ("info", r"output 'output' has no context"),
}


@pytest.mark.parametrize("case", REJECTED)
def test_rejected_configs_are_refused_where_kaldi_refuses_them(case):
    folder = case_folder(case)
    where, message = REFUSALS[case]
    network = _model(case).network
    if where == "info":
        with pytest.raises(PlanError, match=message):
            network.context("output")
        with pytest.raises(PlanError, match=message):
            Nnet3Computer(network)
    else:
        assert _info(_model(case).network) == info_context(folder)
        with pytest.raises(SymnetError, match=message):
            Nnet3Computer(network).compute_many(list(_features(folder).values()))
    if (folder / "output_exact.txt").exists():
        _check_exact(case, network)
    else:
        with pytest.raises(SymnetError, match=message):
            symnet_exact_outputs(network, list(_features(folder).values()))


def test_every_rejected_config_has_its_refusal():
    assert set(REFUSALS) == set(rejected_names())


# ----- the table in docs/kaldi.md ------------------------------------------------------------------

DOCS = REPO / "docs" / "kaldi.md"
START, END = "<!-- corpus table: generated by tests/kaldi/test_kaldi_corpus.py -->", "<!-- end of corpus table -->"
DESCRIPTORS = (
    "Offset",
    "Append",
    "Sum",
    "IfDefined",
    "Failover",
    "Switch",
    "Round",
    "ReplaceIndex",
    "Const",
    "Scale",
    "dim-range-node",
)


def corpus_table() -> str:
    """The Markdown tables of the shipped corpus: cases per source, per component type and per descriptor, and
    how many pass."""
    root = corpus_dir(SHIPPED)
    rows = index_rows(root)

    def counts(cases: list[str]) -> str:
        good = sum(c not in KNOWN_FAILURES for c in cases)
        return f"{len(cases)} | {good}"

    out = ["| source | cases | pass |", "|---|---|---|"]
    for source in ("hand", "xconfig", "kaldi-gen"):
        out.append(f"| {source} | {counts([c for c, r in rows.items() if r['source'] == source])} |")
    out.append(f"| all | {counts(list(rows))} |")
    out.append(
        f"| rejected by Kaldi (refused alike; exact evaluation where Kaldi's ran) | {counts(rejected_names(root))} |"
    )
    out += ["", "| component type | cases | pass |", "|---|---|---|"]
    types = sorted(set(records()) | {t for r in rows.values() for t in uses(r, "components")})
    for kind in types:
        out.append(f"| `{kind}` | {counts([c for c, r in rows.items() if kind in uses(r, 'components')])} |")
    out += ["", "| descriptor | cases | pass |", "|---|---|---|"]
    for name in DESCRIPTORS:
        out.append(f"| `{name}` | {counts([c for c, r in rows.items() if name in uses(r, 'descriptors')])} |")
    return "\n".join(out)


def test_docs_table_is_the_corpus_table():
    text = DOCS.read_text()
    assert START in text and END in text, f"docs/kaldi.md needs the markers {START!r} and {END!r}"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    table = f"{START}\n{corpus_table()}\n{END}"
    if os.environ.get("SYMNET_WRITE_DOCS"):
        DOCS.write_text(head + table + tail)
        return
    assert START + rest.split(END, 1)[0] + END == table, (
        "docs/kaldi.md's corpus table is out of date: run SYMNET_WRITE_DOCS=1 pytest tests/kaldi/test_kaldi_corpus.py "
        "-k docs_table"
    )
