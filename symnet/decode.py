"""Scoring recognisers: word and sentence error rates as Kaldi's `compute-wer` reports them.

refs, hyps = read_text("data/test/text"), read_text("exp/decode/hyp.txt")
print(compute_wer(refs, hyps, mode="present"))   # %WER 12.34 [ ... ], %SER ..., as compute-wer prints
"""

from symnet._src.decode.wer import ErrorRate, ScoringError, compute_wer, edit_counts, read_text

__all__ = ["ErrorRate", "ScoringError", "compute_wer", "edit_counts", "read_text"]
