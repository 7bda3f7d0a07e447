"""nnet3-compute's chunking, padding and options, against loops written from its source."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from helpers import EXAMPLES, nets
from symnet import (
    Append,
    IfDefined,
    Input,
    Network,
    Normal,
    Offset,
    ReLU,
    ReplaceIndex,
    Round,
    ShapeError,
    SymnetError,
    Weight,
)
from symnet._src.engine import dense, runner
from symnet._src.kaldi.compute import exact as exact_module
from symnet._src.kaldi.compute import nnet3_compute as compute_module
from symnet._src.kaldi.compute.nnet3_compute import (
    LARGE_PIECE,
    PIECE,
    ComputeOptions,
    Nnet3Computer,
    modulus,
    nnet3_compute,
)
from symnet.kaldi import read_network

rng = np.random.default_rng(0)


def doc_example():
    return read_network(EXAMPLES / "kaldi-doc-example.config", seed=3)


def doc_reference(net, feats):
    """Kaldi's doc example per output frame, with frame indices clamped into the utterance."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in net.params.items()}
    num = len(feats)
    out = []
    for t in range(num):
        x = np.concatenate([feats[min(max(t + o, 0), num - 1)] for o in (-1, 0, 1, 2)])
        h = np.maximum(p["affine1.linear_params"] @ x + p["affine1.bias_params"], 0)
        z = p["affine2.linear_params"] @ h + p["affine2.bias_params"]
        out.append(z - np.log(np.exp(z - z.max()).sum()) - z.max())
    return np.array(out)


@pytest.mark.parametrize("chunk", [1, 4, 50])
def test_doc_example_matches_the_formula_for_any_chunk_size(chunk):
    net = doc_example()
    feats = rng.standard_normal((23, 12)).astype(np.float32)
    got = nnet3_compute(net, feats, ComputeOptions(frames_per_chunk=chunk))
    np.testing.assert_allclose(got, doc_reference(net, feats), atol=1e-4)


def test_apply_exp_priors_and_acoustic_scale():
    net = doc_example()
    feats = rng.standard_normal((9, 12)).astype(np.float32)
    priors = rng.uniform(0.5, 2.0, 115).astype(np.float32)
    ref = doc_reference(net, feats)
    got = nnet3_compute(net, feats, ComputeOptions(acoustic_scale=0.5, apply_exp=True), priors=priors)
    np.testing.assert_allclose(got, np.exp(0.5 * (ref - np.log(priors))), rtol=1e-4)


def test_frame_subsampling_outputs_every_third_frame():
    net = doc_example()
    feats = rng.standard_normal((10, 12)).astype(np.float32)
    got = nnet3_compute(net, feats, ComputeOptions(frame_subsampling_factor=3, frames_per_chunk=4))
    np.testing.assert_allclose(got, doc_reference(net, feats)[::3], atol=1e-4)
    assert got.shape == (4, 115)


D, H = 3, 4


def rnn_net():
    """h = tanh(x w + h[t-1] u): the weights rnn_reference reads as w and u."""
    return Network(nets.rnn(Input("input", D), D, H, names=("w", "u"), scale=0.7))


def rnn_reference(net, feats, chunk, extra_left=0, extra_right=0):
    """Each chunk alone: the recurrence starts from zero at the chunk's first (clamped) input frame."""
    w, u = np.asarray(net.params["w"]), np.asarray(net.params["u"])
    num, out = len(feats), []
    for start in range(0, num, chunk):
        end = min(start + chunk, num)
        frames = np.clip(np.arange(start - extra_left, end + extra_right), 0, num - 1)
        h, states = np.zeros(H), []
        for f in frames:
            h = np.tanh(feats[f] @ w + h @ u)
            states.append(h)
        out.extend(states[extra_left : extra_left + end - start])
    return np.array(out)


@pytest.mark.parametrize("chunk,extra", [(3, 0), (5, 2), (1, 1), (50, 0)])
def test_recurrences_restart_at_every_chunk(chunk, extra):
    net = rnn_net()
    feats = rng.standard_normal((17, D)).astype(np.float32)
    options = ComputeOptions(frames_per_chunk=chunk, extra_left_context=extra)
    got = nnet3_compute(net, feats, options)
    np.testing.assert_allclose(got, rnn_reference(net, feats, chunk, extra_left=extra), atol=1e-5)


