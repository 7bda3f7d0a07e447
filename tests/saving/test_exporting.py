"""`symnet.export`: the program runs in a process that never imports symnet and gives `net.compute`'s numbers.

The loader is the snippet of docs/api.md: `jax.export.deserialize` and `.call`, with numpy and json.
Each exported program is run at two batch sizes (the batch is symbolic) in one fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import EXAMPLES
from symnet import (
    Append,
    DimRange,
    IfDefined,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Ref,
    Round,
    ShapeError,
    Sigmoid,
    Switch,
    Tanh,
    Weight,
    Zeros,
    export,
)
from symnet._src.app.cli import main
from symnet._src.kaldi.text.build import read_network
from symnet.errors import ArgumentTypeError

#: Runs each (program, inputs .npz, outputs .npz) of argv with jax alone, after checking that the program's .json
#: describes it; fails if symnet was imported.
LOADER = """
import hashlib, json, sys
import numpy as np
from jax import export

for program, given, written in zip(*[iter(sys.argv[1:])] * 3):
    with open(program, "rb") as f:
        data = f.read()
    with open(program + ".json") as f:
        described = json.load(f)
    if hashlib.sha256(data).hexdigest() != described["program_sha256"]:
        sys.exit(f"{program}.json describes another program")
    exported = export.deserialize(bytearray(data))
    names = [i["name"] for i in described["inputs"]]
    inputs = np.load(given)
    np.savez(written, *[np.asarray(exported.call(*[inputs[n][:b] for n in names])) for b in (3, 1)])
