"""`symnet._src.kaldi.compute.lda` and `symnet lda`: the LDA-like transform of Kaldi's recipes, against Kaldi's own numbers.

tests/data/lda holds small inputs and what Kaldi's nnet3-acc-lda-stats and nnet-get-feature-transform made of
them (make_fixtures.sh records the commands; the programs are not needed here). The statistics come out equal
to Kaldi's bit for bit; the transforms to float precision (Kaldi does the final SVD and products in float).
A numpy computation of Kaldi's formulas, written independently (a generalized eigenproblem instead of the
Cholesky factor and the SVD), checks the estimation on random statistics.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import shutil

import numpy as np
import pytest
import scipy.linalg

from symnet._src.app.cli import main
from symnet._src.kaldi.compute.lda import (
    GlibcRand,
    LdaError,
    LdaOptions,
    LdaStats,
    Posteriors,
    accumulate_lda_stats,
    parse_lda_stats,
    rand_prune,
    read_lda_stats,
)
from symnet._src.kaldi.text.xconfig import read_xconfig
from symnet._src.kaldi_io.tables import iter_table, read_posteriors, read_table
from symnet.errors import SymnetError
from symnet.kaldi import read_kaldi_array

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "lda"
EPS32 = float(np.finfo(np.float32).eps)

# Kaldi's nnet3 compiler draws from rand() for its random consistency checks (nnet-computation-graph.cc) when it
# compiles the first eg: 3 draws for both networks here, before the first RandPrune. Skipping them makes the
# pruning draws Kaldi's.
COMPILER_DRAWS = 3

# name: (network, targets, rand-prune)
ACCUMULATIONS = {
    "ivector_ali": ("ivector", "ali", 0.0),
    "ivector_post": ("ivector", "post", 0.0),
    "plain_ali": ("plain", "ali", 0.0),
    "plain_post": ("plain", "post", 0.0),
    "ivector_ali_prune4": ("ivector", "ali", 4.0),
    "ivector_post_prune4": ("ivector", "post", 4.0),
    "plain_post_prune05": ("plain", "post", 0.5),
}
# Kaldi matrix: (its statistics, nnet-get-feature-transform's options)
TRANSFORMS = {
    **{name: (name, LdaOptions()) for name in ACCUMULATIONS},
    "ivector_post_lda": ("ivector_post", LdaOptions(within_class_factor=1.0, max_singular_value=0)),
    "ivector_post_options": (
        "ivector_post",
        LdaOptions(dim=10, within_class_factor=0.5, max_singular_value=2, remove_offset=False),
    ),
    "plain_ali_dim12": ("plain_ali", LdaOptions(dim=12, within_class_factor=0.01)),
}


def _network(name):
    return read_xconfig(DATA / f"{name}.xconfig").network(which="init")


def _accumulate(name, rand=None):
    net, targets, prune = ACCUMULATIONS[name]
    table = read_table(f"ark:{DATA}/ali.ark") if targets == "ali" else read_posteriors(f"ark:{DATA}/post.txt")
    ivectors = (
        {"online_ivectors": read_table(f"ark:{DATA}/online_ivectors.ark"), "online_ivector_period": 10}
        if net == "ivector"
        else {}
    )
    if rand is None:
        rand = GlibcRand()
        rand.rand(COMPILER_DRAWS if prune else 0)
    return accumulate_lda_stats(
        _network(net), iter_table(f"ark:{DATA}/feats.ark"), table, rand_prune=prune, rand=rand, **ivectors
    )


def _tolerance(kaldi):
    """A few float roundings of the matrix's size: Kaldi's last steps (the SVD that caps the singular values,
    the offset) are in float."""
    return 8 * EPS32 * max(1.0, float(np.linalg.norm(kaldi.astype(np.float64), 2)))


# ----- glibc's rand() and RandPrune ------------------------------------------------------------


def test_glibc_rand_is_glibcs():
    assert GlibcRand().rand(5).tolist() == [1804289383, 846930886, 1681692777, 1714636915, 1957747793]
    a, b = GlibcRand(7), GlibcRand(7)
    assert np.array_equal(np.concatenate([a.rand(1), a.rand(2000), a.rand(3000)]), b.rand(5001))  # blocks join up
    libc_name = ctypes.util.find_library("c")
    if libc_name is None or "libc.so.6" not in libc_name:
        pytest.skip("not glibc")
    libc = ctypes.CDLL(libc_name)
    for seed in (1, 0, 12345, 2**31 + 5):
        libc.srand(ctypes.c_uint(seed))
        want = np.array([libc.rand() for _ in range(3000)], dtype=np.uint32)
        assert np.array_equal(GlibcRand(seed).rand(3000), want), seed


def test_rand_prune_is_kaldis():
    weights = np.array([0.0, 1.0, 5.0, -0.5, 4.0, 2.0, -7.0], dtype=np.float32)
    rand = GlibcRand()
    draws = GlibcRand().uniform(3)  # for 1.0, -0.5 and 2.0: the others need none
    out = rand_prune(weights, 4.0, rand)
    want = weights.copy()
    for i, u in zip((1, 3, 5), draws):
        want[i] = np.copysign(4.0, weights[i]) if u <= abs(weights[i]) / np.float32(4.0) else 0.0
    assert np.array_equal(out, want)
    assert np.array_equal(rand.rand(1), GlibcRand().rand(4)[3:])  # exactly three draws were taken
    assert np.array_equal(rand_prune(weights, 0.0, GlibcRand()), weights)
    big = rand_prune(np.full(200_000, 0.5, np.float32), 2.0, GlibcRand())
    assert set(np.unique(big).tolist()) == {0.0, 2.0} and abs(big.mean() - 0.5) < 0.01  # keeps the expectation
    with pytest.raises(LdaError):
        rand_prune(weights, -1.0, GlibcRand())


def test_posteriors_are_what_the_egs_hold():
    post = Posteriors.of([[(3, 0.25), (1, 0.5), (3, 0.25)], [], [(2, 0.0), (0, 1.0)], [(5, 0.5), (5, -0.5)]])
    sparse = post.sparse()
    assert sparse.offsets.tolist() == [0, 2, 2, 3, 3]
    assert sparse.pdfs.tolist() == [1, 3, 0] and sparse.weights.tolist() == [0.5, 0.5, 1.0]
    ali = Posteriors.of(np.array([4, 4, 1], np.int32))
    assert ali.pdfs.tolist() == [4, 4, 1] and ali.weights.tolist() == [1, 1, 1] and len(ali) == 3
    dense = Posteriors.of(np.array([[0, 0.5, 0.5], [1, 0, 0]], np.float32))
    assert dense.offsets.tolist() == [0, 2, 3] and dense.pdfs.tolist() == [1, 2, 0]
    assert len(post.head(2)) == 2 and post.head(2).pdfs.tolist() == [3, 1, 3]
    with pytest.raises(LdaError, match="integer"):
        Posteriors.of(np.array([0.5, 1.0]))
    with pytest.raises(LdaError, match="pdf -1"):
        Posteriors.of([[(-1, 1.0)]])


# ----- against Kaldi ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ACCUMULATIONS))
def test_statistics_are_kaldis(name):
    kaldi = read_lda_stats(DATA / f"{name}.acc")
    result = _accumulate(name)
    assert result.utterances == 6 and result.frames == 384 and not result.skipped
    ours = result.stats.rounded()
    assert np.array_equal(ours.counts, kaldi.counts)
    assert np.array_equal(ours.sums, kaldi.sums)
    assert np.array_equal(ours.second, kaldi.second)
    assert result.stats.to_kaldi() == (DATA / f"{name}.acc").read_bytes()


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transforms_are_kaldis(name):
    stats_name, options = TRANSFORMS[name]
    kaldi = read_kaldi_array(DATA / f"{name}.mat")
    from_kaldi_stats = read_lda_stats(DATA / f"{stats_name}.acc").transform(options).matrix
    ours = _accumulate(stats_name).stats.rounded().transform(options).matrix
    assert ours.shape == kaldi.shape and ours.dtype == np.float32
    assert np.array_equal(ours, from_kaldi_stats)
    assert np.abs(ours - kaldi).max() <= _tolerance(kaldi), np.abs(ours - kaldi).max()


def test_plain_lda_is_kaldis_exactly():
    """Without the float steps (no within-class factor, no cap, no offset) the matrix is Kaldi's bit for bit:
    the double-precision part, the eigenvectors' signs included, is computed as Kaldi computes it."""
    stats = read_lda_stats(DATA / "ivector_post.acc")
    kaldi = read_kaldi_array(DATA / "ivector_post_lda.mat")
    plain = stats.transform(LdaOptions(within_class_factor=1.0, max_singular_value=0, remove_offset=False)).matrix
    assert np.array_equal(plain, kaldi[:, :-1])