def test_initial_and_final_extra_context():
    net = rnn_net()
    feats = rng.standard_normal((10, D)).astype(np.float32)
    options = ComputeOptions(frames_per_chunk=4, extra_left_context=2, extra_left_context_initial=0)
    got = nnet3_compute(net, feats, options)
    ref = rnn_reference(net, feats, 4, extra_left=2)
    first = rnn_reference(net, feats, 4, extra_left=0)[:4]
    np.testing.assert_allclose(got[:4], first, atol=1e-5)
    np.testing.assert_allclose(got[4:], ref[4:], atol=1e-5)


@pytest.mark.parametrize("lag", [-1, 1], ids=["forward", "backward"])
def test_subsampled_chunks_of_a_recurrence_are_each_chunk_alone(lag):
    """With --frame-subsampling-factor=3 each chunk outputs every third frame from its first; the recurrence
    runs over every input frame of the chunk, from its first or (backward) its last. A short last chunk is
    padded after its end (forward) or before its start (backward), which changes none of its outputs."""
    net = Network(nets.rnn(Input("input", D), D, H, lag=lag, names=("w", "u"), scale=0.7))
    f, chunk, extra = 3, 12, 2
    w, u = np.asarray(net.params["w"]), np.asarray(net.params["u"])

    def reference(feats: np.ndarray) -> np.ndarray:
        num, out = len(feats), []
        outputs, per_chunk = -(-num // f), chunk // f
        for start in range(0, outputs, per_chunk):
            count = min(per_chunk, outputs - start)
            first = start * f
            frames = np.clip(np.arange(first - extra, first + (count - 1) * f + 1), 0, num - 1)
            h, states = np.zeros(H), []
            for frame in frames if lag < 0 else frames[::-1]:
                h = np.tanh(feats[frame] @ w + h @ u)
                states.append(h)
            states = states if lag < 0 else states[::-1]
            out.extend(states[extra + j * f] for j in range(count))
        return np.array(out)

    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in (1, 5, 14, 40, 61)]
    options = ComputeOptions(frames_per_chunk=chunk, extra_left_context=extra, frame_subsampling_factor=f)
    got = Nnet3Computer(net, options).compute_many(feats)
    for x, g in zip(feats, got, strict=True):
        np.testing.assert_allclose(g, reference(x), atol=1e-5)


def ivector_net():
    x, iv = Input("input", D), Input("ivector", 2)
    return Network(Append(x, ReplaceIndex(iv, "t", 0)) @ Weight(Normal((D + 2, 3), 1.0), name="w"))


