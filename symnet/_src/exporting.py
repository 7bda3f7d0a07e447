"""Exported programs: a network's inference function as a `jax.export` program that runs without symnet.

`export(net, path, frames=T)` writes two files: `path`, the serialized
program (`jax.export.Exported.serialize()`: StableHLO with the parameters in
it as constants), and `path.json`, what a caller needs to know (the inputs'
and the output's names and shapes, the mode, the context, the versions). A
service loads it with jax alone (`jax.export.deserialize`, then `.call`; the
snippet is in docs/api.md). Nothing is pickled.

The batch size is symbolic (`batch='b'`, any number of sequences at run
time): each sequence is computed on its own under `jax.vmap`, which gives the
numbers `net.compute` gives. The frame count is fixed: symnet plans a
computation from its concrete Indexes (nnet3's frame numbers: which rows a
descriptor reads, where a recurrence starts), so a plan for `t` frames cannot
be written for a symbolic `t`. Export once per frame count a service needs,
or pad sequences to the exported length (`mode='same'` repeats the edge
frames, so padding changes the output's last frames only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import export as jax_export

from .atomic import atomic_write_all
from .engine.context import context, output_name
from .engine.graph import Graph
from .errors import ArgumentTypeError, PlanError, ShapeError
from .network import Network
from .paths import as_path
from .version import __version__

__all__ = ["FORMAT", "VERSION", "export"]

#: The `format` field of an export's JSON description.
FORMAT = "symnet-export"
#: The version of that description this symnet writes.
VERSION = 1


def export(
    network: Network,
    path: str | os.PathLike[str],
    *,
    frames: int,
    batch: int | str = "b",
    mode: str = "same",
    output: str | None = None,
    input_dims: Mapping[str, int] | None = None,
    platforms: Sequence[str] | None = None,
) -> jax_export.Exported:
    """Write `network`'s output for `[batch, frames, dim]` float32 input as a `jax.export` program.

    `path` gets the serialized program, `path.json` its description (both
    written atomically). `batch` is a symbolic dimension's name (the default
    'b': any batch size) or a fixed size; `frames` must be a fixed frame count
    (see the module's docstring for why). `mode` is `net.compute`'s: 'same'
    gives `frames` output frames, 'valid' the `frames - left - right` that need
    no padding. The program takes the network's inputs in the order the JSON
    lists them. `input_dims` gives the dims of inputs that declare none;
    `platforms` are jax's (default: this process's backend), e.g.
    `('cpu', 'cuda')` for a program that runs on either. Returns the
    `jax.export.Exported`.
    """
    if not isinstance(network, Network):
        raise ArgumentTypeError(f"export takes a symnet.Network, not {type(network).__name__}")
    if isinstance(frames, str):
        raise PlanError(
            f"frames={frames!r}: the frame count of an exported program cannot be symbolic, because symnet plans "
            "a computation from its concrete Indexes (which frames each descriptor reads, where a recurrence "
            "starts); give frames=N, the fixed number of frames the program takes"
        )
    if isinstance(frames, bool) or not isinstance(frames, int) or frames <= 0:
        raise PlanError(f"frames must be a positive number of frames, got {frames!r}")
    if not (isinstance(batch, str) and batch.isidentifier()) and (
        isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0
    ):
        raise PlanError(f"batch must be a positive size or a symbolic dimension's name (such as 'b'), got {batch!r}")
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    name = output_name(network, output)
    left, right = context(network, name)
    out_frames = frames if mode == "same" else frames - left - right
    if out_frames <= 0:
        raise ShapeError(f"{frames} frames are too short for mode='valid' with context ({left}, {right})")
    dims = network.infer_dims(input_dims)
    inputs = sorted(Graph(dict(network.structure.outputs)).inputs)
    size: Any = jax_export.symbolic_shape(batch)[0] if isinstance(batch, str) else batch

    def one(*sequences: jax.Array) -> jax.Array:
        given = {k: s[None] for k, s in zip(inputs, sequences, strict=True)}
        return network.compute(given, mode=mode, output=name)[0]

    specs = [jax.ShapeDtypeStruct((size, frames, dims[k]), jnp.float32) for k in inputs]
    exported = jax_export.export(jax.jit(jax.vmap(one)), platforms=platforms)(*specs)
    described = {
        "format": FORMAT,
        "version": VERSION,
        "symnet_version": __version__,
        "jax_version": jax.__version__,
        "platforms": list(exported.platforms),
        "mode": mode,
        "context": [left, right],
        "inputs": [{"name": k, "shape": [batch, frames, dims[k]], "dtype": "float32"} for k in inputs],
        "outputs": [{"name": name, "shape": [batch, out_frames, dims[name]], "dtype": "float32"}],
    }
    target = as_path(path, "export")
    atomic_write_all(
        {target: bytes(exported.serialize()), target + ".json": (json.dumps(described, indent=2) + "\n").encode()}
    )
    return exported
