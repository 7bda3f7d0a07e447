"""`fit`'s data: chunks from what the user gives, and the checks that the data fits the network and objective."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import ShapeError, TrainingError
from ..components import set_test_mode
from ..core.index import IndexSet
from ..engine.compiling import compile
from ..engine.graph import Graph
from ..engine.request import ComputationRequest
from .egs_split import KaldiChunk, cut_kaldi_chunk
from .examples import Chunks, make_chunks, stack_chunks
from .objectives import Objective
from .streams import Corpus

__all__ = ["as_chunks", "check_context", "check_data", "output_dim", "used_widths"]


def as_chunks(data: Any, network: Any, chunk: int, output: str | Sequence[str]) -> Chunks:
    """Chunks from a `Chunks`, a `symnet.datasets.Dataset`, or a `(features, targets)` pair of lists, with the
    input context `output` needs (of several outputs, the widest on each side); of a `Corpus`, the chunks of its
    first sequence (the corpus itself is read as training goes: `symnet._src.train.minibatches`)."""
    if isinstance(data, Chunks):
        return data
    names = (output,) if isinstance(output, str) else output
    # An output the network does not have is check_data's error to report, by name.
    contexts = [network.context(name) for name in names if name == names[0] or name in network.structure.outputs]
    left, right = max(c[0] for c in contexts), max(c[1] for c in contexts)
    if isinstance(data, Corpus):  # its first readable sequence: what the checks before training look at
        if data.precut:  # an example as it was cut, with its own context
            return data.stack([data.sample()])
        features, targets = data.sample()
        if data.kaldi_sizes is not None:  # a chunk as nnet3-get-egs cuts them: no sequence end
            whole = KaldiChunk(0, chunk, np.ones(chunk, np.float32))
            return stack_chunks([cut_kaldi_chunk(features, targets, whole, left=left, right=right)], left, right)
        return make_chunks([features], [targets], chunk=chunk, left=left, right=right)
    if hasattr(data, "features") and hasattr(data, "labels"):
        features, targets = data.features, data.labels
    elif isinstance(data, tuple) and len(data) == 2:
        features, targets = data
    else:
        hint = " (read Kaldi archives with symnet.train.read_kaldi_data)" if isinstance(data, str) else ""
        raise ShapeError(
            f"cannot train on {type(data).__name__}: give a Dataset, Chunks, (features, targets) or a Corpus "
            "(symnet.train.stream_sequences, stream_kaldi_data)" + hint
        )
    return make_chunks(features, targets, chunk=chunk, left=left, right=right)


def used_widths(chunks: Chunks, widths: Sequence[int]) -> tuple[int, ...]:
    """The widths minibatches of `chunks` are cut down to: those of `widths` below `chunks.chunk`, and it."""
    return tuple(sorted({int(w) for w in widths if w < chunks.chunk} | {chunks.chunk}))


def check_data(
    network: Any,
    chunks: Chunks,
    objective: Objective,
    input: str,
    output: str,
    what: str = "training data",
    like: Chunks | None = None,
) -> None:
    """A TrainingError or ShapeError unless `chunks` fit the network's `input` and `output` and `objective`'s
    targets (`what`: the data, for the message; `like`: the training chunks validation chunks must match)."""
    graph = Graph(dict(network.structure.outputs))
    if output not in graph.outputs:
        raise TrainingError(f"the network has no output {output!r}; it has {list(graph.outputs)}")
    if input not in graph.inputs:
        raise TrainingError(f"the network has no input {input!r}; it has {list(graph.inputs)}")
    if like is not None and (chunks.chunk, chunks.left, chunks.right) != (like.chunk, like.left, like.right):
        raise ShapeError(
            f"{what}: chunks of {chunks.chunk} frames with context ({chunks.left}, {chunks.right}), "
            f"but the training chunks have {like.chunk} frames with context ({like.left}, {like.right})"
        )
    check_context(network, chunks, output, what)
    dim = graph.input_dims.get(input)
    if dim is not None and chunks.features.shape[-1] != dim:
        raise ShapeError(
            f"{what}: the features have dim {chunks.features.shape[-1]}, but input {input!r} has dim {dim}"
        )
    out_dim = output_dim(network, chunks, input, output)
    objective.check(chunks.targets, out_dim, what, output)
    for extra in objective.extra_outputs:
        if extra not in graph.outputs:
            raise TrainingError(
                f"the {objective.name!r} objective reads output {extra!r}, which the network does not have; "
                f"it has {list(graph.outputs)}"
            )
        check_context(network, chunks, extra, what)
        if (extra_dim := output_dim(network, chunks, input, extra)) != out_dim:
            raise ShapeError(
                f"the {objective.name!r} objective reads output {extra!r} of dim {extra_dim} beside output "
                f"{output!r} of dim {out_dim}: they must have one dim (one value per pdf)"
            )


def check_context(network: Any, chunks: Chunks, output: str, what: str) -> None:
    """ShapeError unless the chunks have the input context `output` needs."""
    left, right = network.context(output)
    if chunks.left < left or chunks.right < right:
        raise ShapeError(
            f"{what}: chunks with context ({chunks.left}, {chunks.right}), but output {output!r} needs "
            f"({left}, {right}) frames of input context"
        )


def output_dim(network: Any, chunks: Chunks, input: str, output: str) -> int:
    network = set_test_mode(network)  # the same dims, and no randomness needed
    request = ComputationRequest(
        inputs={input: IndexSet.range(n=1, t=(-chunks.left, 1 + chunks.right))},
        outputs={output: IndexSet.range(n=1, t=1)},
    )
    computation = compile(network, request)
    shape = jax.eval_shape(
        lambda n, x: computation(n, {input: x})[output],
        network,
        jax.ShapeDtypeStruct((1 + chunks.left + chunks.right, chunks.features.shape[-1]), jnp.float32),
    )
    return int(shape.shape[-1])