def test_pruning_without_the_compilers_draws():
    """Without Kaldi's compiler draws the pruning keeps other weights: the counts are Kaldi's only in law."""
    kaldi = read_lda_stats(DATA / "ivector_ali_prune4.acc")
    ours = _accumulate("ivector_ali_prune4", rand=GlibcRand()).stats.rounded()
    assert not np.array_equal(ours.counts, kaldi.counts)
    assert set(np.unique(ours.counts % 4).tolist()) == {0.0}  # each frame's weight 1 became 4 or 0


# ----- the estimation against an independent numpy computation --------------------------------


def _reference(counts, sums, second, options):
    """Kaldi's FeatureTransformEstimate, from its formulas: a generalized symmetric eigenproblem B v = d W v."""
    n = counts.sum()
    mean = sums.sum(0) / n
    total = second / n - np.outer(mean, mean)
    between = sum(c * np.outer(s / c, s / c) for c, s in zip(counts, sums) if c) / n - np.outer(mean, mean)
    within = total - between
    try:
        np.linalg.cholesky(within)
    except np.linalg.LinAlgError:
        within = within + np.float32(1e-3 * np.trace(within) / len(within)) * np.eye(len(within))
    d, v = scipy.linalg.eigh(between, within)  # v.T W v = I
    order = np.argsort(-d)
    d, rows = d[order], v[:, order].T
    dim = options.dim if options.dim > 0 else len(mean)
    m = rows[:dim] * np.sqrt((options.within_class_factor + d[:dim]) / (1 + d[:dim]))[:, None]
    if options.max_singular_value > 0:
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        m = u @ np.diag(np.minimum(s, options.max_singular_value)) @ vt
    if options.remove_offset:
        m = np.concatenate([m, -(m @ mean)[:, None]], axis=1)
    return m, d


