"""`symnet.save` / `symnet.load` of whole training states: pytrees of Networks, arrays, optax states and plain
values; templates (`like=`); files of format version 1; the resume example of docs/saving.md."""

from __future__ import annotations

import collections
import json
import math
import os
import pathlib
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import symnet
from helpers import REPO
from helpers.doc_blocks import python_blocks, run_block
from symnet import Input, LogSoftmax, Network, Normal, Tanh, Weight
from symnet.errors import ModelFormatError, SaveError
from symnet.kaldi import parse_network

DATA = REPO / "tests" / "data" / "saving"
DOC = REPO / "docs" / "saving.md"


def small() -> Network:
    x = Input("input", 3)
    return Network(LogSoftmax(Tanh(x @ Weight(Normal((3, 2), 0.5), name="w")) @ Weight(Normal((2, 4), 0.5), name="v")))


def leaves_equal(a: Any, b: Any) -> None:
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array)), (x, y)
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_plain_values_keep_their_kinds(tmp_path: pathlib.Path) -> None:
    tree = {
        "int": 3,
        "float": 3.0,
        "bool": True,
        "none": None,
        "str": "adam",
        "odd": [math.inf, -math.inf],
        "by_number": {7: ("a", ["b", ("c",)]), 2: {"nested": {}}},
        "numpy": np.arange(6, dtype=np.int16).reshape(2, 3),
        "scalar": np.float64(0.25),
        "jax": jnp.ones(2),
    }
    symnet.save(tmp_path / "t.npz", tree)
    back = symnet.load(tmp_path / "t.npz")
    assert list(back) == list(tree)  # insertion order kept
    for key in ("int", "float", "bool", "none", "str", "by_number"):
        assert back[key] == tree[key] and type(back[key]) is type(tree[key]), key
    assert back["odd"] == [math.inf, -math.inf]
    assert type(back["numpy"]) is np.ndarray and back["numpy"].dtype == np.int16
    assert type(back["scalar"]) is np.float64 and back["scalar"] == 0.25
    assert isinstance(back["jax"], jax.Array) and not isinstance(back["jax"], np.ndarray)
    leaves_equal(back, tree)
    assert list(back["by_number"]) == [7, 2]
    nan = symnet.load(_saved(tmp_path / "nan.npz", [math.nan, {None: False}]))
    assert math.isnan(nan[0]) and nan[1] == {None: False}


def _saved(path: pathlib.Path, tree: Any) -> pathlib.Path:
    symnet.save(path, tree)
    return path


@pytest.mark.parametrize(
    "optimizer",
    [
        optax.adam(1e-3),
        optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
        optax.sgd(0.1, momentum=0.9),
        optax.inject_hyperparams(optax.adam)(learning_rate=0.1),
        optax.adam(optax.cosine_decay_schedule(1e-3, 10)),
    ],
    ids=["adam", "chain", "momentum", "inject_hyperparams", "schedule"],
)
def test_optax_states_load_without_a_template(tmp_path: pathlib.Path, optimizer: Any) -> None:
    net = small()
    opt_state = optimizer.init(net.params)
    grads = jax.tree_util.tree_map(jnp.ones_like, net.params)
    _, opt_state = optimizer.update(grads, opt_state, net.params)  # counts and moments away from their init
    back = symnet.load(_saved(tmp_path / "s.npz", {"opt": opt_state}))
    leaves_equal(back["opt"], opt_state)
    # the restored state steps on exactly as the original
    a, _ = optimizer.update(grads, back["opt"], net.params)
    b, _ = optimizer.update(grads, opt_state, net.params)
    leaves_equal(a, b)


