"""Data-parallel `fit(mesh=...)` against the one-device run: losses, parameters, batch-norm statistics,
the collectives of the compiled step, and two processes (`jax.distributed`) against one.

The rest of the suite sees one CPU device, so the runs happen in subprocesses started with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`: this file run as a script is the worker
(`python test_mesh.py MODE ...`, printing one JSON line).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
import pytest

FEAT, CLASSES, CHUNK, BATCH, DEVICES = 4, 6, 6, 4, 4
BATCHNORM_CONFIG = f"""
input-node name=input dim={FEAT}
component name=l1 type=AffineComponent input-dim={3 * FEAT} output-dim=8 param-stddev=0.5 bias-stddev=0.1
component-node name=l1 component=l1 input=Append(Offset(input, -1), input, Offset(input, 1))
component name=relu type=RectifiedLinearComponent dim=8
component-node name=relu component=relu input=l1
component name=bn type=BatchNormComponent dim=8 target-rms=1.0
component-node name=bn component=bn input=relu
component name=out type=AffineComponent input-dim=8 output-dim={CLASSES} param-stddev=0.3 bias-stddev=0.0
component-node name=out component=out input=bn
component name=sm type=LogSoftmaxComponent dim={CLASSES}
component-node name=sm component=sm input=out
output-node name=output input=sm objective=linear
"""


# ----- the worker (runs in the subprocesses) -------------------------------------------------------


def networks() -> dict[str, Any]:
    """A small TDNN, a small recurrent net and a TDNN with training-mode batch-norm."""
    from symnet import (
        Append,
        IfDefined,
        Input,
        LogSoftmax,
        Network,
        Node,
        Normal,
        Offset,
        Ref,
        ReLU,
        Tanh,
        Weight,
        Zeros,
    )
    from symnet.kaldi import parse_network

    def affine(x: Any, fan_in: int, fan_out: int, name: str) -> Any:
        w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
        return x @ w + Weight(Zeros(fan_out), name=f"{name}.b")

    x = Input("input", FEAT)
    h = ReLU(affine(Append(Offset(x, -1), x, Offset(x, 1)), 3 * FEAT, 8, "l1"))
    tdnn = Network(LogSoftmax(affine(Append(Offset(h, -2), h, Offset(h, 2)), 24, CLASSES, "out")), seed=0)
    u = Weight(Normal((8, 8), 0.3), name="h.u")
    r = Node("h", Tanh(affine(x, FEAT, 8, "h") + IfDefined(Offset(Ref("h"), -1)) @ u))
    recurrent = Network(LogSoftmax(affine(r, 8, CLASSES, "out")), seed=1)
    # both directions: trained with each chunk's own sequence end (the backward one starts at its last frame)
    ub = Weight(Normal((8, 8), 0.3), name="b.u")
    back = Node("b", Tanh(affine(x, FEAT, 8, "b") + IfDefined(Offset(Ref("b"), 1)) @ ub))
    bidirectional = Network(LogSoftmax(affine(Append(r, back), 16, CLASSES, "out")), seed=3)
    return {
        "tdnn": tdnn,
        "recurrent": recurrent,
        "batchnorm": parse_network(BATCHNORM_CONFIG, seed=2),
        "bidirectional": bidirectional,
    }


def task() -> Any:
    from symnet.datasets import HmmTask

    return HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=20, max_length=40
    )


def data() -> tuple[Any, Any]:
    return task().sample(8, seed=1), task().sample(3, seed=2)


def train(net: Any, mesh: Any, phones: bool = False, **options: Any) -> dict[str, Any]:
    """One epoch of `fit`: losses and values. 45 chunks make 12 minibatches an epoch; the last one has
    one chunk and 3 of weight 0 (3 of the 4 devices have no frame to train on). `phones`: the data's phone
    labels (for CTC), not its states."""
    import optax

    from symnet.train import fit

    train_data, valid = data()
    if phones:
        train_data, valid = task().phone_dataset(train_data), task().phone_dataset(valid)
    result = fit(
        net,
        train_data,
        optax.adam(1e-2),
        valid=valid,
        **{"epochs": 1, "batch_size": BATCH, "chunk": CHUNK, "progress": False, "mesh": mesh, **options},
    )
    return {
        "losses": [[h.train_loss, h.train_accuracy, h.valid_loss, h.valid_accuracy] for h in result.history],
        "steps": result.history[-1].step if result.history else None,
        "scale": float(result.opt_state.scale) if hasattr(result.opt_state, "scale") else None,
        "values": {k: np.asarray(v).tolist() for k, v in result.network.values.items()},
    }


def train_stream(net: Any, mesh: Any) -> dict[str, Any]:
    """One epoch of `fit` on a stream of 40 sequences of 4 to 6 frames (one chunk each) in windows of about 60
    frames: losses, values, and the positions of the sequences this process read."""
    import optax

    from symnet.datasets import HmmTask
    from symnet.train import fit, stream_sequences

    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=FEAT, min_length=4, max_length=CHUNK
    )
    sample = task.sample(40, seed=3)
    sequences = [(f"seq{i:02d}", f, t) for i, (f, t) in enumerate(zip(sample.features, sample.labels))]
    stream = stream_sequences(sequences, window_frames=60)
    read: list[int] = []
    item = stream._item

    def recorded(position: int) -> Any:
        read.append(position)
        return item(position)

    stream._item = recorded  # type: ignore[method-assign]
    result = fit(net, stream, optax.adam(1e-2), epochs=1, batch_size=BATCH, chunk=CHUNK, progress=False, mesh=mesh)
    return {
        "losses": [[h.train_loss, h.train_accuracy] for h in result.history],
        "steps": result.history[-1].step,
        "values": {k: np.asarray(v).tolist() for k, v in result.network.values.items()},
        "read": read,
    }


def collectives(net: Any, mesh: Any) -> dict[str, int]:
    """How many of each collective the compiled data-parallel step's HLO has."""
    import jax
    import optax

    from symnet._src.train import fit_data
    from symnet._src.train import trainer as training
    from symnet._src.train.objectives import Linear
    from symnet._src.train.parallel import DataParallel

    parallel = DataParallel(mesh, BATCH)
    chunks = fit_data.as_chunks(data()[0], net, CHUNK, "output")
    opt = optax.adam(1e-2)
    trainer = training.Trainer(
        net, opt, batch_size=BATCH, chunks=chunks, objective=Linear(), input="input", output="output", parallel=parallel
    )
    args = (
        parallel.replicate(net),
        parallel.replicate(opt.init(net.params)),
        *trainer.arrays(trainer.minibatch(0, chunks, np.arange(BATCH))),
        parallel.replicate(jax.random.PRNGKey(0)),
        trainer.ends(trainer.minibatch(0, chunks, np.arange(BATCH))),
    )
    hlo = trainer.jitted_step.lower(*args).compile().as_text()
    assert hlo is not None
    ops = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")
    lines = {op: re.findall(rf"^\s*\S+ = (.*?) {op}(?:-start)?\(", hlo, flags=re.M) for op in ops}
    counts: dict[str, Any] = {op: len(found) for op, found in lines.items()}
    # the shapes all-reduced, e.g. `(f32[8]{0}, f32[8,12]{1,0}, f32[])` -> [[8], [8, 12], []]
    counts["reduced"] = [
        [int(d) for d in dims.split(",") if d]
        for shape in lines["all-reduce"]
        for dims in re.findall(r"\[([\d,]*)\]", shape)
    ]
    return counts


