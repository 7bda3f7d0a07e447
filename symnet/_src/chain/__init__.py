"""The implementation behind `symnet.chain` (private: import its names from `symnet.chain`)."""

from __future__ import annotations

from ..kaldi_io.fst import Fst, parse_fst_binary, parse_fst_text, read_fst
from .chunk_numerator import chunk_numerator, state_frames
from .den_minimize import push_special
from .forward_backward import GraphArrays, forward_backward, graph_arrays, stack_graphs
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
from .phone_lm_graph import phone_lm_denominator
from .phone_numerator import phone_numerator
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
    "chunk_numerator",
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
    "phone_numerator",
    "push_special",
    "read_denominator_graph",
    "read_fst",
    "stack_graphs",
    "state_frames",
    "subsample",
]
