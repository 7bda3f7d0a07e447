"""Kaldi's own xconfig library is the reference: every case expands to exactly the lines Kaldi's scripts write.

The fixtures are in tests/data/xconfig-kaldi/: `cases/NAME.xconfig`, small
xconfigs written for this test (at least one per layer type of Kaldi's
parser.py `config_to_layer`, and variations of the options of each family and
of the descriptor grammar), `cases/recipe-*.xconfig`, the network.xconfig of
64 of Kaldi's recipe scripts as they write it (`RECIPES`; each names its
script, Kaldi commit and stand-ins on its first line), and `NAME.expected` in `expected.tar.xz`, what
Kaldi's xconfig library (steps/libs/nnet3/xconfig at Kaldi commit f4007661)
gives for them: xconfig.expanded.1 and .2, init/ref/final.config as
xconfig_to_configs.py writes them (less its header comments and the
nnet3-init context step), the files a layer writes, or the error Kaldi raises. Regenerate them with Kaldi's
scripts (not symnet) after editing a case:

    git -C KALDI archive HEAD egs/wsj/s5/steps | tar -x -C /tmp/kaldi-x
    python3 tests/data/xconfig-kaldi/make_fixtures.py /tmp/kaldi-x/egs/wsj/s5/steps

For every case symnet's expansion must be Kaldi's line for line (config
comments and trailing blanks included; only symnet's header comments are
skipped) and the network of its ref.config must build; where Kaldi refuses the
xconfig, symnet must refuse it with a ConfigError. The exceptions are listed
below, each with its reason: where Kaldi's scripts fail (`KALDI_FAILS`), where
they write what nnet3 cannot read (`KALDI_WRITES_INVALID`, `SYMNET_ADDS`), and
where Python 3 turns their integers into floats (`PYTHON3_DIVISION`).

With Kaldi's binaries at hand, `tests/data/xconfig-kaldi/compare_with_kaldi.py --kaldi-bin DIR` also computes
each recipe's network (random parameters) with Kaldi's nnet3-compute and `symnet compute` and compares the outputs.
"""

from __future__ import annotations

import functools
import pathlib
import re
import tarfile

import numpy as np
import pytest

from symnet._src.kaldi.text.xconfig import LAYER_TYPES, parse_xconfig
from symnet._src.kaldi.text.xconfig.base import KALDI_LAYER_TYPES, UNSUPPORTED_LAYER_TYPES, XLayer
from symnet.errors import ConfigError

#: Warnings the builder gives for some cases: an unused input (the descriptor cases' ivector), an option twice.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*is not used by any output"),
]

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "data" / "xconfig-kaldi"
CASES = FIXTURES / "cases"
NAMES = sorted(path.stem for path in CASES.glob("*.xconfig"))

#: The cases taken from Kaldi's recipes (egs/*/local/{chain,nnet3}/tuning, x-vector, SAD, image and RNNLM scripts):
#: each script's network.xconfig heredoc with the script's default variables (the first line names the script,
#: the Kaldi commit and the stand-ins for what the recipe reads from its data, such as num-pdfs).
RECIPES = [name for name in NAMES if name.startswith("recipe-")]
#: Recipe cases whose --config-dir test `make test` runs (small networks); the others are slow (`make test-all`).
QUICK_RECIPES = {
    "recipe-ami-s5b-rnnlm-run-lstm-tdnn-1a",
    "recipe-aspire-s5-train-stats-asr-sad-1a",
    "recipe-cifar-v1-nnet3-run-resnet-1a",
    "recipe-iam-v2-run-e2e-cnn-1b",
    "recipe-sprakbanken-s5-run-lstm-1b",  # Kaldi's generator refuses it (GENERATOR_REFUSES)
}

#: Cases Kaldi's scripts refuse, by a failure of the scripts themselves that symnet does not copy.
KALDI_FAILS = {
    # Python 3 will not compare the str default '' (as which learning-rate-factor is read) with 0.0
    "basic-learning-rate-factor": "TypeError",
    # Kaldi's line parser refuses '[' (its descriptors read [-1] only as the default input); symnet reads it
    "descriptor-previous": "disallowed character: [",
    "descriptor-previous-offset": "disallowed character: [",
    # output_dim() of these layers' auxiliary outputs refers to an undefined variable (NameError)
    "lstm-layer-aux": "NameError",
    "pgru-layer-aux": "NameError",
    # Kaldi's fast-lstmp-layer names its auxiliary output c_t but writes the node as lstm1.c; symnet's is c
    "fast-lstmp-layer-aux": "no such auxiliary output:'c'",
}

