"""Kaldi's chain (LF-MMI) objective in JAX: graphs, FST readers, the forward-backward and the objective.

den = graph_arrays(read_denominator_graph("den.fst", num_pdfs))
num = stack_graphs([numerator_graph(fst, num_pdfs) for fst in supervision_fsts])
result = chain_objective(outputs, den, num, lengths, options=ChainOptions(l2_regularize=5e-5))
loss = -result.total / result.weight

A denominator as Kaldi makes it, without Kaldi: `estimate_phone_lm` (chain-est-phone-lm, exactly) and
`phone_lm_denominator(lm, Topology...)` (chain-make-den-fst's weighted language, monophone, unminimised),
numerators from phone alignments, `phone_numerator` (chain-get-supervision's, exactly), and each chunk's
numerator cut from its utterance's and normalized, `chunk_numerator` (nnet3-chain-get-egs's, exactly).
symnet's own constructions (not Kaldi's): `alignment_numerator` (from a pdf alignment) and
`denominator_from_alignments` (a pdf bigram); `symnet.train.Chain` trains with any of them in `fit`.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