def test_ivector_and_online_ivectors():
    net = ivector_net()
    feats = rng.standard_normal((12, D)).astype(np.float32)
    w = np.asarray(net.params["w"])
    ivector = np.array([1.0, -2.0], np.float32)
    got = nnet3_compute(net, feats, ComputeOptions(frames_per_chunk=5), ivector=ivector)
    np.testing.assert_allclose(got, np.concatenate([feats, np.tile(ivector, (12, 1))], 1) @ w, atol=1e-5)
    online = rng.standard_normal((4, 2)).astype(np.float32)  # period 3
    got = nnet3_compute(net, feats, ComputeOptions(frames_per_chunk=5), online_ivectors=online, online_ivector_period=3)
    # Chunks [0, 5), [5, 10), [10, 12): the i-vector of frame first + (last - first) // 2.
    rows = [online[(0 + 4 // 2) // 3]] * 5 + [online[(5 + 4 // 2) // 3]] * 5 + [online[(10 + 1 // 2) // 3]] * 2
    np.testing.assert_allclose(got, np.concatenate([feats, np.array(rows)], 1) @ w, atol=1e-5)


def test_modulus_rounds_the_chunk_size_up():
    from symnet import Round

    x = Input("input", D)
    net = Network(Round(x, 3) @ Weight(Normal((D, 2), 1.0)))
    assert modulus(net) == 3
    assert Nnet3Computer(net, ComputeOptions(frames_per_chunk=4)).frames_per_chunk == 6


def test_bad_feature_dim_is_named():
    with pytest.raises(ShapeError, match="dim 12, but these have dim 5"):
        nnet3_compute(doc_example(), np.zeros((4, 5), np.float32))


# ----- many utterances at once ------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [4, 50])
def test_compute_many_is_each_utterance_alone(chunk):
    """Chunks are independent computations: computed together (one request for a network without
    recurrences, one per chunk shape for a recurrent one) they give each utterance's own outputs."""
    lengths = [1, 6, 9, 23]
    doc, rnn = doc_example(), rnn_net()
    feats = [rng.standard_normal((n, 12)).astype(np.float32) for n in lengths]
    got = Nnet3Computer(doc, ComputeOptions(frames_per_chunk=chunk)).compute_many(feats)
    for f, g in zip(feats, got, strict=True):
        np.testing.assert_allclose(g, doc_reference(doc, f), atol=1e-4)
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]
    got = Nnet3Computer(rnn, ComputeOptions(frames_per_chunk=chunk, extra_left_context=2)).compute_many(feats)
    for f, g in zip(feats, got, strict=True):
        np.testing.assert_allclose(g, rnn_reference(rnn, f, chunk, extra_left=2), atol=1e-5)


def test_compute_many_gives_each_utterance_its_ivector():
    net = ivector_net()
    w = np.asarray(net.params["w"])
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in (3, 7)]
    ivectors = [np.array([1.0, -2.0], np.float32), np.array([0.5, 3.0], np.float32)]
    got = Nnet3Computer(net, ComputeOptions(frames_per_chunk=4)).compute_many(feats, ivectors=ivectors)
    for f, iv, g in zip(feats, ivectors, got, strict=True):
        np.testing.assert_allclose(g, np.concatenate([f, np.tile(iv, (len(f), 1))], 1) @ w, atol=1e-5)
    with pytest.raises(SymnetError, match="2 utterances but 1 ivectors"):
        Nnet3Computer(net).compute_many(feats, ivectors=ivectors[:1])


# ----- networks local in time: whole utterances, not chunks -------------------------------------


def local_net():
    """out(t) = [h(3 floor(t / 3)), h(t + 2)] w2, h(t) = relu([x(t - 2), x(t), x(t + 1)] w1): local in time,
    modulus 3, context (4, 3)."""
    x = Input("input", D)
    h = ReLU(Append(Offset(x, -2), x, Offset(x, 1)) @ Weight(Normal((3 * D, H), 1.0), name="w1"))
    return Network(Append(Round(h, 3), Offset(h, 2)) @ Weight(Normal((2 * H, 5), 1.0), name="w2"))


def local_reference(net, feats):
    """local_net's formula per output frame, input frame numbers clamped into the utterance."""
    w1, w2 = (np.asarray(net.params[k], np.float64) for k in ("w1", "w2"))
    num = len(feats)

    def h(t):
        return np.maximum(np.concatenate([feats[min(max(t + o, 0), num - 1)] for o in (-2, 0, 1)]) @ w1, 0)

    return np.array([np.concatenate([h(t - t % 3), h(t + 2)]) @ w2 for t in range(num)])


@pytest.mark.parametrize("chunk,subsampling", [(4, 1), (50, 1), (50, 3)])
def test_a_network_local_in_time_gives_what_its_chunks_give(chunk, subsampling):
    """Utterances computed whole, in one stream (pieces of LARGE_PIECE frames, then of PIECE), equal the formula
    and nnet3-compute's chunk-by-chunk computation (symnet._src.engine.dense, each chunk on its own), for any
    chunk size and extra context; two programs serve the stream, one piece size each."""
    net = local_net()
    lengths = [1, 5, 40, LARGE_PIECE + 77, PIECE + 9, 7]
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]
    options = ComputeOptions(frames_per_chunk=chunk, extra_left_context=2, frame_subsampling_factor=subsampling)
    computer = Nnet3Computer(net, options)
    assert computer.chunking is None
    with runner.record() as ran:
        got = computer.compute_many(feats)
    assert len(ran.computations) == 2
    for f, g in zip(feats, got, strict=True):
        np.testing.assert_allclose(g, local_reference(net, f)[::subsampling], rtol=1e-4, atol=1e-4)
        size = computer.frames_per_chunk  # rounded up to the modulus, 3
        chunked = dense.compute(net, f[None], frames_per_chunk=size, carry_state=False, extra_left_context=2)
        np.testing.assert_allclose(g, np.asarray(chunked)[0][::subsampling], rtol=1e-5, atol=1e-5)