def test_networks_in_a_tree_are_stored_once_and_keep_objectives(tmp_path: pathlib.Path) -> None:
    net = small()
    kaldi = parse_network(
        "input-node name=input dim=3\n"
        "component name=a type=AffineComponent input-dim=3 output-dim=2\n"
        "component-node name=a component=a input=input\n"
        "output-node name=output input=a objective=quadratic\n"
    )
    back = symnet.load(_saved(tmp_path / "n.npz", {"nets": [net, kaldi, net]}))
    first, second, third = back["nets"]
    assert first is third and first.structure == net.structure
    assert dict(second.objectives) == {"output": "quadratic"} and second.structure == kaldi.structure
    leaves_equal(back["nets"], [net, kaldi, net])


Moments = collections.namedtuple("Moments", ["mean", "count"])


def test_a_users_namedtuple_needs_the_template(tmp_path: pathlib.Path) -> None:
    state = {"moments": Moments(jnp.zeros(3), 4)}
    path = _saved(tmp_path / "u.npz", state)
    with pytest.raises(ModelFormatError, match=r"tree\['moments'\]: the namedtuple '.*:Moments' is not an optax state"):
        symnet.load(path)
    back = symnet.load(path, like={"moments": Moments(jnp.ones(3), 0)})
    assert type(back["moments"]) is Moments and back["moments"].count == 4
    np.testing.assert_array_equal(back["moments"].mean, np.zeros(3))


def test_a_template_that_does_not_fit_is_refused(tmp_path: pathlib.Path) -> None:
    net = small()
    path = _saved(tmp_path / "s.npz", {"net": net, "opt": optax.adam(1e-3).init(net.params)})
    with pytest.raises(ModelFormatError, match="does not have the template's structure"):
        symnet.load(path, like={"net": net, "opt": optax.sgd(1e-3).init(net.params)})
    bigger = {"net": net, "opt": optax.adam(1e-3).init({**net.params, "w": jnp.zeros((3, 5))})}
    with pytest.raises(
        ModelFormatError, match=r"tree\['opt'\]\[0\]\.mu\['w'\]: saved float32\[3, 2\], the template has"
    ):
        symnet.load(path, like=bigger)