def _random_stats(rng, dim, classes, frames, rank=None):
    means = rng.normal(0, 1, (classes, dim))
    labels = rng.integers(classes, size=frames)
    mix = rng.normal(0, 1, (dim, dim)) * rng.uniform(0.05, 1.0, dim)
    x = means[labels] + rng.normal(0, 1, (frames, dim)) @ mix
    if rank is not None:  # dims that repeat others: a singular within-class covariance
        x[:, rank:] = x[:, :1]
    stats = LdaStats.empty(dim)
    weights = rng.uniform(0.2, 1.0, frames).astype(np.float32)
    stats.accumulate(x.astype(np.float32), Posteriors(np.arange(frames + 1), labels, weights))
    return stats


@pytest.mark.parametrize(
    "options",
    [
        LdaOptions(),
        LdaOptions(within_class_factor=1.0, max_singular_value=0, remove_offset=False),
        LdaOptions(dim=4, within_class_factor=0.2, max_singular_value=1.5),
        LdaOptions(dim=7, max_singular_value=0, remove_offset=True),
    ],
)
def test_estimation_against_numpy(options):
    rng = np.random.default_rng(3)
    stats = _random_stats(rng, dim=9, classes=20, frames=600)
    ours = stats.transform(options)
    want, d = _reference(stats.counts, stats.sums, stats.second, options)
    assert np.allclose(ours.singular_values, d, rtol=1e-9, atol=1e-12)
    signs = np.sign(np.sum(ours.matrix[:, :9] * want[:, :9], axis=1))  # eigenvectors are defined up to sign
    assert np.abs(ours.matrix - signs[:, None] * want).max() < 2e-5 * np.abs(want).max()
    assert ours.count == pytest.approx(stats.counts.sum())


