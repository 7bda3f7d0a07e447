"""Start-up: `import symnet`, `symnet --help` and `symnet info CONFIG` (or XCONFIG) import no jax, `symnet compute`
no module it does not use; the lazy names are the modules' own.

Each check runs in a fresh interpreter (this one has imported everything), and
the reference for what a lazy name is is the defining module's attribute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kaldiio
import numpy as np
import pytest

import symnet
import symnet.train
from helpers import REPO
from symnet._src.kaldi.models.model import write_model
from symnet._src.kaldi.text.build import parse_network
from symnet._src.kaldi.text.info import info_lines
from symnet._src.kaldi.text.xconfig import read_xconfig

CONFIG = """input-node name=input dim=3
component name=a type=NaturalGradientAffineComponent input-dim=3 output-dim=2
component-node name=a component=a input=input
output-node name=output input=a
"""

#: Modules `symnet compute` on a Kaldi model never uses.
UNUSED_BY_COMPUTE = [
    "optax",
    "symnet._src.display",
    "symnet._src.saving",
    "symnet._src.train.loop",
    "symnet._src.datasets",
]


def _fresh(code: str) -> object:
    """What `code` (which sets `result`) gives in a fresh interpreter, as JSON."""
    script = f"import json, sys\n{code}\nprint(json.dumps(result))"
    env = {**os.environ, "SYMNET_COMPILE_CACHE": "off"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_compute_path_imports_no_display_saving_or_optax(tmp_path: Path) -> None:
    model = tmp_path / "m.raw"
    write_model(model, parse_network(CONFIG), raw=True)
    feats = tmp_path / "f.ark"
    kaldiio.save_ark(str(feats), {"u": np.ones((4, 3), np.float32)})
    loaded = _fresh(
        "from symnet._src.app.cli import main\n"
        f"assert main(['compute', {str(model)!r}, 'ark:{feats}', 'ark:/dev/null']) == 0\n"
        f"result = [m for m in {UNUSED_BY_COMPUTE!r} if m in sys.modules]"
    )
    assert loaded == []


def test_import_symnet_leaves_display_and_saving_for_later() -> None:
    loaded = _fresh(
        "import symnet\nresult = [m for m in ('symnet._src.display', 'symnet._src.saving') if m in sys.modules]"
    )
    assert loaded == []


#: What importing the package or asking for help must not import: jax (and its compiler, jaxlib's XLA client).
HEAVY = ["jax", "jaxlib.xla_client", "jax._src.interpreters", "optax", "scipy"]


def test_import_symnet_and_help_import_no_jax() -> None:
    loaded = _fresh(
        "import symnet\n"
        f"after_import = [m for m in {HEAVY + ['numpy']!r} if m in sys.modules]\n"
        "from symnet._src.app.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    status = e.code\n"
        f"result = [after_import, [m for m in {HEAVY!r} if m in sys.modules], status]"
    )
    assert loaded == [[], [], 0]


INFO_CONFIG = """input-node name=input dim=4
component name=a type=NaturalGradientAffineComponent input-dim=12 output-dim=5
component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 2))
component name=bn type=BatchNormComponent dim=5
component-node name=bn component=bn input=a
output-node name=output input=bn objective=quadratic
"""

#: nnet3-info's lines for it: context 1 and 2 from the offsets; 12 * 5 + 5 trainable values; the batch-norm
#: statistics (5 means, 5 variances, the count) are fixed.
INFO_LINES = [
    "input-dim: 4",
    "ivector-dim: -1",
    "output-dim: 5",
    "left-context: 1",
    "right-context: 2",
    "num-parameters: 65",
    "num-fixed-parameters: 11",
    "modulus: 1",
    "input-node name=input dim=4",
    "component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 2)) input-dim=12 "
    "output-dim=5",
    "component-node name=bn component=bn input=a input-dim=5 output-dim=5",
    "output-node name=output input=bn dim=5 objective=quadratic",
    "component name=a type=NaturalGradientAffineComponent input-dim=12 output-dim=5 num-parameters=65 "
    "linear_params=[5,12] bias_params=[5]",
    "component name=bn type=BatchNormComponent input-dim=5 output-dim=5 num-parameters=0 num-fixed-parameters=11 "
    "stats_mean=[5] stats_var=[5] count=[]",
]


def test_info_of_a_config_or_model_file_imports_no_jax(tmp_path: Path) -> None:
    """Before: `symnet info` built the network, drawing every parameter with jax.random (about twice
    `import jax`). The model files (text and binary) hold that network's arrays: their info is the same."""
    config = tmp_path / "net.config"
    config.write_text(INFO_CONFIG)
    paths = [config, tmp_path / "net.txt", tmp_path / "net.raw"]
    write_model(paths[1], parse_network(INFO_CONFIG), binary=False)
    write_model(paths[2], parse_network(INFO_CONFIG), raw=True)
    printed = _fresh(
        "import contextlib, io\n"
        "from symnet._src.app.cli import main\n"
        "result = []\n"
        f"for path in {[str(p) for p in paths]!r}:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        result.append([main(['info', path]), out.getvalue().splitlines()])\n"
        f"result.append([m for m in {HEAVY!r} if m in sys.modules])"
    )
    assert printed == [[0, INFO_LINES]] * 3 + [[]]