#: Recipes whose configs Kaldi's xconfig_to_configs.py (with nnet3-init and nnet3-info, commit f4007661) writes and
#: then refuses in check_model_contexts: the output-layer delays the labels (output-delay=5) while the
#: fixed-affine-layer does not, so init.config's output needs more right context than ref.config's.
GENERATOR_REFUSES = {
    "recipe-sprakbanken-s5-run-lstm-1b",
    "recipe-sprakbanken-s5-run-lstm-1c",
    "recipe-tedlium-s5-r2-run-lstm-1c",
}

#: Kaldi writes a config nnet3 cannot read; symnet writes the same lines, and its network builder refuses them.
KALDI_WRITES_INVALID = {
    # affine-layer appends ng-affine-options to l2-regularize=0.0 without a blank (l2-regularize=0.0update-period=2)
    "affine-layer-ng-affine-options": "l2-regularize",
}

#: Kaldi's config refers to a node it never writes (the dim-range-node of a fast-lstm-layer's auxiliary output c is
#: commented out in its script, so nnet3 cannot read the config); symnet writes the node, these lines besides Kaldi's.
SYMNET_ADDS = {
    "fast-lstm-layer-aux": [
        "dim-range-node name=lstm1.c input-node=lstm1.lstm_nonlin dim-offset=0 dim=6",
        "dim-range-node name=lstm2.c input-node=lstm2.lstm_nonlin dim-offset=0 dim=6",
    ],
}

#: Cases where Kaldi's scripts divide dims with `/`: Python 2, for which they were written, gave an integer,
#: Python 3 gives a float that Kaldi writes as `2.0`, which nnet3 does not read as an integer. symnet writes the
#: integer; in these cases the integral floats Kaldi writes for these options compare as integers.
PYTHON3_DIVISION = {
    "res-block-bypass-batchnorm",
    "res-block-bypass-input",
    "res-block-bypass-relu",
    "res-block-options",
    "res2-block",
    "res2-block-bottleneck",
    "res2-block-bottleneck-subsample",
    "res2-block-subsample",
    # Kaldi's recipe (tedlium s5_r2 local/nnet3/tuning/run_lstm_1a.sh): fast-lstmp-layer's default projection dims
    # are cell-dim / 4, written 256.0 (and the affine's input-dim 556.0) by Python 3
    "recipe-tedlium-s5-r2-nnet3-run-lstm-1a",
}
_DIVIDED = re.compile(r"\b(dim|block-dim|num-filters|num-filters-in|num-filters-out|time-offsets)=([-0-9.,]+)")


def _as_python2(line: str) -> str:
    """`num-filters-in=2.0` as Python 2's Kaldi wrote it (`num-filters-in=2`), in the options Kaldi divides."""

    def integers(match: re.Match[str]) -> str:
        values = [re.sub(r"^(-?\d+)\.0$", r"\1", v) for v in match.group(2).split(",")]
        return f"{match.group(1)}={','.join(values)}"

    return _DIVIDED.sub(integers, line)


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.split("\n")[:-1]:
        if line.startswith("==> ") and line.endswith(" <=="):
            lines = sections.setdefault(line[4:-4], [])
        else:
            lines.append(line)
    return sections


def _without_header(text: str) -> list[str]:
    """The lines of a config symnet writes, less its header comments and the blank line after them."""
    lines = text.split("\n")[:-1]
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert lines[first] == "", "the header ends with a blank line, as Kaldi's"
    return lines[first + 1 :]


@functools.cache
def _kaldis() -> dict[str, str]:
    """What Kaldi's library gives for every case (expected.tar.xz), by case name."""
    with tarfile.open(FIXTURES / "expected.tar.xz", "r:xz") as tar:
        files = {member.name: tar.extractfile(member) for member in tar.getmembers()}
        return {name.removesuffix(".expected"): f.read().decode("utf-8") for name, f in files.items() if f}


def _expected(name: str) -> dict[str, list[str]]:
    sections = _sections(_kaldis()[name])
    if name in PYTHON3_DIVISION:
        sections = {title: [_as_python2(line) for line in lines] for title, lines in sections.items()}
    return sections


