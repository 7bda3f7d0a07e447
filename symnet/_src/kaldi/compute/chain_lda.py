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

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .lda import GlibcRand, LdaAccumulation, LdaError, LdaStats, Posteriors
from .lda import rand_prune as prune

__all__ = ["accumulate_chain_lda_stats", "supervision_posteriors"]


#: Egs whose supervision posteriors are computed in one call (one compiled program per padded size).
BATCH = 64


def supervision_posteriors(supervisions: Sequence[Any]) -> list[Posteriors]:
    """The per-frame pdf posteriors of chain supervisions (one sequence each) by their FSTs' own weights (Kaldi's
    LatticeForwardBackward of the FST as a lattice), each frame's pairs sorted by pdf, zeros left out. Computed
    together, the graphs padded to powers of two of states and arcs, so that an archive compiles a few programs."""
    import jax.numpy as jnp

    from ...chain.forward_backward import GraphArrays, stack_graphs
    from ...chain.graph import numerator_graph

    if not supervisions:
        return []
    frames = max(sup.frames_per_sequence for sup in supervisions)
    num_pdfs = supervisions[0].label_dim
    graphs = stack_graphs([numerator_graph(sup.fst, num_pdfs) for sup in supervisions])
    batch, arcs = graphs.src.shape
    states = graphs.log_initial.shape[1]

    def pad(a: Any, size: int, value: float) -> Any:
        return jnp.pad(a, ((0, 0), (0, size - a.shape[1])), constant_values=value)

    s_pad, a_pad = 1 << (states - 1).bit_length(), 1 << (arcs - 1).bit_length()
    padded = GraphArrays(
        pad(graphs.src, a_pad, 0),
        pad(graphs.dst, a_pad, 0),
        pad(graphs.pdf, a_pad, 0),
        pad(graphs.log_prob, a_pad, -jnp.inf),
        pad(graphs.log_initial, s_pad, -jnp.inf),
        pad(graphs.log_final, s_pad, -jnp.inf),
    )
    lengths = jnp.asarray([sup.frames_per_sequence for sup in supervisions])
    _, occupation = _posterior_program()(padded, jnp.zeros((batch, frames, num_pdfs)), lengths)
    occupation = np.asarray(occupation, np.float32)
    return [Posteriors.of(occupation[i, : sup.frames_per_sequence]) for i, sup in enumerate(supervisions)]


@functools.cache
def _posterior_program() -> Callable[..., Any]:
    """The numerators' forward-backward as one jitted function (compiled once per padded shape)."""
    import jax

    from ...chain.forward_backward import forward_backward

    return jax.jit(lambda graphs, outputs, lengths: forward_backward(graphs, outputs, lengths, numerator=True))


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
    from ...core.index import IndexSet
    from ...engine.compiling import compile
    from ...engine.graph import Graph
    from ...engine.request import ComputationRequest
    from ...network import Network

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
    for group in _groups(egs, BATCH):
        for eg in group:
            _check(eg, inputs)
        posteriors = supervision_posteriors([eg.outputs[0].supervision for eg in group])
        for eg, post in zip(group, posteriors):
            out = eg.outputs[0]
            key = b"".join(io.name.encode() + io.indexes.tobytes() for io in eg.inputs) + out.indexes.tobytes()
            if key not in computations:
                request = ComputationRequest(
                    inputs={io.name: IndexSet.of(map(tuple, io.indexes.tolist())) for io in eg.inputs},
                    outputs={"output": IndexSet.of(map(tuple, out.indexes.tolist()))},
                )
                computations[key] = compile(network, request)
            feed = {io.name: np.asarray(io.matrix, np.float32) for io in eg.inputs}
            rows = np.asarray(computations[key](network, feed)["output"], np.float32)
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


def _groups(egs: Iterable[Any], size: int) -> Iterator[list[Any]]:
    group: list[Any] = []
    for eg in egs:
        group.append(eg)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def _check(eg: Any, inputs: set[str]) -> None:
    """LdaError unless the eg is one nnet3-chain-acc-lda-stats takes: one output, `output`, of one sequence, not
    end-to-end, and inputs the network has."""
    where = f"chain eg {eg.key!r}"
    if len(eg.outputs) != 1 or eg.outputs[0].name != "output":
        raise LdaError(f"{where}: expecting one output named 'output', got {[o.name for o in eg.outputs]}")
    sup = eg.outputs[0].supervision
    if sup.num_sequences != 1:
        raise LdaError(f"{where}: {sup.num_sequences} sequences; chain LDA statistics take single egs, not merged")
    if sup.e2e:
        raise LdaError(f"{where}: end-to-end supervision is not supported")
    unknown = sorted({io.name for io in eg.inputs} - inputs)
    if unknown:
        raise LdaError(f"{where}: the network has no input {unknown[0]!r}; it has {sorted(inputs)}")
