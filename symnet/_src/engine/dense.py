"""Dense convenience: run a network on `[N, T, D]` arrays (or ragged sequences) without writing requests.

`context(network)` is the (left, right) frames an output frame needs, as
nnet3-info's left-context/right-context. `compute(network, x)` follows
nnet3-compute's edge convention (`mode='same'`): every sequence is padded with
copies of its first and last frames so that every input frame gets an output;
`mode='valid'` returns only the frames computable without padding.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError, ShapeError
from ..core.precision import Precision, get_precision
from ..core.structure import NetworkLike
from .buckets import batches, bucket_length, padding_side
from .chunks import compute_chunks, padded_chunk
from .context import context as context  # re-exported: `dense.context(network)` is part of this module's API
from .context import modulus as graph_modulus
from .context import output_name
from .graph import Graph
from .inspect import matrixwise_node
from .recurrence import Lowering, check_lowering
from .runner import Block, Ends, clamped, run
from .streaming import Source, State, chunk_runner, concatenate

__all__ = ["compute", "compute_traced"]


def compute(
    network: NetworkLike,
    x: Any,
    *,
    mode: str = "same",
    output: str | None = None,
    frames_per_chunk: int | None = None,
    carry_state: bool = True,
    extra_left_context: int = 0,
    extra_right_context: int = 0,
    lowering: Lowering = "auto",
    precision: str | Precision | None = None,
) -> Any:
    """Outputs for `[N, T, D]` input (or a list of `[T_i, D]` sequences, or a dict of such per input).

    `mode='same'` gives one output frame per input frame, repeating the first
    and last input frames for the context (nnet3-compute's convention);
    `mode='valid'` gives the `T - left - right` frames that need no padding.
    A list in gives a list out. Without `frames_per_chunk`, sequences are
    padded to bucket lengths where that changes no output
    (`symnet._src.engine.buckets`), so any set of lengths up to 2,000 frames
    compiles at most 8 programs.

    Traced input (`compute` inside `jax.jit`, `jax.grad` or the like, its frame
    count static) runs as one regular request over the whole `[N, T, D]` batch,
    the edge frames repeated by jnp ops, with no bucketing (`compute_traced`);
    it gives the same numbers. `frames_per_chunk` cannot run on traced input
    (its chunks are planned from concrete arrays): that is a PlanError.

    `frames_per_chunk` computes `mode='same'` output in chunks of that many
    frames, in one of two ways:

    - `carry_state=True` (the default): every recurrent state is carried from
      one chunk to the next, as in online decoding, so the result equals one
      pass over the whole sequence. A recurrence that reads later frames of
      itself (a backward recurrence) cannot be carried forward in time: that
      is a PlanError naming the node.
    - `carry_state=False`: each chunk is computed on its own, as nnet3-compute
      does: its input is the chunk's frames plus the context, plus
      `extra_left_context`/`extra_right_context` more frames (real ones where
      the sequence has them, repeated edge frames elsewhere), and every
      recurrence restarts at the chunk's first input frame.

    Chunks are requests in chunk-relative time (`symnet._src.engine.streaming`),
    so a few programs serve every chunk of every length.

    `lowering` is how recurrences and spliced products run, as for `compile` (`'auto'`, `'fused'`,
    `'plain'`); every mode runs through `symnet._src.engine.runner`, whose
    `record()` shows the Computations a call used and what each recurrence got.

    `precision` is a mixed-precision policy (`symnet.Precision` or a preset's
    name), as for `compile`: every mode computes under it. Inputs may be any
    real numbers, bfloat16 and float16 included (docs/precision.md).
    """
    check_lowering(lowering)
    policy = get_precision(precision)
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    if frames_per_chunk is not None:
        if (
            isinstance(frames_per_chunk, bool)
            or not isinstance(frames_per_chunk, numbers.Integral)
            or frames_per_chunk <= 0
            or mode != "same"
        ):
            raise PlanError(
                f"frames_per_chunk must be a positive number of frames (with mode='same'), got {frames_per_chunk!r}"
            )
    for what, extra in (("extra_left_context", extra_left_context), ("extra_right_context", extra_right_context)):
        if isinstance(extra, bool) or not isinstance(extra, numbers.Integral) or extra < 0:
            raise PlanError(f"{what} must be a number of frames >= 0, got {extra!r}")
        if extra and (frames_per_chunk is None or carry_state):
            raise PlanError(
                f"{what} applies to chunks computed on their own: pass frames_per_chunk and carry_state=False"
            )
    name = output_name(network, output)
    graph = Graph(dict(network.structure.outputs))
    if _traced(x):
        if frames_per_chunk is not None:
            raise PlanError(
                "frames_per_chunk cannot run on traced input (inside jax.jit, jax.grad, ...): its chunks are "
                "planned from concrete arrays. Compute in one pass (no frames_per_chunk), or call it outside the "
                "transformation."
            )
        return compute_traced(network, name, graph, x, mode, lowering, policy)
    seqs, ragged = _sequences(x, graph)
    left, right = context(network, name)
    main = "input" if "input" in seqs else next(iter(seqs))
    lengths = [len(s) for s in seqs[main]]
    _check_one_minibatch(graph, lengths, frames_per_chunk)
    results: list[Any] = [None] * len(lengths)
    if frames_per_chunk is None:
        _compute_bucketed(network, name, graph, seqs, lengths, mode, (left, right), results, lowering, policy)
    elif not carry_state:
        chunk_context = (left + extra_left_context, right + extra_right_context)
        _compute_each_chunk(
            network, name, graph, seqs, lengths, frames_per_chunk, chunk_context, results, lowering, policy
        )
    else:
        for length in sorted(set(lengths)):
            members = [i for i, n in enumerate(lengths) if n == length]
            group = {k: [v[i] for i in members] for k, v in seqs.items()}
            out = _compute_chunked(network, name, group, length, frames_per_chunk, lowering, policy)
            for j, i in enumerate(members):
                results[i] = out[:, j]
    if any(isinstance(r, jax.core.Tracer) for r in results):  # under jax.grad and the like
        return results if ragged else jnp.stack(results)
    if not ragged:  # device_put, unlike jnp.asarray, compiles nothing per shape
        return jax.device_put(np.stack(results))
    return [jax.device_put(r) for r in results]


def _check_one_minibatch(graph: Graph, lengths: list[int], frames_per_chunk: int | None) -> None:
    """A PlanError where a node normalising over its minibatch (batch-norm in training mode) would get other
    rows than those of the sequences given: calls of one length each, or chunks."""
    node = matrixwise_node(graph)
    if node is None or (frames_per_chunk is None and len(set(lengths)) == 1):
        return
    why = (
        "in chunks each chunk would be a minibatch of its own"
        if frames_per_chunk is not None
        else f"sequences of {len(set(lengths))} lengths are not one request"
    )
    raise PlanError(
        f"{graph.describe(node)} normalises over its minibatch (batch-norm in training mode), and {why}: give "
        "sequences of one length without frames_per_chunk (one minibatch), or compute in test mode (the default "
        "of Network.compute, test_mode=True; symnet.components.set_test_mode(network)), as nnet3-compute does"
    )


def _traced(x: Any) -> bool:
    """Whether any input array of `x` (an array, a list of them, or a dict of either) is a JAX tracer."""
    values = x.values() if isinstance(x, Mapping) else (x,)
    leaves = [leaf for v in values for leaf in (v if isinstance(v, (list, tuple)) else (v,))]
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def compute_traced(
    network: NetworkLike,
    name: str,
    graph: Graph,
    x: Any,
    mode: str,
    lowering: Lowering = "auto",
    precision: Precision | None = None,
) -> Any:
    """`compute` for traced input: one regular request for the whole `[N, T, D]` batch (per input), edge
    frames repeated by a static `jnp.take`, values kept on the device as tracers.

    Only the frame count must be static. A list of `[T_i, D]` sequences runs one
    request per distinct length (sequences of a length stacked) and gives a list.
    """
    inputs = x if isinstance(x, Mapping) else {"input": x}
    unknown = sorted(set(inputs) - set(graph.inputs))
    missing = sorted(set(graph.inputs) - set(inputs))
    if unknown or missing:
        raise PlanError(
            f"inputs {unknown or missing} are {'not inputs of' if unknown else 'missing from'} "
            f"the network (it has {sorted(graph.inputs)})"
        )
    if any(isinstance(v, (list, tuple)) for v in inputs.values()):
        if not all(isinstance(v, (list, tuple)) for v in inputs.values()):
            raise ShapeError("inputs mix lists of sequences and [N, T, D] arrays: give every input the same way")
        seqs = {k: [jnp.asarray(s) for s in v] for k, v in inputs.items()}
        counts = {k: len(v) for k, v in seqs.items()}
        if len(set(counts.values())) != 1 or not next(iter(counts.values())):
            raise ShapeError(f"inputs need the same, nonzero number of sequences, got {counts}")
        main = "input" if "input" in seqs else next(iter(seqs))
        lengths = [int(s.shape[0]) if s.ndim else 0 for s in seqs[main]]
        _check_one_minibatch(graph, lengths, None)
        results: list[Any] = [None] * len(lengths)
        for length in sorted(set(lengths)):
            members = [i for i, n in enumerate(lengths) if n == length]
            batch = {k: jnp.stack([_sequence(v[i], k, i) for i in members]) for k, v in seqs.items()}
            out = compute_traced(network, name, graph, batch, mode, lowering, precision)
            for j, i in enumerate(members):
                results[i] = out[j]
        return results
    arrays = {k: jnp.asarray(v) for k, v in inputs.items()}
    for k, v in arrays.items():
        dim = graph.input_dims.get(k)
        if v.ndim != 3 or not v.shape[0] or not v.shape[1] or (dim is not None and v.shape[2] != dim):
            want = f"[N, T, {dim if dim is not None else 'D'}] with N, T > 0"
            raise ShapeError(f"input {k!r}: expected a batch of shape {want}, got shape {tuple(v.shape)}")
    counts = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(counts.values())) != 1:
        raise ShapeError(f"inputs have different numbers of sequences: {counts}")
    main = "input" if "input" in arrays else next(iter(arrays))
    n, length = arrays[main].shape[:2]
    left, right = context(network, name)
    if mode == "valid" and length <= left + right:
        raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
    in_t = (-left, length + right) if mode == "same" else (0, length)
    out_t = (0, length) if mode == "same" else (left, length - right)
    blocks = {k: Block(in_t, _edge_frames(v[:, :length].transpose(1, 0, 2), *in_t)) for k, v in arrays.items()}
    out = run(network, blocks, {name: out_t}, lowering=lowering, layout="frames", precision=precision)
    return out[name].transpose(1, 0, 2)


def _edge_frames(value: Any, start: int, end: int) -> Any:
    """Frames `start .. end - 1` of `[T, N, D]` `value`, its first and last frames repeated outside `0 .. T - 1`
    (as `_compute_bucketed` clips frame numbers), by slices and broadcasts: no gather."""
    frames, n, dim = value.shape
    parts = []
    if start < 0:
        parts.append(jnp.broadcast_to(value[:1], (min(end, 0) - start, n, dim)))
    if min(end, frames) > max(start, 0):
        parts.append(value[max(start, 0) : min(end, frames)])
    if end > frames:
        parts.append(jnp.broadcast_to(value[-1:], (end - max(start, frames), n, dim)))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)


def _sequence(value: Any, name: str, i: int) -> Any:
    if value.ndim != 2:
        raise ShapeError(f"input {name!r} sequence {i}: expected [T, D], got shape {tuple(value.shape)}")
    return value


def _compute_bucketed(
    network: NetworkLike,
    name: str,
    graph: Graph,
    seqs: dict[str, list[np.ndarray]],
    lengths: list[int],
    mode: str,
    context: tuple[int, int],
    results: list[Any],
    lowering: Lowering,
    precision: Precision | None = None,
) -> None:
    """One pass per sequence, sequences padded to bucket lengths (symnet._src.engine.buckets) and computed a fixed
    number per call, so that a few programs serve every length; fills `results[i]` `[frames, dim]`.

    With padding side `'ends'` each call gives every sequence its own end (its last input frame + 1), so
    that optional reads past it see the sequence as ended there."""
    left, right = context
    side = padding_side(graph, with_ends=True)
    step = graph_modulus(graph) if side == "start" else 1
    groups: dict[int, list[int]] = {}
    for i, length in enumerate(lengths):
        if mode == "valid" and length <= left + right:
            raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
        padded = length if side is None else bucket_length(length)
        padded += (length - padded) % step  # a start shift must be a multiple of the modulus
        groups.setdefault(padded, []).append(i)
    for padded, members in sorted(groups.items()):
        in_t = (-left, padded + right) if mode == "same" else (0, padded)
        out_t = (0, padded) if mode == "same" else (left, padded - right)
        for batch in [members] if side is None else batches(members, padded):
            shifts = [padded - lengths[i] if side == "start" else 0 for i in batch]
            blocks = {
                k: Block(
                    in_t,
                    np.stack(
                        [clamped(v[i], np.arange(*in_t) - s, lengths[i]) for i, s in zip(batch, shifts, strict=True)],
                        axis=1,
                    ),
                )
                for k, v in seqs.items()
            }
            ends = Ends(tuple(lengths[i] + in_t[1] - padded for i in batch)) if side == "ends" else None
            out = run(network, blocks, {name: out_t}, ends=ends, lowering=lowering, precision=precision)[name]
            for j, (i, s) in enumerate(zip(batch, shifts, strict=True)):
                count = lengths[i] if mode == "same" else lengths[i] - left - right
                results[i] = out[s : s + count, j]


def _sequences(x: Any, graph: Graph) -> tuple[dict[str, list[np.ndarray]], bool]:
    """The input sequences per input name, checked (ShapeError naming what is wrong); whether they were a list."""
    inputs = x if isinstance(x, Mapping) else {"input": x}
    unknown = sorted(set(inputs) - set(graph.inputs))
    if unknown:
        raise PlanError(f"inputs {unknown} are not inputs of the network (it has {sorted(graph.inputs)})")
    missing = sorted(set(graph.inputs) - set(inputs))
    if missing:
        raise PlanError(f"the network needs input(s) {missing}")
    seqs: dict[str, list[np.ndarray]] = {}
    ragged = False
    for k, v in inputs.items():
        if hasattr(v, "ndim") and hasattr(v, "shape"):
            if v.ndim == 2:
                raise ShapeError(
                    f"input {k!r}: compute takes a batch [N, T, D] or a list of [T, D] sequences; got "
                    f"one array of shape {tuple(v.shape)}: add the batch axis (x[None]) for one sequence"
                )
            if v.ndim != 3:
                raise ShapeError(f"input {k!r}: expected a batch of shape [N, T, D], got shape {tuple(v.shape)}")
            seqs[k] = list(_numeric(v, f"input {k!r}"))
        elif isinstance(v, (list, tuple)):
            ragged = True
            seqs[k] = [_numeric(s, f"input {k!r} sequence {i}") for i, s in enumerate(v)]
        else:
            raise ShapeError(
                f"input {k!r}: expected an [N, T, D] array or a list of [T, D] arrays, got a {type(v).__name__}"
            )
    counts = {k: len(v) for k, v in seqs.items()}
    if len(set(counts.values())) != 1:
        raise ShapeError(f"inputs have different numbers of sequences: {counts}")
    if not next(iter(counts.values())):
        raise ShapeError("no sequences to compute (N = 0)")
    for k, v in seqs.items():
        dim = graph.input_dims.get(k)
        for i, s in enumerate(v):
            if s.ndim != 2:
                raise ShapeError(f"input {k!r} sequence {i}: expected [T, D], got shape {s.shape}")
            if not len(s):
                raise ShapeError(f"input {k!r} sequence {i} has no frames")
            if dim is not None and s.shape[1] != dim:
                raise ShapeError(
                    f"input {k!r} sequence {i} has {s.shape[1]} features, but the network's input {k!r} takes {dim}"
                )
    return seqs, ragged


def _numeric(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value) if not isinstance(value, str) else None
    if array is not None and np.iscomplexobj(array):
        raise ShapeError(f"{what}: expected real numbers, got complex values of dtype {array.dtype}")
    # jnp.issubdtype knows the 16-bit floats numpy does not count as numbers (bfloat16 is an ml_dtypes type).
    if array is None or not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == np.bool_):
        raise ShapeError(
            f"{what}: expected numbers, got {type(value).__name__}"
            + (f" of dtype {array.dtype}" if array is not None else "")
        )
    return array


def _source(group: dict[str, list[np.ndarray]], length: int) -> Source:
    """Input blocks of sequences of `length` frames at absolute frames, edge frames repeated outside them."""

    def blocks(t: np.ndarray) -> dict[str, np.ndarray]:
        frames = np.clip(t, 0, length - 1)
        return {k: np.stack([clamped(s, frames) for s in v], axis=1) for k, v in group.items()}

    return blocks


def _compute_each_chunk(
    network: NetworkLike,
    name: str,
    graph: Graph,
    seqs: dict[str, list[np.ndarray]],
    lengths: list[int],
    frames_per_chunk: int,
    context: tuple[int, int],
    results: list[Any],
    lowering: Lowering,
    precision: Precision | None = None,
) -> None:
    """Every chunk of every sequence computed on its own from its frames plus `context` (left, right) frames,
    edge frames repeated (nnet3-compute's way), many in one call (symnet._src.engine.chunks); fills
    `results[i]` `[frames, dim]`."""
    left, right = context
    side = padding_side(graph, with_ends=True)
    modulus = graph_modulus(graph)
    chunks = [
        padded_chunk(
            i,
            start,
            min(frames_per_chunk, length - start),
            frames_per_chunk=frames_per_chunk,
            left=left,
            right=right,
            side=side,
            modulus=modulus,
        )
        for i, length in enumerate(lengths)
        for start in range(0, length, frames_per_chunk)
    ]
    pieces = compute_chunks(
        network, name, chunks, seqs, side=side, modulus=modulus, lowering=lowering, precision=precision
    )
    by_sequence: list[list[Any]] = [[] for _ in lengths]
    for c, piece in zip(chunks, pieces, strict=True):  # in order: each sequence's chunks from its first frame
        by_sequence[c.sequence].append(piece)
    for i, parts in enumerate(by_sequence):
        results[i] = concatenate(parts)


def _compute_chunked(
    network: NetworkLike,
    name: str,
    group: dict[str, list[np.ndarray]],
    length: int,
    frames_per_chunk: int,
    lowering: Lowering,
    precision: Precision | None = None,
) -> Any:
    """Chunks equal to one pass, recurrent state carried (symnet._src.engine.streaming.ChunkRunner); the chunk
    size rounded up to a multiple of the modulus, which changes no output."""
    step = graph_modulus(Graph(dict(network.structure.outputs)))
    runner = chunk_runner(network, name, step * -(-frames_per_chunk // step), lowering, precision)
    source = _source(group, length)
    pieces: list[Any] = []
    state: State = {}
    start = 0
    while start < length:
        out, state = runner.run(network, source, start, length, state)
        pieces.append(out)
        start += len(out)
    return concatenate(pieces)
