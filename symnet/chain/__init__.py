"""Kaldi's chain (LF-MMI) objective in JAX: graphs, FST readers, the forward-backward and the objective.

den = graph_arrays(read_denominator_graph("den.fst", num_pdfs))
num = stack_graphs([numerator_graph(fst, num_pdfs) for fst in supervision_fsts])
result = chain_objective(outputs, den, num, lengths, options=ChainOptions(l2_regularize=5e-5))
loss = -result.total / result.weight

A denominator as Kaldi makes it, without Kaldi: `estimate_phone_lm` (chain-est-phone-lm, exactly) and
`phone_lm_denominator(lm, Topology...)` (chain-make-den-fst's weighted language, monophone, unminimised),
and numerators from phone alignments, `phone_numerator` (chain-get-supervision's, exactly).
symnet's own constructions (not Kaldi's): `alignment_numerator` (from a pdf alignment) and
`denominator_from_alignments` (a pdf bigram); `symnet.train.Chain` trains with any of them in `fit`.
"""

from __future__ import annotations

from .forward_backward import GraphArrays, forward_backward, graph_arrays, stack_graphs
from .fst import Fst, parse_fst_binary, parse_fst_text, read_fst
from .graph import (
    ChainGraph,
    denominator_graph,
    fst_from_arcs,
    initial_probs,
    numerator_graph,
    numerator_graph_from_text,
    read_denominator_graph,
)
from .objective import ChainObjective, ChainOptions, chain_objective, subsample
from .phone_lm import estimate_phone_lm
from .phone_lm_graph import phone_lm_denominator, push_special
from .phone_numerator import normalize_numerator, phone_numerator
from .supervision import alignment_numerator, allowed_pdfs, denominator_from_alignments
from .topology import HmmState, Topology

__all__ = [
    "ChainGraph",
    "ChainObjective",
    "ChainOptions",
    "Fst",
    "GraphArrays",
    "HmmState",
    "Topology",
    "alignment_numerator",
    "allowed_pdfs",
    "chain_objective",
    "denominator_from_alignments",
    "denominator_graph",
    "estimate_phone_lm",
    "forward_backward",
    "fst_from_arcs",
    "graph_arrays",
    "initial_probs",
    "numerator_graph",
    "numerator_graph_from_text",
    "parse_fst_binary",
    "parse_fst_text",
    "phone_lm_denominator",
    "normalize_numerator",
    "phone_numerator",
    "push_special",
    "read_denominator_graph",
    "read_fst",
    "stack_graphs",
    "subsample",
]
