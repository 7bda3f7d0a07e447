"""The networks of Kaldi's recipe scripts compute what Kaldi's own nnet3-compute computes.

For each recipe case of tests/data/xconfig-kaldi (the network.xconfig of one of
Kaldi's recipe scripts), `compare_with_kaldi.prepare` expands it with `symnet
xconfig`, draws random parameters (and the recipe's LDA matrix) and three
utterances of features, and writes the model as a Kaldi raw model. Kaldi's
nnet3-compute read that model and computed those utterances when the fixtures
were made; `kaldi-outputs.npz` keeps its outputs times four random columns
(`compare_with_kaldi.projection`) and their largest value. Here `symnet
compute` (the CLI, in this process) computes the same utterances from the same
model file; the projections must agree to `TOLERANCE` times the largest output
(when the fixtures were made, the outputs themselves agreed to at most 6.3e-6 of it, median 1.0e-6).
Regenerate the fixtures with Kaldi's binaries: `python
tests/data/xconfig-kaldi/compare_with_kaldi.py --kaldi-bin DIR --write`.
"""

from __future__ import annotations

import importlib.util
import pathlib

import kaldiio
import numpy as np
import pytest

FOLDER = pathlib.Path(__file__).resolve().parents[1] / "data" / "xconfig-kaldi"
_spec = importlib.util.spec_from_file_location("compare_with_kaldi", FOLDER / "compare_with_kaldi.py")
assert _spec is not None and _spec.loader is not None
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

#: Kaldi's projected outputs by case, and each case's largest output (`NAME.largest`).
with np.load(compare.FIXTURES, allow_pickle=False) as _fixtures:
    KALDI = {name: _fixtures[name] for name in _fixtures.files}
CASES = sorted(name for name in KALDI if "." not in name)
#: Cases both Kaldi's nnet3-compute and symnet refuse (x-vector networks: Kaldi computes them with
#: nnet3-xvector-compute, whose chunks are long enough for the statistics).
REFUSED = sorted(name[: -len(".refused")] for name in KALDI if name.endswith(".refused"))
#: Cases `make test` runs (small networks, one recurrent); the others are slow (`make test-all`).
QUICK = {"recipe-rm-s5-run-tdnn-5p", "recipe-sprakbanken-s5-run-lstm-1c"}
#: Largest difference of a projection, as a fraction of the largest output (at least 1).
TOLERANCE = 2e-5

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*is given twice"),  # Kaldi's recipes repeat max-change; Kaldi keeps the first
]


def test_the_fixtures_cover_every_recipe_case():
    """Every recipe case is in the fixtures, computed or refused by Kaldi (a new case needs its fixture)."""
    recipes = {path.stem for path in (FOLDER / "cases").glob("recipe-*.xconfig")}
    assert set(CASES) | set(REFUSED) == recipes, sorted(recipes - set(CASES) - set(REFUSED))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in QUICK else [pytest.mark.slow]) for n in CASES])
def test_recipe_network_computes_as_kaldi(name, tmp_path):
    from symnet._src.app.cli import main

    model, feats, ivectors = compare.prepare(FOLDER / "cases" / f"{name}.xconfig", tmp_path)
    out = tmp_path / "symnet.ark"
    extra = [f"--ivectors=ark:{tmp_path / 'ivectors.ark'}"] if ivectors is not None else []
    assert main(["compute", *extra, str(model), f"ark:{tmp_path / 'feats.ark'}", f"ark:{out}"]) == 0
    outputs = dict(kaldiio.load_ark(str(out)))
    assert sorted(outputs) == [f"utt{i}" for i in range(len(feats))]
    for i, f in enumerate(feats):
        assert outputs[f"utt{i}"].shape[0] == len(f), "nnet3-compute writes one row per input frame"
    ours = np.concatenate([np.asarray(outputs[f"utt{i}"]) for i in range(len(feats))]).astype(np.float64)
    theirs = KALDI[name]
    assert ours.shape[0] == theirs.shape[0]
    projected = ours @ compare.projection(ours.shape[1])
    largest = max(float(KALDI[f"{name}.largest"]), 1.0)
    np.testing.assert_allclose(projected, theirs, rtol=0, atol=TOLERANCE * largest)


@pytest.mark.parametrize("name", REFUSED)
def test_symnet_refuses_what_nnet3_compute_refuses(name, tmp_path, capsys):
    """An x-vector network's statistics need more frames than a 50-frame chunk has: nnet3-compute says "Not all
    outputs were computable", and `symnet compute` names the output and the Indexes it cannot compute."""
    from symnet._src.app.cli import main

    model, _, _ = compare.prepare(FOLDER / "cases" / f"{name}.xconfig", tmp_path)
    out = tmp_path / "symnet.ark"
    assert main(["compute", str(model), f"ark:{tmp_path / 'feats.ark'}", f"ark:{out}"]) != 0
    assert "cannot be computed" in capsys.readouterr().err
    assert not out.exists()
