"""Decoding and scoring: a beam-search Viterbi decoder over Kaldi's decoding graphs (HCLG), and word and
sentence error rates as Kaldi's `compute-wer` reports them.

    graph = read_decoding_graph("exp/tri/graph/HCLG.fst", "exp/tri/final.mdl")
    best = decode(graph, loglikes, acoustic_scale=0.1, beam=13.0)   # loglikes [frames, pdfs]
    print(compute_wer(refs, hyps, mode="present"))   # %WER 12.34 [ ... ], %SER ..., as compute-wer prints
"""

from symnet._src.decode.decoder import DecodeError, DecodingGraph, Hypothesis, decode, read_decoding_graph
from symnet._src.decode.wer import ErrorRate, ScoringError, compute_wer, read_text
from symnet._src.levenshtein import edit_counts

__all__ = [
    "DecodeError",
    "DecodingGraph",
    "ErrorRate",
    "Hypothesis",
    "ScoringError",
    "compute_wer",
    "decode",
    "edit_counts",
    "read_decoding_graph",
    "read_text",
]
