"""Chunks cut as Kaldi's `nnet3-get-egs` cuts them, against the egs it wrote (tests/data/kaldi-egs-split/make.py):
the same utterance-length-to-splits table as Kaldi's log, the chunks Kaldi chose allowed by it and placed by its
rules, and at those chunks the same input rows, targets and output weights as Kaldi's egs."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from helpers import fixture_script
from symnet._src.kaldi_io.egs import read_egs
from symnet._src.kaldi_io.tables import read_table
from symnet._src.train.egs_split import KaldiSplitter, _uniform, cut_kaldi_chunk, placed_chunks

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-egs-split"
CASES = fixture_script(DATA).CASES


def options(name: str) -> dict[str, str]:
    return dict(flag.removeprefix("--").split("=") for flag in CASES[name])


def splitter(name: str) -> KaldiSplitter:
    o = options(name)
    return KaldiSplitter(o["num-frames"], int(o.get("num-frames-overlap", 0)))


def kaldi_table(name: str) -> dict[int, list[tuple[int, ...]]]:
    """Kaldi's utterance-length-to-splits map, from its --verbose=3 log: `5=(5), 7=(5,5/6), ...`."""
    text = (DATA / f"{name}.splits").read_text()
    return {
        int(length): [tuple(int(v) for v in split.split(",")) for split in splits.split("/")]
        for length, splits in re.findall(r"(\d+)=\(([^)]*)\)", text)
    }


def kaldi_chunks(name: str, run: int) -> dict[str, list[tuple[int, int, object]]]:
    """Per utterance, Kaldi's egs as (first frame, size, eg), in time order."""
    out: dict[str, list] = defaultdict(list)
    for eg in read_egs(str(DATA / f"{name}.{run}.egs")):
        utt, first = eg.key.rsplit("-", 1)
        out[utt].append((int(first), len(eg["output"].indexes), eg))
    return {utt: sorted(chunks, key=lambda c: c[0]) for utt, chunks in out.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_the_splits_table_is_kaldis(name: str) -> None:
    ours = splitter(name)
    kaldi = kaldi_table(name)
    mine = {u: splits for u, splits in enumerate(ours.splits_for_length) if splits}
    assert mine == kaldi


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("run", [1, 2, 3])
def test_kaldis_chunks_follow_the_rules_and_its_egs_are_ours(name: str, run: int) -> None:
    split = splitter(name)
    o = options(name)
    left, right = int(o["left-context"]), int(o["right-context"])
    feats, ali = read_table(f"ark:{DATA / 'feats.ark'}"), read_table(f"ark:{DATA / 'ali.ark'}")
    chunks = kaldi_chunks(name, run)
    for utt in feats:
        length = len(feats[utt])
        expected = split.chunks(length, np.random.default_rng(0))
        if not expected:  # shorter than every size: Kaldi makes no egs of it either
            assert utt not in chunks
            continue
        placed = [(first, size) for first, size, _ in chunks[utt]]
        sizes = [size for _, size in placed]
        # the sizes: one of the table's splits (with principal repeats for long utterances), sorted either way
        reduced, repeats = length, 0
        while reduced > split.max_length:
            reduced -= split.num_frames[0] - split.overlap
            repeats += 1
        allowed = {tuple(sorted(list(s) + [split.num_frames[0]] * repeats)) for s in split.splits_for_length[reduced]}
        assert tuple(sorted(sizes)) in allowed, (utt, sizes)
        assert sizes in (sorted(sizes), sorted(sizes, reverse=True))
        # the placement: overlaps as Kaldi shares them out, or gaps spread evenly (in Kaldi's random order)
        gaps = [placed[0][0]] + [b[0] - (a[0] + a[1]) for a, b in zip(placed, placed[1:])]
        if sum(sizes) > length:
            assert gaps == split._gaps(length, sizes, np.random.default_rng(0))
        else:
            tail = length - (placed[-1][0] + placed[-1][1])
            spread = sorted(_uniform(length - sum(sizes), len(sizes) + 1, np.random.default_rng(0)))
            assert sorted(gaps + [tail]) == spread
        # the egs: input rows, targets and output weights at Kaldi's chunks
        for chunk, (_, _, eg) in zip(placed_chunks(length, placed), chunks[utt]):
            x, y, w, end = cut_kaldi_chunk(feats[utt], ali[utt], chunk, left=left, right=right)
            assert end is None
            np.testing.assert_array_equal(x, eg["input"].matrix)
            assert eg["input"].indexes[0, 1] == -left
            dense = eg["output"].matrix
            np.testing.assert_allclose(dense.sum(axis=1), w, rtol=1e-6)
            labelled = w > 0
            np.testing.assert_array_equal(np.argmax(dense, axis=1)[labelled], y[labelled])


def test_output_weights_share_overlapping_frames() -> None:
    chunks = placed_chunks(13, [(0, 8), (7, 6)])
    np.testing.assert_allclose(chunks[0].output_weights, [1] * 7 + [0.5])
    np.testing.assert_allclose(chunks[1].output_weights, [0.5] + [1] * 5)


def test_long_utterances_take_principal_chunks_and_cover_the_utterance() -> None:
    split = KaldiSplitter("150,110,100")
    rng = np.random.default_rng(3)
    for length in (99, 100, 260, 333, 1000, 4321):
        chunks = split.chunks(length, rng)
        if length < 100:
            assert chunks == []
            continue
        covered = np.zeros(length, dtype=bool)
        for c in chunks:
            assert c.num_frames in (150, 110, 100) and 0 <= c.first_frame and c.first_frame + c.num_frames <= length
            covered[c.first_frame : c.first_frame + c.num_frames] = True
        assert covered.mean() > 0.9
        assert sum(c.num_frames == 150 for c in chunks) >= len(chunks) - 2