def if_defined_net():
    x = Input("input", D)
    return Network(Append(x, IfDefined(Offset(x, -3))) @ Weight(Normal((2 * D, 3), 1.0), name="w"))


def test_chunks_are_kept_where_they_change_the_outputs():
    """A recurrence restarts and IfDefined reads zeros at every chunk, and an i-vector is read at the chunk's
    t = 0: those networks are computed chunk by chunk, and the reason names the node."""
    assert "recurrence" in Nnet3Computer(rnn_net()).chunking
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in (PIECE + 9, 17)]
    got = Nnet3Computer(rnn_net(), ComputeOptions(frames_per_chunk=50)).compute_many(feats)
    for f, g in zip(feats, got, strict=True):
        np.testing.assert_allclose(g, rnn_reference(rnn_net(), f, 50), atol=1e-5)
    net = if_defined_net()
    computer = Nnet3Computer(net, ComputeOptions(frames_per_chunk=4))
    assert "IfDefined" in computer.chunking
    w, f = np.asarray(net.params["w"]), feats[1]
    ref = [np.concatenate([f[t], f[t - 3] if t - 3 >= t - t % 4 else np.zeros(D)]) @ w for t in range(len(f))]
    np.testing.assert_allclose(computer(f), np.array(ref), atol=1e-5)
    assert "other than by a fixed offset" in Nnet3Computer(ivector_net()).chunking  # ReplaceIndex(ivector, t, 0)


# ----- exact evaluation --------------------------------------------------------------------------


def test_exact_outputs_are_the_frames_the_input_makes_computable():
    from symnet._src.kaldi.compute.exact import exact_outputs

    net = doc_example()  # context (1, 2)
    feats = [rng.standard_normal((n, 12)).astype(np.float32) for n in (3, 4, 9)]
    short, four, nine = exact_outputs(net, feats)
    assert short["output"][0].tolist() == [] and short["output"][1].shape[0] == 0
    assert four["output"][0].tolist() == [1]
    assert nine["output"][0].tolist() == list(range(1, 7))
    # No padding: the values are the formula's on real frames only (the clamped reference agrees inside).
    np.testing.assert_allclose(nine["output"][1], doc_reference(net, feats[2])[1:7], atol=1e-4)
    # A recurrence starts where its input starts: frame 0, not inside a padding.
    rnn = rnn_net()
    x = rng.standard_normal((7, D)).astype(np.float32)
    ((t, values),) = (r["output"] for r in exact_outputs(rnn, [x]))
    assert t.tolist() == list(range(7))
    np.testing.assert_allclose(values, rnn_reference(rnn, x, 7), atol=1e-5)
    with pytest.raises(SymnetError, match="no output 'bogus'"):
        exact_outputs(net, feats, outputs=["bogus"])


def test_a_binary_matrix_file_is_a_config_matrix(tmp_path):
    """Kaldi's scripts write matrices such as lda.mat in binary (`\\0B` then `FM`)."""
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    header = b"\0BFM \x04" + np.int32(2).tobytes() + b"\x04" + np.int32(3).tobytes()
    (tmp_path / "lda.mat").write_bytes(header + matrix.tobytes())
    config = tmp_path / "net.config"
    config.write_text(
        "input-node name=input dim=2\ncomponent name=lda type=FixedAffineComponent matrix=lda.mat\n"
        "component-node name=lda component=lda input=input\noutput-node name=output input=lda\n"
    )
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)  # Kaldi reads matrix= relative to where it runs
    try:
        net = read_network("net.config")
    finally:
        os.chdir(cwd)
    np.testing.assert_array_equal(net.values["lda.linear_params"], matrix[:, :2])
    np.testing.assert_array_equal(net.values["lda.bias_params"], matrix[:, 2])


# ----- a job: utterances added one at a time ------------------------------------------------------------