def test_singular_within_class_covariance_is_smoothed_as_kaldi_does():
    rng = np.random.default_rng(4)
    stats = _random_stats(rng, dim=6, classes=15, frames=400, rank=4)
    ours = stats.transform(LdaOptions(within_class_factor=1.0, max_singular_value=0))
    assert ours.smoothed > 0
    want, d = _reference(
        stats.counts, stats.sums, stats.second, LdaOptions(within_class_factor=1.0, max_singular_value=0)
    )
    assert np.allclose(ours.singular_values, d, rtol=1e-6, atol=1e-9)


def test_stats_files_round_trip(tmp_path):
    stats = _random_stats(np.random.default_rng(5), dim=5, classes=7, frames=100)
    for binary in (True, False):
        data = stats.to_kaldi(binary)
        back = parse_lda_stats(data)
        if binary:
            rounded = stats.rounded()
            assert np.array_equal(back.counts, rounded.counts) and np.array_equal(back.sums, rounded.sums)
            assert np.array_equal(back.second, rounded.second)
            assert back.to_kaldi() == data
        else:  # text has 7 digits
            assert np.allclose(back.second, stats.second, rtol=1e-5, atol=1e-4)
    both = parse_lda_stats(stats.to_kaldi())
    both.add(parse_lda_stats(stats.to_kaldi()))
    assert np.allclose(both.counts, 2 * stats.counts)
    with pytest.raises(SymnetError):
        parse_lda_stats(b"\0B<LDAACCS> <VECSIZE> \x04\x05\x00\x00\x00 <NUMCLASSES> \x04\x07\x00\x00\x00 <BAD> ")
    with pytest.raises(LdaError, match="no statistics"):
        LdaStats.empty(3).transform()
    with pytest.raises(LdaError, match="more than the input dim"):
        stats.transform(LdaOptions(dim=6))


def test_utterances_are_skipped_as_nnet3_get_egs_does():
    feats = dict(iter_table(f"ark:{DATA}/feats.ark"))
    ali = dict(read_table(f"ark:{DATA}/ali.ark"))
    del ali["utt2"]
    ali["utt3"] = ali["utt3"][:-5]  # more than 2 frames short
    ali["utt4"] = ali["utt4"][:-2]  # 2 short: its last frames have no target
    with pytest.warns(UserWarning) as caught:
        result = accumulate_lda_stats(_network("plain"), feats, ali)
    assert [utt for utt, _ in result.skipped] == ["utt2", "utt3"]
    assert {str(w.message).split(":")[0] for w in caught} == {"utterance utt2", "utterance utt3"}
    assert result.utterances == 4 and result.stats.count == sum(len(ali[u]) for u in ("utt1", "utt4", "utt5", "utt6"))
    with pytest.raises(LdaError, match="accumulated no statistics"), pytest.warns(UserWarning, match="no targets"):
        accumulate_lda_stats(_network("plain"), feats, {})


def test_per_utterance_ivectors_are_constant_online_ones():
    """--ivectors gives what online i-vectors constant in each utterance give (the Kaldi case)."""
    per_utterance = read_table(f"ark:{DATA}/ivectors.ark")
    a = accumulate_lda_stats(
        _network("ivector"),
        iter_table(f"ark:{DATA}/feats.ark"),
        read_table(f"ark,t:{DATA}/ali.txt"),  # text alignments read as the binary ones
        ivectors=per_utterance,
    )
    assert np.array_equal(a.stats.rounded().second, read_lda_stats(DATA / "ivector_ali.acc").second)


# ----- the command line -------------------------------------------------------------------------


