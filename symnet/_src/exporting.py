"""Exported programs: a network's inference function as a `jax.export` program that runs without symnet.

`export(net, path, frames=T)` writes two files: `path`, the serialized
program (`jax.export.Exported.serialize()`: StableHLO with the parameters in
it as constants), and `path.json`, what a caller needs to know (the inputs'
and the output's names and shapes, the mode, the context, the versions) and
`program_sha256`, the SHA-256 of the program's bytes, which binds the
description to its program: a loader checks it (docs/api.md's snippet does),
so a `.json` of another export beside the program is refused. A
service loads it without symnet (`jax.export.deserialize`, then `.call`; the
snippet is in docs/api.md): with jax, jaxlib and the `flatbuffers` package, which
`jax.export.deserialize` imports (jax does not install it). Nothing is pickled.

The batch size is symbolic (`batch='b'`, any number of sequences at run
time): each sequence is computed on its own under `jax.vmap`, which gives the
numbers `net.compute` gives.

symnet plans a computation from its concrete Indexes (nnet3's frame numbers:
which rows a descriptor reads, where a recurrence starts), so no plan is
written for a symbolic frame count. The frame count may still be symbolic
(`frames='t'`) where the network's outputs are local in time
(`engine.locality.chunking_dependence`: no recurrence, no IfDefined or
Failover, time moved by fixed offsets): the program then cuts each sequence
into chunks of `chunk` frames, gives each chunk its context (edge frames
repeated, as `mode='same'` does), runs the one plan made for a chunk on all of
them, and joins the outputs. Each output frame is then the same function of
the same input frames as in one pass over the sequence. A recurrent network
needs a fixed frame count: export once per frame count a service needs, or
pad sequences to the exported length (`mode='same'` repeats the edge frames,
so padding changes the output's last frames only).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import export as jax_export

from .base.atomic import atomic_write_all
from .base.errors import ArgumentTypeError, PlanError, ShapeError
from .base.paths import as_path
from .base.text import clip
from .base.version import __version__
from .core.index import INDEX_LIMIT
from .engine.context import context, modulus, output_name
from .engine.graph import Graph
from .engine.locality import chunking_dependence
from .network import Network

__all__ = ["FORMAT", "MIN_CHUNK", "VERSION", "export"]

#: The `format` field of an export's JSON description.
FORMAT = "symnet-export"
#: The version of that description this symnet writes (2: with `program_sha256`).
VERSION = 2
#: The fewest frames a chunk of a symbolic frame count covers by default. Each chunk computes its context
#: again and the last one is padded, so the default is 4 times the context (at most a quarter more frames
#: computed than output), at least this, rounded up to the network's time modulus.
MIN_CHUNK = 64


def export(
    network: Network,
    path: str | os.PathLike[str],
    *,
    frames: int | str,
    batch: int | str = "b",
    mode: str = "same",
    output: str | None = None,
    input_dims: Mapping[str, int] | None = None,
    platforms: Sequence[str] | None = None,
    chunk: int | None = None,
) -> jax_export.Exported:
    """Write `network`'s output for `[batch, frames, dim]` float32 input as a `jax.export` program.

    `path` gets the serialized program, `path.json` its description (both
    written atomically). `batch` and `frames` are each a fixed size or a
    symbolic dimension's name ('b': any batch size; 't': any frame count,
    where the network's outputs are local in time, computed in chunks of
    `chunk` frames, by default 4 times the context and at least 64: see the
    module's docstring). `mode` is `net.compute`'s:
    'same' gives `frames` output frames, 'valid' the `frames - left - right`
    that need no padding. The program takes the network's inputs in the order
    the JSON lists them. `input_dims` gives the dims of inputs that declare
    none; `platforms` are jax's (default: this process's backend), e.g.
    `('cpu', 'cuda')` for a program that runs on either. The program computes
    in test mode, as `net.compute` does by default (batch-norm with its stored
    statistics, dropout off). Returns the `jax.export.Exported`.
    """
    if not isinstance(network, Network):
        raise ArgumentTypeError(f"export takes a symnet.Network, not {type(network).__name__}")
    for what, value in (("frames", frames), ("batch", batch)):
        if not _symbolic(value) and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise PlanError(
                f"{what} must be a positive size or a symbolic dimension's name (such as "
                f"{'t' if what == 'frames' else 'b'!r}), got {clip(repr(value), 80)}"
            )
    # an Index names at most INDEX_LIMIT - 1 frames; a larger batch would overflow XLA's dimension types
    for what, value, most in (("frames", frames, INDEX_LIMIT - 1), ("batch", batch, 2**31 - 1)):
        if isinstance(value, int) and value > most:
            raise PlanError(f"{what}={clip(str(value), 40)} is more than the {most} symnet can export")
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    if frames == batch:
        raise PlanError(f"frames and batch are both {frames!r}: name two different symbolic dimensions")
    if chunk is not None and not isinstance(frames, str):
        raise PlanError(f"chunk={chunk!r} is for a symbolic frame count (frames='t'); frames={frames!r} is fixed")
    name = output_name(network, output)
    left, right = context(network, name)
    graph = Graph(dict(network.structure.outputs))
    size_of_chunk = 0
    if isinstance(frames, str):
        size_of_chunk = _chunk_size(graph, frames, chunk, left + right)
        shape = jax_export.symbolic_shape(
            f"{batch}, {frames}" if isinstance(batch, str) else frames,
            constraints=(f"{frames} >= {left + right + 1}",) if mode == "valid" else (),
        )
        size, length = (shape[0], shape[1]) if isinstance(batch, str) else (batch, shape[0])
        out_frames: Any = f"{frames} - {left + right}" if mode == "valid" and left + right else frames
    else:
        out_frames = frames if mode == "same" else frames - left - right
        if out_frames <= 0:
            raise ShapeError(f"{frames} frames are too short for mode='valid' with context ({left}, {right})")
        size = jax_export.symbolic_shape(batch)[0] if isinstance(batch, str) else batch
        length = frames
    dims = network.infer_dims(input_dims)
    inputs = sorted(graph.inputs)

    def one(*sequences: jax.Array) -> jax.Array:
        given = {k: s[None] for k, s in zip(inputs, sequences, strict=True)}
        return network.compute(given, mode=mode, output=name)[0]

    def chunked(*sequences: jax.Array) -> jax.Array:
        return _in_chunks(network, name, inputs, sequences, size_of_chunk, (left, right), modulus(graph), mode)

    specs = [jax.ShapeDtypeStruct((size, length, dims[k]), jnp.float32) for k in inputs]
    program = jax.vmap(one) if isinstance(frames, int) else chunked
    exported = jax_export.export(jax.jit(program), platforms=platforms)(*specs)
    program_bytes = bytes(exported.serialize())
    described: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "program_sha256": hashlib.sha256(program_bytes).hexdigest(),
        "symnet_version": __version__,
        "jax_version": jax.__version__,
        "platforms": list(exported.platforms),
        "mode": mode,
        "context": [left, right],
        "inputs": [{"name": k, "shape": [batch, frames, dims[k]], "dtype": "float32"} for k in inputs],
        "outputs": [{"name": name, "shape": [batch, out_frames, dims[name]], "dtype": "float32"}],
    }
    if isinstance(frames, str):
        described["chunk"] = size_of_chunk
    target = as_path(path, "export")
    atomic_write_all({target: program_bytes, target + ".json": (json.dumps(described, indent=2) + "\n").encode()})
    return exported


def _symbolic(value: object) -> bool:
    return isinstance(value, str) and value.isidentifier()


def _chunk_size(graph: Graph, frames: str, chunk: int | None, context: int) -> int:
    """`chunk` (None: `MIN_CHUNK` or 4 `context` frames) rounded up to the network's time modulus, once the
    outputs are known to be local in time."""
    why = chunking_dependence(graph)
    if why is not None:
        raise PlanError(
            f"frames={frames!r}: a symbolic frame count needs outputs local in time, computed chunk by chunk, but "
            f"{why}; give frames=N, the fixed number of frames the program takes"
        )
    if chunk is None:
        chunk = max(MIN_CHUNK, 4 * context)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
        raise PlanError(f"chunk must be a positive number of frames, got {chunk!r}")
    m = modulus(graph)
    return -(-chunk // m) * m


def _in_chunks(
    network: Network,
    name: str,
    inputs: Sequence[str],
    sequences: Sequence[jax.Array],
    chunk: int,
    context: tuple[int, int],
    time_modulus: int,
    mode: str,
) -> jax.Array:
    """`[B, T, D]` inputs (T symbolic) to the output, one plan of `chunk` output frames run on every chunk.

    Chunk j's window holds frames `j chunk - lead ... (j + 1) chunk + right - 1`, clipped to the sequence (edge
    frames repeated), where `lead` is the left context rounded up to the time modulus, so that every window's
    first frame is t = 0 modulo it, as the sequence's is; the last `chunk` frames of its 'valid' output are the
    sequence's frames `j chunk ... (j + 1) chunk - 1`."""
    left, right = context
    lead = -(-left // time_modulus) * time_modulus
    b, t = sequences[0].shape[:2]
    count = (t + chunk - 1) // chunk
    width = chunk + lead + right
    rows = jnp.clip(jnp.arange(count)[:, None] * chunk + jnp.arange(width)[None, :] - lead, 0, t - 1)
    windows = {k: s[:, rows].reshape((b * count, width, s.shape[-1])) for k, s in zip(inputs, sequences, strict=True)}

    def one(window: dict[str, jax.Array]) -> jax.Array:
        return network.compute({k: w[None] for k, w in window.items()}, mode="valid", output=name)[0, lead - left :]

    y = jax.vmap(one)(windows)
    y = y.reshape((b, count * chunk, y.shape[-1]))
    return y[:, left : t - right] if mode == "valid" else y[:, :t]