def worker(mode: str, *args: str) -> dict[str, Any]:
    import jax
    import optax

    from symnet.train import TrainingError, fit

    if mode == "compare":  # one process: every network with and without a mesh, and the step's collectives
        mesh = jax.make_mesh((DEVICES,), ("data",))
        out: dict[str, Any] = {}
        for name, net in networks().items():
            out[name] = {"one": train(net, None), "mesh": train(net, mesh), "hlo": collectives(net, mesh)}
        tdnn = networks()["tdnn"]  # last chunks cut to 2 or 4 frames where they hold no more
        for objective in ("chain", "ctc"):  # sequence objectives: supervision per chunk, split with the chunks
            # CTC at 3x frame subsampling: 2 output frames a chunk, so some chunks cannot align their phones
            kind = (
                {"objective": "ctc", "phones": True, "frame_subsampling_factor": 3}
                if objective == "ctc"
                else {"objective": objective}
            )
            out[objective] = {"one": train(tdnn, None, **kind), "mesh": train(tdnn, mesh, **kind)}
        out["widths"] = {"one": train(tdnn, None, chunk=(CHUNK, 4, 2)), "mesh": train(tdnn, mesh, chunk=(CHUNK, 4, 2))}
        from symnet import Precision

        # float16 with a loss scale that overflows at first: every device skips the same steps, then trains
        half = {"precision": Precision(compute="float16", loss_scale=2.0**20), "epochs": 3}
        out["float16"] = {"one": train(tdnn, None, **half), "mesh": train(tdnn, mesh, **half)}
        with tempfile.TemporaryDirectory() as folder:  # stopped after 7 steps (mid-epoch), then resumed
            path = os.path.join(folder, "run.ckpt")
            train(networks()["tdnn"], mesh, checkpoint=path, checkpoint_every=1, max_steps=7)
            out["resumed"] = train(networks()["tdnn"], mesh, checkpoint=path)
        try:
            fit(networks()["tdnn"], data()[0], optax.sgd(0.1), batch_size=6, mesh=mesh)
        except TrainingError as e:
            out["indivisible"] = str(e)
        return out
    if mode == "reference":  # one process, all devices: the TDNN with a mesh, in memory and streamed; no mesh
        mesh = jax.make_mesh((DEVICES,), ("data",))
        memory = train(networks()["tdnn"], mesh)
        streamed = {"mesh": train_stream(networks()["tdnn"], mesh), "one": train_stream(networks()["tdnn"], None)}
        return {**memory, "stream": streamed}
    if mode == "process":  # one of two processes on localhost
        process, port = int(args[0]), int(args[1])
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process)
        assert len(jax.devices()) == DEVICES and len(jax.local_devices()) == DEVICES // 2
        mesh = jax.make_mesh((DEVICES,), ("data",))
        result = train(networks()["tdnn"], mesh)
        result["stream"] = train_stream(networks()["tdnn"], mesh)
        jax.distributed.shutdown()
        return result
    raise SystemExit(f"unknown mode {mode}")


