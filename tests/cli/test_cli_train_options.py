"""`symnet train`'s optimisers and schedules, validation data for Kaldi tables, `--output` and `--metrics`:
the schedules against their formulas written here, the metrics file against the run it logs."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import kaldiio
import numpy as np
import optax
import pytest

from helpers import EXAMPLES
from symnet import Network
from symnet._src.app.cli import main
from symnet._src.train.fit_data import as_chunks
from symnet._src.train.optimizers import OptimizerSettings, make_optimizer
from symnet.errors import TrainingError
from symnet.train import StepStats, fit


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("step", [0, 1, 37, 99, 100])
def test_schedules_follow_their_formulas(step: int) -> None:
    _, exponential = make_optimizer(OptimizerSettings("sgd", 0.1, "exponential", 0.001), 100)
    assert exponential(step) == pytest.approx(0.1 * (0.001 / 0.1) ** (step / 100), rel=1e-5)
    _, kaldi_default = make_optimizer(OptimizerSettings("sgd", 0.1, "exponential"), 100)  # final = lr / 10
    assert kaldi_default(step) == pytest.approx(0.1 * 0.1 ** (step / 100), rel=1e-5)
    _, cosine = make_optimizer(OptimizerSettings("adam", 0.1, "cosine", 0.02), 100)
    assert cosine(step) == pytest.approx(0.02 + (0.1 - 0.02) * 0.5 * (1 + math.cos(math.pi * step / 100)), rel=1e-5)
    _, warm = make_optimizer(OptimizerSettings("adam", 0.1, "exponential", 0.001, warmup=10), 110)
    expected = 0.1 * step / 10 if step < 10 else 0.1 * (0.001 / 0.1) ** ((step - 10) / 100)
    assert warm(step) == pytest.approx(expected, rel=1e-5, abs=1e-12)


def test_clipping_weight_decay_and_adamw_act_on_the_update() -> None:
    params = {"w": np.array([1.0, -2.0], np.float32)}
    grads = {"w": np.array([30.0, 40.0], np.float32)}  # norm 50
    sgd, _ = make_optimizer(OptimizerSettings("sgd", 0.1, clip=5.0), 10)
    updates, _ = sgd.update(grads, sgd.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1 * np.array([3.0, 4.0]), rtol=1e-6)
    decayed, _ = make_optimizer(OptimizerSettings("sgd", 0.1, weight_decay=0.5), 10)
    updates, _ = decayed.update(grads, decayed.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1 * (grads["w"] + 0.5 * params["w"]), rtol=1e-6)
    adamw, _ = make_optimizer(OptimizerSettings("adamw", 0.1, weight_decay=0.5), 10)
    reference = optax.adamw(0.1, weight_decay=0.5)
    ours, _ = adamw.update(grads, adamw.init(params), params)
    theirs, _ = reference.update(grads, reference.init(params), params)
    np.testing.assert_allclose(ours["w"], theirs["w"], rtol=1e-6)


@pytest.mark.parametrize(
    "settings,message",
    [
        (OptimizerSettings("rmsprop"), "unknown optimizer 'rmsprop'"),
        (OptimizerSettings(schedule="linear"), "unknown schedule 'linear'"),
        (OptimizerSettings(final_lr=1e-4), "needs a schedule that changes it"),
        (OptimizerSettings(schedule="exponential", final_lr=0.0), "decays to a final learning rate > 0"),
        (OptimizerSettings(lr=float("nan")), "positive number"),
    ],
)
def test_settings_that_cannot_be_honoured_are_errors(settings: OptimizerSettings, message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        make_optimizer(settings, 10)


def test_fit_calls_on_step_once_per_step_with_that_steps_figures() -> None:
    from symnet.datasets import HmmTask
    from symnet.kaldi import parse_network

    task = HmmTask.create(seed=0)
    network = parse_network((EXAMPLES / "hmm-tdnn.config").read_text())
    seen: list[StepStats] = []
    result = fit(
        network, task.sample(8, seed=1), optax.adam(1e-3), batch_size=4, chunk=30, progress=False, on_step=seen.append
    )
    assert [s.step for s in seen] == list(range(1, result.history[-1].step + 1))
    assert all(np.isfinite(s.loss) and 0 <= s.accuracy <= 1 and s.frames > 0 and s.seconds > 0 for s in seen)
    frames = sum(s.frames for s in seen)
    assert result.history[-1].train_loss == pytest.approx(sum(s.loss * s.frames for s in seen) / frames, rel=1e-5)
    # the first step's gradient norm: jax.grad of the mean cross-entropy of that minibatch, computed here
    chunks = as_chunks(task.sample(8, seed=1), network, 30, "output")
    order = np.random.default_rng([0, 0]).permutation(len(chunks))[:4]
    x, targets, weights = chunks.features[order], chunks.targets[order], chunks.weights[order]

    def mean_xent(params: dict) -> jax.Array:
        net = Network.from_structure(network.structure, params, network.state)
        out = net.compute(jnp.asarray(x), mode="valid")  # the chunk's output frames from its context
        logp = jnp.take_along_axis(out, jnp.asarray(targets)[..., None], -1)[..., 0]
        return -(logp * weights).sum() / weights.sum()

    grads = jax.grad(mean_xent)(network.params)
    assert seen[0].grad_norm == pytest.approx(float(optax.tree.norm(grads)), rel=1e-4)


def test_train_writes_metrics_of_each_step_and_epoch(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    args = ["--data", "builtin:hmm:12", "--epochs", "2", "--batch-size", "4", "--chunk", "30", "--quiet"]
    schedule = ["--optimizer", "sgd", "--lr", "0.05", "--schedule", "exponential", "--final-lr", "0.005"]
    out = tmp_path / "model.npz"
    config = str(EXAMPLES / "hmm-tdnn.config")
    status, _, err = run("train", config, *args, *schedule, "--metrics", str(metrics), "--out", str(out))
    assert status == 0, err
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["step"] for r in steps] == list(range(1, len(steps) + 1)) and len(epochs) == 2
    assert epochs[-1]["step"] == len(steps) and epochs[-1]["valid_loss"] is not None
    for r in steps:  # the rate each step used: Kaldi's exponential decay over the run's steps
        assert r["lr"] == pytest.approx(0.05 * 0.1 ** ((r["step"] - 1) / len(steps)), rel=1e-5)
        assert r["frames_per_second"] > 0 and np.isfinite(r["loss"]) and r["grad_norm"] > 0


def test_drop_partial_leaves_short_minibatches_out_of_the_steps_and_the_schedule(tmp_path: Path) -> None:
    args = ["--data", "builtin:hmm:12", "--epochs", "2", "--batch-size", "4", "--chunk", "30", "--quiet"]
    schedule = ["--optimizer", "sgd", "--lr", "0.05", "--schedule", "exponential", "--final-lr", "0.005"]
    config = str(EXAMPLES / "hmm-tdnn.config")
    steps = {}
    for flag in ([], ["--drop-partial"]):
        metrics = tmp_path / f"metrics{len(flag)}.jsonl"
        out = str(tmp_path / f"m{len(flag)}.npz")
        status, _, err = run("train", config, *args, *schedule, *flag, "--metrics", str(metrics), "--out", out)
        assert status == 0, err
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        steps[bool(flag)] = [r for r in records if r["kind"] == "step"]
    assert 0 < len(steps[True]) < len(steps[False])
    for r in steps[True]:  # the schedule counts the steps that are taken
        assert r["lr"] == pytest.approx(0.05 * 0.1 ** ((r["step"] - 1) / len(steps[True])), rel=1e-5)


def kaldi_tables(folder: Path, utterances: int) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    feats = {f"u{i:02d}": rng.standard_normal((40, 16)).astype(np.float32) for i in range(utterances)}
    ali = {key: rng.integers(0, 30, size=40).astype(np.int32) for key in feats}
    kaldiio.save_ark(str(folder / "feats.ark"), feats)
    kaldiio.save_ark(str(folder / "ali.ark"), ali)
    return f"ark:{folder / 'feats.ark'}", f"ark:{folder / 'ali.ark'}"


def test_validation_data_for_kaldi_tables(tmp_path: Path) -> None:
    feats, ali = kaldi_tables(tmp_path, 10)
    config = str(EXAMPLES / "hmm-tdnn.config")
    common = ["--feats", feats, "--targets", ali, "--epochs", "1", "--batch-size", "4", "--chunk", "20", "--quiet"]
    status, stdout, err = run("train", config, *common, "--valid-fraction", "0.2", "--out", str(tmp_path / "a.npz"))
    assert status == 0, err
    assert "valid loss" in stdout
    both = ["--valid-feats", feats, "--valid-targets", ali]
    status, stdout, err = run("train", config, *common, *both, "--out", str(tmp_path / "b.npz"))
    assert status == 0, err
    assert "valid loss" in stdout
    status, _, err = run("train", config, *common, "--valid-feats", feats, "--out", str(tmp_path / "c.npz"))
    assert status != 0 and "--valid-feats and --valid-targets together" in err
    status, _, err = run("train", config, *common, "--output", "nothing", "--out", str(tmp_path / "d.npz"))
    assert status != 0 and "nothing" in err
    assert not (tmp_path / "c.npz").exists() and not (tmp_path / "d.npz").exists()
    builtin = ["--data", "builtin:hmm:6", "--valid-fraction", "0.2", "--out", str(tmp_path / "e.npz")]
    status, _, err = run("train", config, *builtin)  # the built-in task's own validation data: not ignored silently
    assert status != 0 and "--valid-fraction: validation data for --feats" in err


def test_a_held_out_fraction_is_the_last_utterances_by_id(tmp_path: Path) -> None:
    from symnet.train import read_kaldi_data

    feats, ali = kaldi_tables(tmp_path, 10)
    train, held_out = read_kaldi_data(feats, ali).split(0.2)
    assert held_out.utt_ids == ("u08", "u09") and train.utt_ids == tuple(f"u{i:02d}" for i in range(8))


def test_precision_and_lowering_reach_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--precision` and `--lowering` become fit's FitOptions fields (and a bad value is argparse's error)."""
    import symnet.train as train_package

    seen = []
    real_fit = train_package.fit

    def spy(*args, **kwargs):
        result = real_fit(*args, **kwargs)
        seen.append(result.options)
        return result

    monkeypatch.setattr(train_package, "fit", spy)
    args = ["--data", "builtin:hmm:8", "--epochs", "1", "--batch-size", "4", "--chunk", "30", "--quiet"]
    config = str(EXAMPLES / "hmm-tdnn.config")
    out = tmp_path / "model.npz"
    status, _, err = run("train", config, *args, "--precision", "bfloat16", "--lowering", "plain", "--out", str(out))
    assert status == 0, err
    (options,) = seen
    assert options.precision is not None and options.precision.compute == "bfloat16"
    assert options.lowering == "plain"
    with pytest.raises(SystemExit) as exit_info:
        run("train", config, *args, "--precision", "int8", "--out", str(out))
    assert exit_info.value.code == 2


