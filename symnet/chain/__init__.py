"""Kaldi's chain (LF-MMI) objective in JAX: graphs, FST readers, the forward-backward and the objective.

den = graph_arrays(read_denominator_graph("den.fst", num_pdfs))
num = stack_graphs([numerator_graph(fst, num_pdfs) for fst in supervision_fsts])
result = chain_objective(outputs, den, num, lengths, options=ChainOptions(l2_regularize=5e-5))
loss = -result.total / result.weight
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

__all__ = [
    "ChainGraph",
    "ChainObjective",
    "ChainOptions",
    "Fst",
    "GraphArrays",
    "chain_objective",
    "denominator_graph",
    "forward_backward",
    "fst_from_arcs",
    "graph_arrays",
    "initial_probs",
    "numerator_graph",
    "numerator_graph_from_text",
    "parse_fst_binary",
    "parse_fst_text",
    "read_denominator_graph",
    "read_fst",
    "stack_graphs",
    "subsample",
]