def test_a_job_gives_each_output_back_as_soon_as_it_is_computed():
    """A network local in time is one stream over the whole job: `add` gives back the utterances a large piece
    completes, in order and with their keys, before the job ends; the outputs are `compute_many`'s for all the
    utterances at once and the formula's."""
    net = local_net()
    lengths = [700, 1500, 40, 1, LARGE_PIECE + 77, 900, 13, 5]
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]
    computer = Nnet3Computer(net, ComputeOptions(frame_subsampling_factor=3))
    job = computer.job()
    given: list[tuple[str, int]] = []  # (key, utterances added when it came back)
    got = {}
    for i, f in enumerate(feats):
        for key, out in job.add(f"utt{i}", f):
            given.append((key, i + 1))
            got[key] = out
    assert given and given[0] == ("utt0", 5)  # a large piece's frames are there once utt4 is added
    for key, out in job.finish():
        given.append((key, len(feats)))
        got[key] = out
    assert [key for key, _ in given] == [f"utt{i}" for i in range(len(feats))]
    together = computer.compute_many(feats)
    assert all(out.flags.writeable and out.base is None for out in together)  # arrays of their own, not views
    for i, f in enumerate(feats):
        np.testing.assert_array_equal(got[f"utt{i}"], together[i])
        np.testing.assert_allclose(got[f"utt{i}"], local_reference(net, f)[::3], rtol=1e-4, atol=1e-4)
    assert job.finish() == []


def test_a_job_of_a_network_in_chunks_computes_batches_and_names_the_utterance_at_fault():
    """Chunks of many utterances are computed together (a batch at a time): each output is its utterance's
    own, and a bad utterance is named by its key."""
    net = rnn_net()
    feats = [rng.standard_normal((n, D)).astype(np.float32) for n in (30, 1, 77, 12)]
    job = Nnet3Computer(net, ComputeOptions(frames_per_chunk=20)).job()
    done = [pair for i, f in enumerate(feats) for pair in job.add(i, f)] + job.finish()
    assert [key for key, _ in done] == [0, 1, 2, 3]
    for (_, out), f in zip(done, feats, strict=True):
        np.testing.assert_allclose(out, rnn_reference(net, f, 20), atol=1e-5)
    with pytest.raises(ShapeError, match=f"utterance bad: the network expects 'input' features of dim {D}"):
        job.add("bad", np.zeros((4, D + 1), np.float32))
    with pytest.raises(ShapeError, match="utterance empty: features must be a non-empty"):
        job.add("empty", np.zeros((0, D), np.float32))
    online = ivector_net()
    with pytest.raises(SymnetError, match="utterance u: --online-ivectors needs --online-ivector-period > 0"):
        Nnet3Computer(online).job().add("u", feats[0], online_ivectors=np.zeros((3, 2), np.float32))


def test_kaldi_computations_multiply_at_full_float32_unless_a_precision_was_chosen(monkeypatch):
    """nnet3-compute's counterparts and exact evaluation run their programs at `jax.default_matmul_precision
    ("highest")` (Kaldi's float32, not a GPU's TensorFloat-32: symnet._src.kaldi.compute.float32); a precision the
    user chose is kept. Seen where each path hands its request to the engine."""
    seen: list[object] = []

    def spying(fn):
        def spy(*args, **kwargs):
            seen.append(jax.config.jax_default_matmul_precision)
            return fn(*args, **kwargs)

        return spy

    for name in ("run", "run_each", "compute_chunks"):
        monkeypatch.setattr(compute_module, name, spying(getattr(compute_module, name)))
    monkeypatch.setattr(exact_module, "_compute", spying(exact_module._compute))
    feats = rng.standard_normal((23, D)).astype(np.float32)
    Nnet3Computer(doc_example()).compute_many([rng.standard_normal((23, 12)).astype(np.float32)])  # one stream
    job = Nnet3Computer(rnn_net(), ComputeOptions(frames_per_chunk=4)).job()  # chunks: what `symnet compute` runs
    job.add("a", feats)
    job.finish()
    exact_module.exact_outputs(rnn_net(), [feats])
    assert len(seen) >= 3 and set(seen) == {"highest"}
    assert jax.config.jax_default_matmul_precision is None  # as it was, after each call
    seen.clear()
    with jax.default_matmul_precision("tensorfloat32"):
        Nnet3Computer(rnn_net(), ComputeOptions(frames_per_chunk=4)).compute_many([feats])
    assert seen and set(seen) == {"tensorfloat32"}
