"""Decoding and scoring: a beam-search Viterbi decoder over decoding graphs (HCLG, Kaldi's or symnet's own), the
graphs themselves (grammars, ARPA n-gram LMs, the lexicon, HCLG for monophone models, TLG for CTC networks),
and word and sentence error rates as Kaldi's `compute-wer` reports them.

    graph = read_decoding_graph("exp/tri/graph/HCLG.fst", "exp/tri/final.mdl")
    best = decode(graph, loglikes, acoustic_scale=0.1, beam=13.0)   # loglikes [frames, pdfs]
    print(compute_wer(refs, hyps, mode="present"))   # %WER 12.34 [ ... ], %SER ..., as compute-wer prints

    lang = make_lang(parse_lexicon(text), silence_phones=["sil"], optional_silence="sil")
    hclg = make_hclg(lang, arpa_to_fst(parse_arpa(arpa_text), lang.words), transition_model)
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