def run(argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


ONLINE = ["--online-ivectors", f"ark:{DATA}/online_ivectors.ark", "--online-ivector-period", "10"]


def test_cli_writes_kaldis_matrix_and_stats(tmp_path, capsys):
    out, acc = tmp_path / "lda.mat", tmp_path / "lda.acc"
    argv = ["lda", *ONLINE, "--alignments", f"ark:{DATA}/ali.ark", "--write-stats", acc]
    status, stdout, err = run([*argv, DATA / "ivector.xconfig", f"ark:{DATA}/feats.ark", out], capsys)
    assert status == 0, err
    assert "6 utterances (0 skipped): soft frame count 384, dim 18, 24 classes" in stdout
    assert "18 x 19, 1 singular values capped at 5" in stdout
    kaldi = read_kaldi_array(DATA / "ivector_ali.mat")
    assert np.abs(read_kaldi_array(out) - kaldi).max() <= _tolerance(kaldi)
    assert out.read_bytes()[:2] == b"\0B" and acc.read_bytes() == (DATA / "ivector_ali.acc").read_bytes()
    # init.config itself, per-utterance i-vectors and binary posteriors give the same; text output
    init = tmp_path / "init.config"
    shutil.copy(DATA / "ivector.init.config", init)
    text = tmp_path / "lda.txt"
    argv = ["lda", "--ivectors", f"ark:{DATA}/ivectors.ark", "--posteriors", f"ark:{DATA}/post.ark", "--binary=false"]
    argv += ["--dim=10", "--within-class-factor=0.5", "--max-singular-value=2", "--remove-offset=false"]
    status, _, err = run([*argv, init, f"ark:{DATA}/feats.ark", text], capsys)
    assert status == 0, err
    kaldi = read_kaldi_array(DATA / "ivector_post_options.mat")
    assert not text.read_bytes().startswith(b"\0B") and text.read_text().startswith(" [\n")
    assert np.abs(read_kaldi_array(text) - kaldi).max() <= 10 * _tolerance(kaldi)  # text: 7 digits


def test_cli_rand_prune_draws_from_seed_1(tmp_path, capsys):
    acc = tmp_path / "lda.acc"
    argv = ["lda", "--rand-prune=0.5", "--posteriors", f"ark:{DATA}/post.txt", "--write-stats", acc]
    status, _, err = run([*argv, DATA / "plain.xconfig", f"ark:{DATA}/feats.ark", tmp_path / "lda.mat"], capsys)
    assert status == 0, err
    assert (
        parse_lda_stats(acc.read_bytes()).counts.tolist()
        == _accumulate("plain_post_prune05", rand=GlibcRand()).stats.rounded().counts.tolist()
    )


def test_cli_errors(tmp_path, capsys):
    feats, out = f"ark:{DATA}/feats.ark", tmp_path / "lda.mat"
    ali = ["--alignments", f"ark:{DATA}/ali.ark"]
    status, _, err = run(["lda", DATA / "plain.xconfig", feats, out], capsys)
    assert status == 2 and "--posteriors RSPECIFIER or --alignments RSPECIFIER" in err
    status, _, err = run(["lda", *ali, "--write-cholesky=c.tp", DATA / "plain.xconfig", feats, out], capsys)
    assert status == 2 and "--write-cholesky is not supported" in err
    with pytest.raises(SystemExit):
        main(["lda", *ali, "--no-such-option=1", str(DATA / "plain.xconfig"), feats, str(out)])
    assert "--no-such-option" in capsys.readouterr().err
    no_lda = tmp_path / "no-lda.xconfig"
    no_lda.write_text("input dim=5 name=input\nrelu-layer name=r dim=4\noutput-layer name=output dim=3\n")
    status, _, err = run(["lda", *ali, no_lda, feats, out], capsys)
    assert status == 1 and "no LDA-like layer" in err
    status, _, err = run(["lda", "--posteriors", f"ark:{DATA}/ali.ark", DATA / "plain.xconfig", feats, out], capsys)
    assert status == 1 and "an alignment, not posteriors?" in err and not out.exists()
    status, _, err = run(["lda", "--alignments", f"ark,t:{DATA}/post.txt", DATA / "plain.xconfig", feats, out], capsys)
    assert status == 1 and "alignments" in err and "cannot read it" in err and not out.exists()
    status, _, err = run(["lda", *ali, "--dim=40", DATA / "plain.xconfig", feats, out], capsys)
    assert status == 1 and "more than the input dim 15" in err and not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["no-lda.xconfig"]