def test_features_from_an_scp_are_streamed_and_train_as_the_archive_does(tmp_path: Path) -> None:
    """`--feats scp:` reads as training goes (a Stream); with one window its run equals the archive's, read into
    memory first; `--window-frames` and `--on-bad-data` are refused where nothing streams."""
    rng = np.random.default_rng(0)
    feats = {f"u{i:02d}": rng.standard_normal((int(n), 16)).astype(np.float32) for i, n in enumerate(range(20, 60, 4))}
    ali = {key: rng.integers(0, 30, size=len(f)).astype(np.int32) for key, f in feats.items()}
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'feats.ark'},{tmp_path / 'feats.scp'}") as writer:
        for key, value in feats.items():
            writer(key, value)
    kaldiio.save_ark(str(tmp_path / "ali.ark"), ali)
    config = str(EXAMPLES / "hmm-tdnn.config")
    common = ["--targets", f"ark:{tmp_path / 'ali.ark'}", "--epochs", "2", "--batch-size", "4", "--chunk", "20"]
    common += ["--quiet", "--valid-fraction", "0.2"]
    outs = {}
    for name, spec, extra in (
        ("streamed", f"scp:{tmp_path / 'feats.scp'}", ["--window-frames", "100000"]),
        ("archive", f"ark:{tmp_path / 'feats.ark'}", []),
    ):
        outs[name] = tmp_path / f"{name}.npz"
        status, stdout, err = run("train", config, "--feats", spec, *common, *extra, "--out", str(outs[name]))
        assert status == 0, err
        assert "valid loss" in stdout
    streamed, archive = np.load(outs["streamed"]), np.load(outs["archive"])
    assert sorted(streamed.files) == sorted(archive.files)
    for key in archive.files:
        np.testing.assert_array_equal(streamed[key], archive[key], err_msg=key)
    status, _, err = run(
        "train", config, "--feats", f"ark:{tmp_path / 'feats.ark'}", *common, "--on-bad-data", "skip",
        "--out", str(tmp_path / "x.npz"),
    )  # fmt: skip
    assert status != 0 and "--on-bad-data: for features read as training goes" in err