def _existing(name: str) -> list[tuple[str, int]]:
    """The case's `# existing name=NAME dim=DIM` lines: nodes of the network it adds to (--existing-model)."""
    found = re.findall(r"^# existing name=(\S+) dim=(\d+)$", (CASES / f"{name}.xconfig").read_text(), flags=re.M)
    return [(node, int(dim)) for node, dim in found]


def _xconfig(name: str):
    text = (CASES / f"{name}.xconfig").read_text()
    return parse_xconfig(text, file=f"{name}.xconfig", existing=_existing(name))


@pytest.mark.parametrize("name", [n for n in NAMES if "error" not in _expected(n)])
def test_symnet_writes_the_lines_kaldi_writes(name):
    expected = _expected(name)
    x = _xconfig(name)
    ours = {
        "xconfig.expanded.1": x.expanded(False).split("\n")[:-1],
        "xconfig.expanded.2": x.expanded(True).split("\n")[:-1],
    }
    for which in ("init", "ref", "final"):
        text = x.config_text(which)
        if text is not None:
            ours[f"{which}.config"] = _without_header(text)
    kaldi = {title: lines for title, lines in expected.items() if not title.startswith("file ")}
    assert sorted(ours) == sorted(kaldi)
    for title in kaldi:
        if title in ("ref.config", "final.config") and name in SYMNET_ADDS:
            assert [line for line in ours[title] if line not in SYMNET_ADDS[name]] == kaldi[title], title
            assert set(SYMNET_ADDS[name]) <= set(ours[title])
        else:
            assert ours[title] == kaldi[title], title
    files = {title[len("file ") :]: lines for title, lines in expected.items() if title.startswith("file ")}
    assert sorted(x.matrices) == sorted(files)
    for path, lines in files.items():
        rows = "\n".join(lines).strip().removeprefix("[").removesuffix("]").strip().split("\n")
        kaldi_matrix = np.array([[float(v) for v in row.split()] for row in rows])
        np.testing.assert_allclose(x.matrices[path], kaldi_matrix, rtol=1e-12, atol=1e-15)
    if name in KALDI_WRITES_INVALID:
        with pytest.raises(ConfigError, match=KALDI_WRITES_INVALID[name]):
            x.network(which="ref")
    elif not _existing(name) and name not in RECIPES:  # (a config adding to an existing network is no network)
        x.network(which="ref")  # builds (ref.config reads no file but the matrices the layers write)
    # (the recipes' networks, up to 20 layers of 1536 units, are built by the --config-dir test below)


@pytest.mark.parametrize("name", [n for n in NAMES if "error" in _expected(n) and n not in KALDI_FAILS])
def test_symnet_refuses_what_kaldi_refuses(name):
    with pytest.raises(ConfigError):
        _xconfig(name).network(which="ref")


@pytest.mark.parametrize("name", sorted(KALDI_FAILS))
def test_where_kaldis_scripts_fail_symnet_reads_the_xconfig(name):
    (error,) = _expected(name)["error"]
    assert KALDI_FAILS[name] in error
    _xconfig(name).network(which="ref")


def test_every_case_has_kaldis_expansion_and_nothing_else_has():
    assert sorted(_kaldis()) == NAMES


def test_every_kaldi_layer_type_is_supported_or_refused_with_a_reason():
    assert set(LAYER_TYPES) <= set(KALDI_LAYER_TYPES)
    assert set(KALDI_LAYER_TYPES) == set(LAYER_TYPES) | set(UNSUPPORTED_LAYER_TYPES)
    assert not set(LAYER_TYPES) & set(UNSUPPORTED_LAYER_TYPES)


def test_every_kaldi_layer_type_has_a_case():
    lines = (line for name in NAMES for line in (CASES / f"{name}.xconfig").read_text().splitlines())
    written = {line.split()[0] for line in lines if line.split()}
    assert set(KALDI_LAYER_TYPES) <= written
    assert set(LAYER_TYPES) <= written


