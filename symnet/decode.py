"""Decoding and scoring: a beam-search Viterbi decoder over decoding graphs (HCLG, Kaldi's or symnet's own), the
graphs themselves (grammars, ARPA n-gram LMs, the lexicon, HCLG for monophone models, TLG for CTC networks),
and word and sentence error rates as Kaldi's `compute-wer` reports them.

    graph = read_decoding_graph("exp/tri/graph/HCLG.fst", "exp/tri/final.mdl")
    best = decode(graph, loglikes, acoustic_scale=0.1, beam=13.0)   # loglikes [frames, pdfs]
    print(compute_wer(refs, hyps, mode="present"))   # %WER 12.34 [ ... ], %SER ..., as compute-wer prints

    lang = make_lang(parse_lexicon(text), silence_phones=["sil"], optional_silence="sil")
    hclg = make_hclg(lang, arpa_to_fst(parse_arpa(arpa_text), lang.words), transition_model)
"""

from symnet._src.decode.decoder import DecodeError, DecodingGraph, Hypothesis, decode, read_decoding_graph
from symnet._src.decode.graphs.arpa import ArpaLm, estimate_arpa, parse_arpa
from symnet._src.decode.graphs.ctc import ctc_token_graph, ctc_transition_pdfs, make_tlg
from symnet._src.decode.graphs.grammar import arpa_to_fst, word_loop
from symnet._src.decode.graphs.hclg import left_to_right_model, make_hclg
from symnet._src.decode.graphs.lexicon import Lang, make_lang, parse_lexicon
from symnet._src.decode.graphs.wfst import GraphBuildError
from symnet._src.decode.wer import ErrorRate, ScoringError, compute_wer, edit_counts, read_text

__all__ = [
    "ArpaLm",
    "DecodeError",
    "DecodingGraph",
    "ErrorRate",
    "GraphBuildError",
    "Hypothesis",
    "Lang",
    "arpa_to_fst",
    "ScoringError",
    "compute_wer",
    "ctc_token_graph",
    "ctc_transition_pdfs",
    "decode",
    "edit_counts",
    "estimate_arpa",
    "left_to_right_model",
    "make_hclg",
    "make_lang",
    "make_tlg",
    "parse_arpa",
    "parse_lexicon",
    "read_decoding_graph",
    "read_text",
    "word_loop",
]