def test_num_frames_cuts_an_scp_corpus_as_nnet3_get_egs(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    feats = {f"u{i:02d}": rng.standard_normal((int(n), 16)).astype(np.float32) for i, n in enumerate(range(20, 80, 5))}
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'feats.ark'},{tmp_path / 'feats.scp'}") as writer:
        for key, value in feats.items():
            writer(key, value)
    kaldiio.save_ark(
        str(tmp_path / "ali.ark"), {k: rng.integers(0, 30, size=len(f)).astype(np.int32) for k, f in feats.items()}
    )
    config = str(EXAMPLES / "hmm-tdnn.config")
    common = ["--targets", f"ark:{tmp_path / 'ali.ark'}", "--epochs", "1", "--batch-size", "4", "--quiet"]
    status, stdout, err = run(
        "train", config, "--feats", f"scp:{tmp_path / 'feats.scp'}", *common, "--num-frames", "21,15",
        "--num-frames-overlap", "2", "--checkpoint", str(tmp_path / "run.ckpt"), "--out", str(tmp_path / "a.npz"),
    )  # fmt: skip
    assert status == 0, err
    status, _, err = run(
        "train", config, "--feats", f"scp:{tmp_path / 'feats.scp'}", *common, "--num-frames", "21,18",
        "--checkpoint", str(tmp_path / "run.ckpt"), "--out", str(tmp_path / "a.npz"), "--epochs", "2",
    )  # fmt: skip
    assert status != 0 and "chunk" in err  # other chunks than the checkpoint's run: refused, naming them
    status, _, err = run(
        "train", config, "--feats", f"ark:{tmp_path / 'feats.ark'}", *common, "--num-frames", "21",
        "--out", str(tmp_path / "b.npz"),
    )  # fmt: skip
    assert status != 0 and "--num-frames: for features read as training goes" in err