assert "symnet" not in sys.modules, "the loader imported symnet"
"""


def _lstm_network(dim: int = 5, cells: int = 6) -> Network:
    """A one-direction LSTM written with descriptors (docs/worked-examples.md's), and a LogSoftmax layer."""
    x = Input("input", dim)
    h_prev, c_prev = IfDefined(Offset(Ref("lstm.h"), -1)), IfDefined(Offset(Ref("lstm.c"), -1))
    gates = (
        x @ Weight(Normal((dim, 4 * cells), 0.3))
        + h_prev @ Weight(Normal((cells, 4 * cells), 0.3))
        + Weight(Normal((4 * cells,), 0.3))
    )
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node("lstm.c", f * c_prev + i * g)
    h = Node("lstm.h", o * Tanh(c))
    return Network(LogSoftmax(h @ Weight(Normal((cells, 4), 0.5)) + Weight(Zeros(4))), seed=3)


def _tdnn_with_ivector() -> Network:
    """Two inputs, and context (-2, +1) on the main one."""
    x, iv = Input("input", 4), Input("ivector", 2)
    spliced = Append(Offset(x, -2), x, Offset(x, 1), iv)
    return Network(Tanh(spliced @ Weight(Normal((14, 3), 0.5))), seed=1)


def _run_loader(tmp_path: Path, runs: list[tuple[Path, dict[str, np.ndarray]]]) -> list[list[np.ndarray]]:
    """Each program's outputs for the first 3 and the first 1 sequences of its inputs, from a fresh interpreter."""
    argv: list[str] = []
    for k, (program, inputs) in enumerate(runs):
        np.savez(tmp_path / f"in{k}.npz", **inputs)
        argv += [str(program), str(tmp_path / f"in{k}.npz"), str(tmp_path / f"out{k}.npz")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", LOADER, *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    outputs = []
    for k in range(len(runs)):
        with np.load(tmp_path / f"out{k}.npz") as f:
            outputs.append([f["arr_0"], f["arr_1"]])
    return outputs


def test_exported_programs_run_without_symnet_and_match_compute(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tdnn = read_network(EXAMPLES / "kaldi-doc-example.config")  # context (1, 2)
    lstm = _lstm_network()
    two = _tdnn_with_ivector()
    cases = [  # network, inputs [3, T, D], export options
        (tdnn, {"input": rng.standard_normal((3, 9, 12))}, {"mode": "same"}),
        (tdnn, {"input": rng.standard_normal((3, 9, 12))}, {"mode": "valid"}),
        (lstm, {"input": rng.standard_normal((3, 11, 5))}, {}),
        (two, {"input": rng.standard_normal((3, 7, 4)), "ivector": rng.standard_normal((3, 7, 2))}, {}),
    ]
    runs = []
    for k, (net, inputs, options) in enumerate(cases):
        inputs = {name: v.astype(np.float32) for name, v in inputs.items()}
        frames = next(iter(inputs.values())).shape[1]
        exported = export(net, tmp_path / f"p{k}.jaxexport", frames=frames, **options)
        assert str(exported.in_avals[0].shape[0]) == "b"
        runs.append((tmp_path / f"p{k}.jaxexport", inputs))
    outputs = _run_loader(tmp_path, runs)
    for (net, _, options), (_, cast), (three, one) in zip(cases, runs, outputs, strict=True):
        given = cast if len(cast) > 1 else cast["input"]
        want = np.asarray(net.compute(given, mode=options.get("mode", "same")))
        np.testing.assert_allclose(three, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(one, want[:1], rtol=1e-5, atol=1e-5)
    assert outputs[1][0].shape == (3, 9 - 1 - 2, 115)  # 'valid': the frames that need no padding


def _periodic_network() -> Network:
    """Reads depend on t modulo 3 and 2 (`Round`, `Switch`): time modulus 6 (nnet3-info's context: (2, 38))."""
    x = Input("input", 3)
    spliced = Append(Offset(x, -1), Round(Offset(x, 2), 3), Switch(x, Offset(x, -3)))
    return Network(Tanh(spliced @ Weight(Normal((9, 4), 0.5))), seed=2)


@pytest.mark.slow  # make test-all; make test exports and runs a program in the test above
def test_a_symbolic_frame_count_runs_every_length_in_chunks(tmp_path: Path) -> None:
    """frames='t': one program for any length, chunks shorter and longer than the sequence, equal to compute."""
    rng = np.random.default_rng(1)
    tdnn = read_network(EXAMPLES / "kaldi-doc-example.config")  # context (1, 2)
    cases = [  # network, export options, the lengths run, the input dims
        (tdnn, {"mode": "same", "chunk": 4}, (1, 4, 5, 13), {"input": 12}),
        (tdnn, {"mode": "valid", "chunk": 4}, (4, 9), {"input": 12}),
        (_tdnn_with_ivector(), {"chunk": 3}, (2, 10), {"input": 4, "ivector": 2}),
        (_periodic_network(), {"chunk": 4}, (5, 20), {"input": 3}),  # chunk rounded up to the modulus, 6
        (_periodic_network(), {"mode": "valid"}, (41, 300), {"input": 3}),  # the default: 4 x 40 = 160 frames
    ]
    runs, expected = [], []
    for k, (net, options, lengths, dims) in enumerate(cases):
        exported = export(net, tmp_path / f"p{k}.jaxexport", frames="t", **options)
        assert [str(d) for d in exported.in_avals[0].shape[:2]] == ["b", "t"]
        for frames in lengths:
            inputs = {n: rng.standard_normal((3, frames, d)).astype(np.float32) for n, d in dims.items()}
            runs.append((tmp_path / f"p{k}.jaxexport", inputs))
            given = inputs if len(inputs) > 1 else inputs["input"]
            expected.append(np.asarray(net.compute(given, mode=options.get("mode", "same"))))
    assert json.loads((tmp_path / "p3.jaxexport.json").read_text())["chunk"] == 6
    assert json.loads((tmp_path / "p4.jaxexport.json").read_text())["chunk"] == 162  # 160 rounded up to 6
    assert json.loads((tmp_path / "p1.jaxexport.json").read_text())["outputs"][0]["shape"] == ["b", "t - 3", 115]
    for (three, one), want in zip(_run_loader(tmp_path, runs), expected, strict=True):
        assert three.shape == want.shape
        np.testing.assert_allclose(three, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(one, want[:1], rtol=1e-5, atol=1e-5)


def test_the_description_names_inputs_output_and_shapes(tmp_path: Path) -> None:
    export(_tdnn_with_ivector(), tmp_path / "two", frames=7, batch=5, mode="valid")
    described = json.loads((tmp_path / "two.json").read_text())
    assert described["format"] == "symnet-export" and described["context"] == [2, 1]
    assert described["inputs"] == [
        {"name": "input", "shape": [5, 7, 4], "dtype": "float32"},
        {"name": "ivector", "shape": [5, 7, 2], "dtype": "float32"},
    ]
    assert described["outputs"] == [{"name": "output", "shape": [5, 4, 3], "dtype": "float32"}]


def test_symnet_export_writes_the_program_of_a_config(tmp_path: Path) -> None:
    out = tmp_path / "doc.jaxexport"
    assert main(["export", "--frames", "6", str(EXAMPLES / "kaldi-doc-example.config"), str(out)]) == 0
    described = json.loads(Path(str(out) + ".json").read_text())
    assert described["outputs"][0]["shape"] == ["b", 6, 115] and out.stat().st_size > 0
    assert main(["export", "--frames", "t", "--chunk", "8", str(EXAMPLES / "kaldi-doc-example.config"), str(out)]) == 0
    described = json.loads(Path(str(out) + ".json").read_text())
    assert described["outputs"][0]["shape"] == ["b", "t", 115] and described["chunk"] == 8


def test_bad_arguments_name_the_value(tmp_path: Path) -> None:
    net = _lstm_network()
    with pytest.raises(PlanError, match="frames='t'.*local in time.*lstm.h.*closes a recurrence.*frames=N"):
        export(net, tmp_path / "p", frames="t")
    with pytest.raises(PlanError, match="frames must be .* got 't-1'"):
        export(net, tmp_path / "p", frames="t-1")
    with pytest.raises(PlanError, match="chunk must be a positive number of frames, got 0"):
        export(_tdnn_with_ivector(), tmp_path / "p", frames="t", chunk=0)
    with pytest.raises(PlanError, match="chunk=16 is for a symbolic frame count.*frames=5 is fixed"):
        export(_tdnn_with_ivector(), tmp_path / "p", frames=5, chunk=16)
    with pytest.raises(PlanError, match="frames and batch are both 'b'"):
        export(_tdnn_with_ivector(), tmp_path / "p", frames="b")
    with pytest.raises(PlanError, match="batch must be .* got 0"):
        export(net, tmp_path / "p", frames=5, batch=0)
    with pytest.raises(PlanError, match="batch must be .* got 'b-1'"):
        export(net, tmp_path / "p", frames=5, batch="b-1")
    with pytest.raises(ShapeError, match="3 frames are too short.*context \\(2, 1\\)"):
        export(_tdnn_with_ivector(), tmp_path / "p", frames=3, mode="valid")
    with pytest.raises(ArgumentTypeError, match="export takes a symnet.Network, not str"):
        export("net.zip", tmp_path / "p", frames=5)  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_the_description_is_bound_to_its_program(tmp_path: Path) -> None:
    """Before: the .json said nothing of the program, so the description of another export beside a program went
    unnoticed (the loader called it with that export's input names and shapes)."""
    one, two = _tdnn_with_ivector(), read_network(EXAMPLES / "kaldi-doc-example.config")
    export(one, tmp_path / "one", frames=7)
    export(two, tmp_path / "two", frames=5)
    for name in ("one", "two"):
        described = json.loads((tmp_path / f"{name}.json").read_text())
        assert described["version"] == 2
        assert described["program_sha256"] == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
    (tmp_path / "one.json").write_bytes((tmp_path / "two.json").read_bytes())
    np.savez(tmp_path / "in.npz", input=np.zeros((3, 7, 4), np.float32), ivector=np.zeros((3, 7, 2), np.float32))
    argv = [str(tmp_path / "one"), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    done = subprocess.run([sys.executable, "-c", LOADER, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "one.json describes another program" in done.stderr


def test_the_service_needs_flatbuffers_as_the_docs_say(tmp_path: Path) -> None:
    """`symnet --help` said an export "runs with jax alone"; jax.export.deserialize imports flatbuffers, which jax
    does not install. The requirement is real (a loader without it fails) and every place that makes the claim
    names it."""
    net = read_network(EXAMPLES / "kaldi-doc-example.config")
    export(net, tmp_path / "p.jaxexport", frames=5)
    hidden = "import sys; sys.modules['flatbuffers'] = None\n"
    argv = [str(tmp_path / "p.jaxexport"), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    np.savez(tmp_path / "in.npz", input=np.zeros((3, 5, 12), np.float32))
    done = subprocess.run(
        [sys.executable, "-c", hidden + LOADER, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode != 0 and "flatbuffers" in done.stderr
    from helpers import REPO

    for place in (REPO / "README.md", REPO / "docs" / "api.md", REPO / "symnet" / "_src" / "exporting.py"):
        assert "flatbuffers" in place.read_text(), place
    shown = subprocess.run([sys.executable, "-m", "symnet", "--help"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "jax alone" not in shown.stdout and "flatbuffers" in shown.stdout
