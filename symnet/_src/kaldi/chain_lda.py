"""LDA statistics from chain egs, as Kaldi's `nnet3-chain-acc-lda-stats` accumulates them.

Kaldi's chain recipes estimate the LDA-like input transform from their chain egs (steps/nnet3/chain/train.py,
before the first iteration): the network of init.config is computed at each eg's supervised frames (the
indexes of its `output`, every `frame_subsampling_factor`-th frame) from the eg's inputs, and each such frame
is accumulated with the posteriors of the pdfs the eg's supervision FST allows there as its classes. The
posteriors are those of the FST's own weights (Kaldi converts the FST to a lattice and runs
LatticeForwardBackward: no network outputs, the normalization FST's weights included), which symnet computes
with the chain numerator's forward-backward on outputs of zero. `rand_prune` is Kaldi's --rand-prune
(as `accumulate_lda_stats` prunes). The statistics are `LdaStats`, so `stats.rounded().transform()`
gives what nnet-get-feature-transform writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .lda import GlibcRand, LdaAccumulation, LdaError, LdaStats, Posteriors
from .lda import rand_prune as prune

__all__ = ["accumulate_chain_lda_stats", "supervision_posteriors"]


def supervision_posteriors(fst: Any, num_pdfs: int, frames: int) -> Posteriors:
    """The per-frame pdf posteriors of a chain supervision FST by its own weights (Kaldi's LatticeForwardBackward
    of the FST as a lattice), each frame's pairs sorted by pdf, zeros left out."""
    import jax.numpy as jnp

    from ..chain.forward_backward import forward_backward, stack_graphs
    from ..chain.graph import numerator_graph

    graph = stack_graphs([numerator_graph(fst, num_pdfs)])
    _, occupation = forward_backward(graph, jnp.zeros((1, frames, num_pdfs)), jnp.array([frames]), numerator=True)
    return Posteriors.of(np.asarray(occupation[0], np.float32))


def accumulate_chain_lda_stats(
    network: Any, egs: Iterable[Any], *, rand_prune: float = 0.0, rand: GlibcRand | None = None
) -> LdaAccumulation:
    """nnet3-chain-acc-lda-stats over chain egs (`symnet.kaldi.read_cegs`), in order (see the module docstring).

    `network`: a Network whose output node `output` is the LDA's input (init.config's network); every input of
    an eg must be one of its inputs. Each eg has one output, `output`, with one sequence (as
    nnet3-chain-get-egs writes them; Kaldi refuses merged egs here too); end-to-end egs are refused.
    `rand_prune`: Kaldi's --rand-prune (0: none), drawing from `rand` (default: glibc's rand() from
    seed 1, as Kaldi; Kaldi's compiler draws from the same generator for its self-checks, so with pruning the
    counts match Kaldi's in distribution, not draw for draw)."""
    from ..core.index import IndexSet
    from ..engine.computation import compile
    from ..engine.graph import Graph
    from ..engine.request import ComputationRequest
    from ..network import Network

    if not isinstance(network, Network):
        raise LdaError(f"the network must be a Network, not a {type(network).__name__}")
    if rand_prune < 0:
        raise LdaError(f"--rand-prune must be >= 0, got {rand_prune}")
    graph = Graph(dict(network.structure.outputs))
    inputs = set(graph.inputs)
    if "output" not in graph.outputs:
        raise LdaError(f"the network has no output 'output' (the LDA's input); it has {sorted(graph.outputs)}")
    rng = rand or GlibcRand()
    computations: dict[bytes, Any] = {}
    stats: LdaStats | None = None
    done = frames_done = 0
    for eg in egs:
        where = f"chain eg {eg.key!r}"
        if len(eg.outputs) != 1 or eg.outputs[0].name != "output":
            raise LdaError(f"{where}: expecting one output named 'output', got {[o.name for o in eg.outputs]}")
        out = eg.outputs[0]
        sup = out.supervision
        if sup.num_sequences != 1:
            raise LdaError(f"{where}: {sup.num_sequences} sequences; chain LDA statistics take single egs, not merged")
        if sup.e2e:
            raise LdaError(f"{where}: end-to-end supervision is not supported")
        unknown = sorted({io.name for io in eg.inputs} - inputs)
        if unknown:
            raise LdaError(f"{where}: the network has no input {unknown[0]!r}; it has {sorted(inputs)}")
        key = b"".join(io.name.encode() + io.indexes.tobytes() for io in eg.inputs) + out.indexes.tobytes()
        if key not in computations:
            request = ComputationRequest(
                inputs={io.name: IndexSet.of(map(tuple, io.indexes.tolist())) for io in eg.inputs},
                outputs={"output": IndexSet.of(map(tuple, out.indexes.tolist()))},
            )
            computations[key] = compile(network, request)
        rows = np.asarray(
            computations[key](network, {io.name: np.asarray(io.matrix, np.float32) for io in eg.inputs})["output"],
            np.float32,
        )
        post = supervision_posteriors(sup.fst, sup.label_dim, len(rows))
        if rand_prune > 0:
            post = Posteriors(post.offsets, post.pdfs, prune(post.weights, rand_prune, rng))
        if stats is None:
            stats = LdaStats.empty(rows.shape[1])
        stats.accumulate(rows, post)
        done += 1
        frames_done += len(rows)
    if stats is None:
        raise LdaError("no chain egs: accumulated no statistics")
    return LdaAccumulation(stats, done, frames_done, ())