def test_values_the_format_cannot_hold_are_save_errors_naming_the_place(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.npz"
    symnet.save(path, {"step": 1})
    before = path.read_bytes()
    with pytest.raises(SaveError, match=r"tree\['opt'\]\[1\] is a builtins.set"):
        symnet.save(path, {"opt": [1, {2}]})
    with pytest.raises(SaveError, match=r"tree: a dict key \(1, 2\)"):
        symnet.save(path, {(1, 2): 3})
    deep: Any = 1
    for _ in range(32):  # 64 JSON levels, 65 in the header
        deep = [deep]
    with pytest.raises(SaveError, match="nests too deep"):
        symnet.save(path, deep)
    assert path.read_bytes() == before  # the old file is intact
    shallow: Any = 1
    for _ in range(31):  # the deepest a file holds: saved, and loaded back
        shallow = [shallow]
    assert symnet.load(_saved(tmp_path / "ok.npz", shallow)) == shallow


def test_files_of_format_version_1_still_load() -> None:
    """tests/data/saving/v1-*.npz were written by symnet's previous `save` (one Network per file)."""
    old = symnet.load(DATA / "v1-network.npz")
    assert isinstance(old, Network) and old.structure == small().structure and dict(old.objectives) == {}
    with np.load(DATA / "v1-network.npz", allow_pickle=False) as data:  # the arrays as NumPy reads them
        header = json.loads(bytes(data["header"]).decode())
        assert header["version"] == 1
        for name, k in header["params"].items():
            np.testing.assert_array_equal(np.asarray(old.params[name]), data[f"arrays/{k}"])
    kaldi = symnet.load(DATA / "v1-kaldi-network.npz")
    assert dict(kaldi.objectives) == {"output": "quadratic"}
    assert list(kaldi.params) == ["affine.bias_params", "affine.linear_params"]


def test_the_resume_example_of_the_docs_resumes_to_the_same_parameters(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    k = next(i for i, block in enumerate(python_blocks(DOC)) if "def train(" in block)
    ns = run_block(DOC, k, tmp_path, monkeypatch)  # its own assert: resumed == uninterrupted, bit for bit
    assert capsys.readouterr().out == "resuming at step 8\n"  # the third run resumed, it did not start afresh
    assert ns["resumed"]["step"] == 20 and symnet.load(tmp_path / "run.npz")["step"] == 20
    state = _state_at(ns, 8)
    state["opt"] = ns["optimizer"].init(ns["net"].params)
    for s in range(8, 20):
        x, y = ns["batches"][s % len(ns["batches"])]
        net, opt, _ = ns["step"](state["net"], state["opt"], x, y)
        state = {"net": net, "opt": opt}
    assert not all(np.array_equal(state["net"].params[n], v) for n, v in ns["whole"]["net"].params.items())


def _state_at(ns: dict[str, Any], steps: int) -> dict[str, Any]:
    """The example's state after `steps` steps from the start."""
    state = {"net": ns["net"], "opt": ns["optimizer"].init(ns["net"].params)}
    for s in range(steps):
        x, y = ns["batches"][s % len(ns["batches"])]
        net, opt, _ = ns["step"](state["net"], state["opt"], x, y)
        state = {"net": net, "opt": opt}
    return state


def test_saving_and_loading_objectives_needs_no_kaldi() -> None:
    code = (
        "import sys, tempfile, os, symnet\n"
        "from symnet import Input, Network, Normal, Weight\n"
        "net = Network(Input('input', 2) @ Weight(Normal((2, 3))), objectives={'output': 'quadratic'})\n"
        "path = os.path.join(tempfile.mkdtemp(), 'n.npz')\n"
        "symnet.save(path, net)\n"
        "assert dict(symnet.load(path).objectives) == {'output': 'quadratic'}\n"
        "print(sorted(m for m in sys.modules if m.startswith(('symnet.kaldi', 'symnet._src.kaldi'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    assert out.strip() == "[]"


def test_every_dtype_jax_trains_with_round_trips_and_typed_keys_too(tmp_path: pathlib.Path) -> None:
    """Before: bfloat16 arrays were written as '<V2' and refused on load ("symnet files hold numbers only"), and a
    typed PRNG key (jax.random.key) was numpy's raw TypeError."""
    import ml_dtypes

    path = tmp_path / "state.symnet"
    tree = {
        "bf16": jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3) / 7,
        "f16": jnp.linspace(0, 1, 5, dtype=jnp.float16),
        "f8": np.arange(4).astype(ml_dtypes.float8_e4m3fn),
        "scalar": ml_dtypes.bfloat16(1.5),
        "key": jax.random.key(3),
        "keys": jax.random.split(jax.random.key(1, impl="rbg"), 4),
        "net": small().replace(params={k: v.astype(jnp.bfloat16) for k, v in small().params.items()}),
    }
    symnet.save(path, tree)
    back = symnet.load(path)
    for name in ("bf16", "f16", "f8"):
        assert back[name].dtype == tree[name].dtype
        np.testing.assert_array_equal(np.asarray(back[name]).view(np.uint8), np.asarray(tree[name]).view(np.uint8))
    assert back["scalar"] == tree["scalar"] and back["scalar"].dtype == ml_dtypes.bfloat16
    for name in ("key", "keys"):
        assert back[name].dtype == tree[name].dtype and back[name].shape == tree[name].shape
        np.testing.assert_array_equal(jax.random.key_data(back[name]), jax.random.key_data(tree[name]))
    assert float(jax.random.uniform(back["key"])) == float(jax.random.uniform(tree["key"]))
    assert back["net"].params["w"].dtype == jnp.bfloat16
    symnet.load(path, like=tree)  # a template with keys and bfloat16 checks out
    with pytest.raises(ModelFormatError, match="template has float32"):
        symnet.load(path, like={**tree, "bf16": jnp.zeros((2, 3), jnp.float32)})
