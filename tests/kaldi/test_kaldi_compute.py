"""nnet3-compute's chunking, padding and options, against loops written from its source."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import EXAMPLES
from symnet import (
    Append,
    IfDefined,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReplaceIndex,
    ShapeError,
    Tanh,
    Weight,
)
from symnet.kaldi import read_network
from symnet.kaldi.compute import ComputeOptions, Nnet3Computer, modulus, nnet3_compute

rng = np.random.default_rng(0)


def doc_example():
    return read_network(EXAMPLES / "kaldi-doc-example.config", seed=3).network


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
    x = Input("input", D)
    h = Node(
        "h",
        Tanh(
            x @ Weight(Normal((D, H), 0.7), name="w")
            + IfDefined(Offset(Ref("h"), -1)) @ Weight(Normal((H, H), 0.7), name="u")
        ),
    )
    return Network(h)


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