def test_info_of_an_xconfig_imports_no_jax_and_prints_its_networks_info() -> None:
    """The xconfig is read to its structure (no parameter drawn); the lines are those of the Network that
    `read_xconfig(...).network()` builds with jax, in this process. An error still names the xconfig line."""
    good = REPO / "examples" / "tdnnf.xconfig"
    bad = REPO / "tests" / "data" / "xconfig-kaldi" / "cases" / "error-dim-mismatch.xconfig"  # Sum(a, input): 4, 8
    printed = _fresh(
        "import contextlib, io\n"
        "from symnet._src.app.cli import main\n"
        "result = []\n"
        f"for path in {[str(good), str(bad)]!r}:\n"
        "    out, err = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "        result.append([main(['info', path]), out.getvalue().splitlines(), err.getvalue()])\n"
        f"result.append([m for m in {HEAVY!r} if m in sys.modules])"
    )
    network = read_xconfig(str(good)).network()
    assert printed[0] == [0, info_lines(network.structure, network.objectives), ""]
    assert printed[1][:2] == [1, []]
    assert "error-dim-mismatch.xconfig:3:30: no-op-component b: input=Sum(a, input): the parts" in printed[1][2]
    assert printed[2] == []


def test_info_of_a_symnet_file_imports_no_jax(tmp_path: Path) -> None:
    """Before: `symnet info` of a saved network loaded it, so imported jax. Now the file's structure is read
    without a Network: the same lines as the loaded network's (Kaldi's for a network Kaldi can say, symnet's
    summary for one it cannot), and a file of a training state is an error naming what it holds."""
    from symnet import Input, Network
    from symnet._src.engine.summary import summarize
    from symnet.layers import LSTM, Affine

    kaldi = parse_network(INFO_CONFIG)
    x = Input("input", 4)
    python = Network(Affine(LSTM("lstm1", x, cell=3), 5) + x @ symnet.Weight(symnet.Full((4, 5), 0.5)))
    paths = [tmp_path / "kaldi.npz", tmp_path / "python.npz", tmp_path / "state.npz"]
    symnet.save(paths[0], kaldi)
    symnet.save(paths[1], python)
    symnet.save(paths[2], {"net": kaldi, "step": 3})
    printed = _fresh(
        "import contextlib, io\n"
        "from symnet._src.app.cli import main\n"
        "result = []\n"
        f"for path in {[str(p) for p in paths]!r}:\n"
        "    out, err = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "        result.append([main(['info', path]), out.getvalue().splitlines(), err.getvalue()])\n"
        f"result.append([m for m in {HEAVY!r} if m in sys.modules])"
    )
    assert printed[0] == [0, INFO_LINES, ""]
    assert printed[1] == [0, str(summarize(dict(python.structure.outputs))).splitlines(), ""]
    assert printed[2][:2] == [1, []] and "state.npz is a symnet file of a dict, not of one network" in printed[2][2]
    assert printed[3] == []


def test_every_public_name_is_imported_on_first_use() -> None:
    assert _fresh("import symnet\nresult = sorted(n for n in symnet.__all__ if n in vars(symnet))") == []
    resolved = _fresh(
        "import symnet\n"
        "net = symnet.Network(symnet.Input('input', 2) @ symnet.Weight(symnet.Normal((2, 3), 1.0)))\n"
        "result = [type(net).__module__, symnet.Network.__module__, 'jax' in sys.modules]"
    )
    assert resolved == ["symnet._src.network", "symnet._src.network", True]


def test_every_public_name_is_the_defining_modules_object() -> None:
    same = _fresh(
        "import importlib, symnet, symnet.train as train\n"
        "from symnet import *\n"
        "result = all(getattr(symnet, n) is globals()[n] for n in symnet.__all__)\n"
        "import symnet._src.saving.files as files, symnet.display\n"
        "import symnet._src.components.natural_gradient as ng, symnet._src.train.loop as loop\n"
        "result = [result, symnet.save is files.save, symnet.load is files.load,\n"
        "          symnet.display is sys.modules['symnet.display'], symnet.natural_gradient is ng,\n"
        "          symnet.export is sys.modules['symnet._src.exporting'].export,\n"
        "          train.fit is loop.fit, all(getattr(train, n) is not None for n in train.__all__),\n"
        "          set(symnet.__all__) <= set(dir(symnet)), set(train.__all__) <= set(dir(train))]"
    )
    assert same == [True] * 10


def test_a_notebook_view_imports_display_when_first_drawn() -> None:
    drawn = _fresh(
        "import symnet\n"
        "net = symnet.Network(symnet.Input('input', 2) @ symnet.Weight(symnet.Normal((2, 3), 1.0)))\n"
        "html = net._repr_html_()\n"
        "from symnet._src.display.network import network_html\n"
        "result = [html == network_html(net), 'symnet.display' in sys.modules]"
    )
    assert drawn == [True, True]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        symnet.nothing  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        symnet.train.nothing  # noqa: B018


def test_a_name_public_by_mistake_warns_and_is_still_found() -> None:
    import warnings

    import symnet
    from symnet._src.core.source import user_line

    assert "user_line" not in symnet.__all__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert symnet.user_line is user_line
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "symnet._src.core.source" in str(caught[0].message)