# ----- the tests -----------------------------------------------------------------------------------


def start(devices: int, *args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
    }
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def result(proc: subprocess.Popen, timeout: float = 240) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def assert_same_run(run: dict[str, Any], reference: dict[str, Any], rtol: float = 1e-5) -> None:
    assert run["steps"] == reference["steps"] == 12
    np.testing.assert_allclose(run["losses"], reference["losses"], rtol=rtol)
    assert run["values"].keys() == reference["values"].keys()
    for name, value in reference["values"].items():
        np.testing.assert_allclose(run["values"][name], value, rtol=rtol, atol=1e-6, err_msg=name)


NETWORKS = ("tdnn", "recurrent", "batchnorm", "bidirectional")


@pytest.mark.slow  # a 4-device worker process: make test-all
def test_mesh_runs_equal_the_one_device_runs() -> None:
    """One compare worker (a process with 4 devices, about 30 s) checks every mesh run: each network's run,
    its compiled step's collectives, several chunk widths, a resume, and the batch-size check."""
    compared = result(start(DEVICES, "compare"))
    for name in NETWORKS:
        check_equal_runs(compared, name)
        check_collectives(compared, name)
    check_chunk_widths(compared)
    for objective in ("chain", "ctc"):  # each device's loss weighted by its share of the objective's own total
        assert_same_run(compared[objective]["mesh"], compared[objective]["one"])
        assert compared[objective]["one"]["losses"] != compared["tdnn"]["one"]["losses"]
    check_float16(compared)
    resumed, whole = compared["resumed"], compared["tdnn"]["mesh"]
    # a mesh run stopped after 7 steps and resumed from its checkpoint ends as the uninterrupted one
    assert resumed["losses"] == whole["losses"] and resumed["values"] == whole["values"]
    assert compared["indivisible"] == (
        "batch_size 6 does not divide over the 4 devices of mesh axis 'data': give a multiple of 4"
    )


def check_equal_runs(compared: dict[str, Any], name: str) -> None:
    """Losses, accuracies (train and validation) and every parameter after 12 steps, to float rounding;
    with batch-norm also its stored statistics (the minibatch's statistics are taken over all devices)."""
    run = compared[name]
    assert_same_run(run["mesh"], run["one"])
    initial = {k: np.asarray(v) for k, v in networks()[name].values.items()}
    assert any(not np.allclose(run["one"]["values"][k], v) for k, v in initial.items()), name  # it did train
    if name == "batchnorm":
        assert run["one"]["values"]["bn.count"] > 0


def check_collectives(compared: dict[str, Any], name: str) -> None:
    """The step all-reduces exactly: the frame count, every parameter's gradient, the loss and the number
    of correct frames (and batch-norm's sums of x and x^2 forward and their derivatives backward).
    Nothing activation-sized is reduced, and nothing is gathered, exchanged or scattered: parameters
    are replicated and each device keeps its own chunks."""
    ops = compared[name]["hlo"]
    assert ops["all-gather"] == ops["all-to-all"] == ops["collective-permute"] == ops["reduce-scatter"] == 0, (
        name,
        ops,
    )
    expected = [[]] * 3 + [list(np.shape(v)) for v in networks()[name].params.values()]
    if name == "batchnorm":
        expected += [[8]] * 4  # (the row count is a constant: jax folds its psum)
    assert sorted(ops["reduced"]) == sorted(expected), (name, ops)


def check_float16(compared: dict[str, Any]) -> None:
    """float16 with dynamic loss scaling: the mesh run skips the steps the one-device run skips (the
    all-reduced gradient overflows on every device at once) and trains as it does, to float16 rounding."""
    one, mesh = compared["float16"]["one"], compared["float16"]["mesh"]
    assert mesh["steps"] == one["steps"] == 36 and mesh["scale"] == one["scale"] < 2.0**20
    np.testing.assert_allclose(mesh["losses"], one["losses"], rtol=2e-3)
    for name, value in one["values"].items():
        np.testing.assert_allclose(mesh["values"][name], value, rtol=2e-3, atol=1e-4, err_msg=name)
    initial = {k: np.asarray(v) for k, v in networks()["tdnn"].values.items()}
    assert any(not np.allclose(one["values"][k], v) for k, v in initial.items())  # it did train


