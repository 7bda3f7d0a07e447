"""Error rates against Kaldi's `compute-wer` (tests/data/kaldi-wer/make.py): its printed totals in each mode,
and each utterance's insertions, deletions and substitutions, which depend on how ties between equally short
alignments are broken; the edit distance against a brute-force search over all alignments."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from symnet.decode import ScoringError, compute_wer, edit_counts, read_text

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-wer"


@pytest.mark.parametrize("mode", ["present", "all"])
def test_totals_print_as_compute_wer_prints_them(mode: str) -> None:
    refs, hyps = read_text(DATA / "ref.txt"), read_text(DATA / "hyp.txt")
    assert str(compute_wer(refs, hyps, mode=mode)) == (DATA / f"{mode}.txt").read_text()


def test_each_utterance_counts_as_kaldi_counts_it() -> None:
    refs, hyps = read_text(DATA / "ref.txt"), read_text(DATA / "hyp.txt")
    for line in (DATA / "per-utterance.txt").read_text().splitlines():
        key, kaldi = line.split(" ", 1)
        ours = str(compute_wer({key: refs[key]}, {key: hyps[key]})).splitlines()[0]
        assert ours == kaldi, key


def brute_force(ref: list[str], hyp: list[str]) -> int:
    """The fewest edits, by trying every way of matching hyp words to ref words in order."""
    best = len(ref) + len(hyp)
    for k in range(min(len(ref), len(hyp)) + 1):
        for rs in itertools.combinations(range(len(ref)), k):
            for hs in itertools.combinations(range(len(hyp)), k):
                subs = sum(ref[r] != hyp[h] for r, h in zip(rs, hs))
                best = min(best, subs + (len(ref) - k) + (len(hyp) - k))
    return best


def test_the_distance_is_the_fewest_edits() -> None:
    words = ["a", "b", "c"]
    for ref_len, hyp_len in itertools.product(range(5), range(5)):
        for ref in itertools.islice(itertools.product(words, repeat=ref_len), 6):
            for hyp in itertools.islice(itertools.product(words, repeat=hyp_len), 6):
                errors, ins, dels, subs = edit_counts(list(ref), list(hyp))
                assert errors == brute_force(list(ref), list(hyp)) == ins + dels + subs
                assert ins - dels == len(hyp) - len(ref)


def test_strict_mode_names_the_missing_utterance(tmp_path: Path) -> None:
    with pytest.raises(ScoringError, match="no hypothesis for utterance 'b'"):
        compute_wer({"a": ["x"], "b": ["y"]}, {"a": ["x"]})
    with pytest.raises(ScoringError, match="mode"):
        compute_wer({}, {}, mode="loose")
    with pytest.raises(ScoringError, match="cannot read"):
        read_text(tmp_path / "missing.txt")
    assert str(compute_wer({}, {})).startswith("%WER -nan [ 0 / 0,")  # as compute-wer prints nothing scored