def test_a_kaldi_layer_type_or_option_symnet_cannot_honour_is_refused_as_such(monkeypatch):
    """Nothing of Kaldi's is refused at present: the refusal is checked on a layer type and an option made so."""
    monkeypatch.delitem(LAYER_TYPES, "prefinal-layer")
    monkeypatch.setitem(UNSUPPORTED_LAYER_TYPES, "prefinal-layer", "for the test")
    with pytest.raises(ConfigError, match=r"layer type prefinal-layer is not supported by symnet \(for the test\)"):
        parse_xconfig("input name=input dim=4\nprefinal-layer name=p big-dim=8 small-dim=2\n")
    monkeypatch.setattr(XLayer, "unsupported", {"max-change": "for the test"})
    with pytest.raises(ConfigError, match=r"option max-change is not supported by symnet \(for the test\)"):
        parse_xconfig("input name=input dim=4\nrelu-layer name=r dim=3 max-change=1.0\n")


def test_a_word_kaldi_does_not_know_either_is_unknown_with_the_closest_known_ones():
    with pytest.raises(ConfigError, match="unknown layer type prefinal-lyer; did you mean prefinal-layer"):
        parse_xconfig("input name=input dim=4\nprefinal-lyer name=p big-dim=8 small-dim=2\n")
    with pytest.raises(ConfigError, match="unknown option max-chnage; did you mean max-change"):
        parse_xconfig("input name=input dim=4\nrelu-layer name=r dim=3 max-chnage=1.0\n")


NEW_GRUS = ["norm-pgru-layer", "norm-opgru-layer", "fast-opgru-layer", "fast-norm-pgru-layer", "fast-norm-opgru-layer"]


@pytest.mark.parametrize("layer_type", NEW_GRUS)
def test_the_norm_and_output_gated_grus_build_networks_that_run(layer_type):
    x = parse_xconfig(
        f"input name=input dim=6\n{layer_type} name=gru1 cell-dim=8 recurrent-projection-dim=2\noutput-layer name=output dim=4\n"
    )
    out = x.network().compute(np.zeros((1, 20, 6), np.float32))
    assert np.asarray(out).shape == (1, 20, 4)


def _recipe_config_dir(name: str) -> str:
    """The recipe's $dir/configs, as the LDA's or IDCT's matrix path names it (a stand-in where none does)."""
    found = re.search(r"affine-transform-file=(\S+)/(?:lda|idct)\.mat", (CASES / f"{name}.xconfig").read_text())
    return found.group(1) if found else "exp/recipe/configs"


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[] if n in QUICK_RECIPES else [pytest.mark.slow]) for n in RECIPES]
)
def test_symnet_xconfig_fills_a_recipes_config_dir_before_its_lda_mat_exists(name, tmp_path, monkeypatch, capsys):
    """As the recipe runs xconfig_to_configs.py: `mkdir -p $dir/configs`, network.xconfig written there, no lda.mat
    yet. `symnet xconfig --config-dir` writes the configs Kaldi writes and the matrices the layers write."""
    from symnet._src.app.cli import main

    monkeypatch.chdir(tmp_path)
    configs = pathlib.Path(_recipe_config_dir(name))
    configs.mkdir(parents=True)
    (configs / "network.xconfig").write_text((CASES / f"{name}.xconfig").read_text())
    status = main(["xconfig", "--config-dir", str(configs), str(configs / "network.xconfig")])
    if name in GENERATOR_REFUSES:  # as Kaldi's script: nothing written, the fixed-affine-layer's line named
        assert status == 1
        assert re.search(
            r"network.xconfig:\d+:\d+: fixed-affine-layer .*init.config's output needs context "
            r"\(2, 2\).*more than ref.config's",
            capsys.readouterr().err,
        )
        assert sorted(p.name for p in configs.iterdir()) == ["network.xconfig"]
        return
    assert status == 0, capsys.readouterr()
    expected = _expected(name)
    for which in ("init", "ref", "final"):
        path = configs / f"{which}.config"
        assert path.exists() == (f"{which}.config" in expected), which
        if path.exists():
            assert _without_header(path.read_text()) == expected[f"{which}.config"], which
    assert not (configs / "lda.mat").exists()
    for title, lines in expected.items():
        if title.startswith("file "):
            written = (tmp_path / title[len("file ") :]).read_text().split("\n")
            ours = np.array([[float(v) for v in row.strip(" []").split()] for row in written if row.strip(" []")])
            kaldi = np.array([[float(v) for v in row.strip(" []").split()] for row in lines if row.strip(" []")])
            np.testing.assert_allclose(ours, kaldi, rtol=1e-12, atol=1e-15)