def check_chunk_widths(compared: dict[str, Any]) -> None:
    """With `chunk=(6, 4, 2)` every device computes its share of each cut-down minibatch."""
    one, mesh = compared["widths"]["one"], compared["widths"]["mesh"]
    assert mesh["steps"] == one["steps"] > 12  # a partly filled minibatch per width
    np.testing.assert_allclose(mesh["losses"], one["losses"], rtol=1e-5)
    for name, value in one["values"].items():
        np.testing.assert_allclose(mesh["values"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert one["losses"] != compared["tdnn"]["one"]["losses"]  # other minibatches than with one width


def test_mesh_arguments_are_checked() -> None:
    import jax
    import optax

    from symnet.train import TrainingError, fit

    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(TrainingError, match=r"the mesh has no axis 'batch' \(data_axis\); its axes are \('data',\)"):
        fit(networks()["tdnn"], data()[0], optax.sgd(0.1), batch_size=3, mesh=mesh, data_axis="batch")
    with pytest.raises(TrainingError, match="mesh must be a jax.sharding.Mesh, got str"):
        fit(networks()["tdnn"], data()[0], optax.sgd(0.1), mesh="data")  # type: ignore[arg-type]


def test_a_non_finite_loss_on_a_mesh_names_the_step_and_the_node() -> None:
    """The diagnosis walks the whole minibatch's Tape on one device (here a mesh of this process's one)."""
    import jax
    import optax

    from symnet import Input, Log, LogSoftmax, Network, Normal, Weight
    from symnet.train import TrainingError, fit

    x = Input("input", FEAT)
    net = Network(LogSoftmax(Log(x) @ Weight(Normal((FEAT, CLASSES), 0.3))), seed=0)  # Log of negatives: NaN
    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(TrainingError) as e:
        fit(net, data()[0], optax.sgd(0.1), batch_size=BATCH, chunk=CHUNK, progress=False, mesh=mesh)
    assert "the loss is nan at step 1 " in str(e.value)
    assert "first non-finite value: Log node `Log(Input('input', 4))`" in str(e.value)


def test_natural_gradient_with_a_mesh_is_refused() -> None:
    import jax
    import optax

    from helpers import EXAMPLES
    from symnet import natural_gradient
    from symnet.datasets import HmmTask
    from symnet.kaldi import read_network
    from symnet.train import TrainingError, fit

    net = read_network(EXAMPLES / "hmm-tdnn.config")
    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(TrainingError, match="natural gradient .* with a mesh: its preconditioners"):
        fit(net, HmmTask.create(seed=0).sample(2, seed=1), natural_gradient.optimizer(optax.sgd(0.1), net), mesh=mesh)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # two worker processes: make test-all
def test_two_processes_train_as_one() -> None:
    """Two processes with 2 devices each, one mesh over the 4: both report the losses and parameters
    of one process with 4 devices."""
    port = str(free_port())
    procs = [start(DEVICES // 2, "process", str(i), port) for i in range(2)]
    reference = start(DEVICES, "reference")
    runs = [result(p) for p in procs]
    expected = result(reference)
    for run in runs:
        assert_same_run(run, expected)
    assert runs[0]["losses"] == runs[1]["losses"]  # the processes agree exactly: every value is replicated
    check_streams([run["stream"] for run in runs], expected["stream"])


def check_streams(runs: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    """A stream trains the same in two processes as in one with all four devices, and as without a mesh; each
    process reads only the sequences its own devices compute (here one chunk a sequence: half of them)."""
    one, whole = expected["one"], expected["mesh"]
    assert one["steps"] == whole["steps"] == runs[0]["steps"] == runs[1]["steps"] > 10
    for run in (whole, *runs):
        np.testing.assert_allclose(run["losses"], one["losses"], rtol=1e-5)
        for name, value in one["values"].items():
            np.testing.assert_allclose(run["values"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert runs[0]["losses"] == runs[1]["losses"] and runs[0]["values"] == runs[1]["values"]
    everything = set(range(40))
    assert set(one["read"]) == set(whole["read"]) == everything  # fit's first look reads sequence 0 too
    mine = [set(run["read"]) - {0} for run in runs]
    assert mine[0] | mine[1] == everything - {0}
    # each reads its half, and only the few sequences that fill a window's short last minibatch twice
    assert all(len(m) <= 24 for m in mine) and len(mine[0] & mine[1]) <= 4, [sorted(m) for m in mine]


if __name__ == "__main__":
    print(json.dumps(worker(*sys.argv[1:])))
