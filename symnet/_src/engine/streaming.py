"""Streaming: feed a network frames as they arrive, get back the output frames that are final.

`Stream(network, frames_per_chunk)` is online decoding: `feed(frames)` takes
the next frames of one utterance (`[T_new, D]`, or `[N, T_new, D]` for N
utterances in step) and returns the output frames whose right context has
arrived; `finish()` returns the rest, the last frame repeated for the right
context as `compute`'s `mode='same'` (nnet3-compute's convention) repeats it.
Recurrent state carries from chunk to chunk, so the frames of all calls
together equal `compute(network, x)` on the whole utterance.

Every chunk's request is in chunk-relative time: the chunk's first output
frame is t=0 and the carried state is given at negative times, so every chunk
in the steady state is the same request and one XLA program. Chunk starts are
multiples of the network's modulus (`symnet._src.engine.context.modulus`), so
`Round` and `Switch` mean the same in every chunk. Optional reads (`IfDefined`,
`Failover`) outside recurrences may look beyond the context; chunks then see
`time_reach` more frames on each side, so that they take the same branches as
one pass.

`ChunkRunner` is the machinery `Stream` and `compute(frames_per_chunk=...)`
share: one chunk of output frames from absolute frames of input, run by
`symnet._src.engine.runner.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import ArgumentTypeError, PlanError, ShapeError, StreamError
from ..core.descriptor import Node
from ..core.index import IndexSet, decode
from ..core.precision import Precision, get_precision
from ..core.structure import NetworkLike
from .compiling import compile
from .context import context, output_name
from .context import modulus as graph_modulus
from .dims import node_shapes, static_dim
from .graph import Graph, strongly_connected
from .memo import Cache
from .plan import Planner, time_reach
from .recurrence import Lowering, RecurrentBlock, check_lowering
from .request import ComputationRequest
from .runner import Block, Frames, run
from .semantics import optional_reads

__all__ = [
    "chunk_runner",
    "ChunkRunner",
    "concatenate",
    "optional_reach",
    "recurrent_states",
    "Source",
    "State",
    "Stream",
]

#: Input blocks `{input name: [frames, n, dim]}` for absolute frames (an int array), edge frames repeated.
Source = Callable[[np.ndarray], dict[str, np.ndarray]]
#: The carried state: per recurrent node, its values `[depth, n, dim]` on the frames just before a chunk.
State = dict[str, np.ndarray]

_RUNNERS: Cache[ChunkRunner] = Cache(64)


def recurrent_states(network: NetworkLike, output: str | None = None) -> dict[str, int]:
    """The recurrent nodes whose values carry from frame to frame, with how many frames back they are read.

    A PlanError names a recurrence that reads later frames of itself: its state
    would have to come from the future, so it cannot be carried forward.
    """
    name = output_name(network, output)
    left, right = context(network, name)
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=1, t=(-left, 8 + right)) for k in Graph(dict(network.structure.outputs)).inputs},
        outputs={name: IndexSet.range(n=1, t=8)},
    )
    computation = compile(network, request)
    states: dict[str, int] = {}
    for step in computation.steps:
        if not isinstance(step, RecurrentBlock):
            continue
        if step.reverse:
            raise PlanError(
                f"cannot carry the state of a backward recurrence ({_members(computation.graph, step.order)}) "
                "from one chunk to the next: it reads "
                "later frames of itself. Compute without frames_per_chunk (one pass), or compute each chunk on its "
                "own as nnet3-compute does (carry_state=False, with extra_right_context frames of lookahead)."
            )
        for nid, depth in step.depth.items():
            layer = computation.graph.layers[nid]
            if not isinstance(layer, Node):
                raise PlanError(f"cannot carry the state of {computation.graph.describe(nid)}: it is not a named Node")
            states[layer.name] = max(states.get(layer.name, 0), depth)
    return states


def optional_reach(graph: Graph) -> int:
    """How many frames beyond the context a chunk must see to take the same optional branches as one pass.

    An IfDefined or Failover that reads only members of its own recurrence
    (`IfDefined(Offset(h, -1))` in an LSTM) depends on the carried state, not
    on the input window; any other may read further than the context where the
    input is there, so chunks see `time_reach` more frames (0 without such reads).
    """
    indexed = [nid for nid in range(len(graph.layers)) if graph.indexed[nid]]
    group_of: dict[int, int] = {}
    for i, members in enumerate(strongly_connected(indexed, graph.operands)):
        if len(members) > 1 or members[0] in graph.operands[members[0]]:
            group_of.update(dict.fromkeys(members, i))
    for nid, layer in enumerate(graph.layers):
        if not optional_reads(layer):
            continue
        group = group_of.get(nid)
        stack, seen = list(graph.operands[nid]), set[int]()
        while stack:
            op = stack.pop()
            if op in seen or not graph.indexed[op] or (group is not None and group_of.get(op) == group):
                continue
            seen.add(op)
            if group is None or isinstance(graph.layers[op], Node) or not graph.operands[op]:
                return time_reach(graph)  # an optional read of something outside its recurrence
            stack.extend(graph.operands[op])
    return 0


def concatenate(parts: Sequence[Any]) -> Any:
    """`parts` joined along the first axis: in numpy unless one is traced (under jax.grad)."""
    if any(isinstance(p, jax.core.Tracer) for p in parts):
        return jnp.concatenate(parts)
    return np.concatenate(parts)


def chunk_runner(
    network: NetworkLike,
    output: str | None,
    frames_per_chunk: int,
    lowering: Lowering = "auto",
    precision: Precision | None = None,
) -> ChunkRunner:
    """The ChunkRunner for a network structure, output, chunk size, lowering and precision; cached."""
    key = (network.structure, output, frames_per_chunk, lowering, precision)
    hit = _RUNNERS.get(key)
    if hit is None:
        hit = _RUNNERS.put(key, ChunkRunner(network, output, frames_per_chunk, lowering, precision))
    return hit


class ChunkRunner:
    """Chunks of one output equal to one pass, each a request in chunk-relative time.

    Chunk starts are 0, `first_chunk`, then every `frames_per_chunk` frames
    (both multiples of the modulus, and the first long enough that every later
    chunk's state and input lie inside the sequence): every chunk after the
    first is the same request unless it is the last. Every chunk runs through
    `symnet._src.engine.runner.run` with the runner's `lowering` and `precision` (a mixed-precision policy).
    """

    def __init__(
        self,
        network: NetworkLike,
        output: str | None,
        frames_per_chunk: int,
        lowering: Lowering = "auto",
        precision: Precision | None = None,
    ):
        check_lowering(lowering)
        self.lowering, self.precision = lowering, precision
        self.name = output_name(network, output)
        self.graph = Graph(dict(network.structure.outputs))
        self.left, self.right = context(network, self.name)
        self.modulus = graph_modulus(self.graph)
        if frames_per_chunk % self.modulus:
            raise PlanError(
                f"frames_per_chunk={frames_per_chunk} is not a multiple of the network's modulus {self.modulus} "
                f"(its Round/Switch period): use {self.modulus * -(-frames_per_chunk // self.modulus)}"
            )
        self.chunk = frames_per_chunk
        self.extra = optional_reach(self.graph)
        #: Frames of input past an output frame before it is final.
        self.lookahead = self.right + self.extra
        self.states = self._state_depths(recurrent_states(network, self.name))
        warmup = max([self.extra, 1, *self.states.values()])
        self.first_chunk = frames_per_chunk * -(-warmup // frames_per_chunk)
        self.dim = static_dim(node_shapes(self.graph, strict=False), self.graph.outputs[self.name]) or 0

    def _state_depths(self, lags: dict[str, int]) -> dict[str, int]:
        """Per recurrent node, how many frames before a chunk its plan reads (its lag, or more where another
        node reads it further back, as `Offset(h, -2)` does)."""
        if not lags:
            return lags
        given = max(lags.values()) + time_reach(self.graph) + self.left + self.extra
        inputs = {
            k: IndexSet.range(n=1, t=(-self.left - self.extra - given, self.chunk + self.lookahead))
            for k in self.graph.inputs
        }
        inputs.update({node: IndexSet.range(n=1, t=(-given, 0)) for node in lags})
        planner = Planner(
            self.graph, ComputationRequest(inputs=inputs, outputs={self.name: IndexSet.range(n=1, t=self.chunk)})
        )
        needed = planner.requirements()
        depths = {}
        for node, lag in lags.items():
            t = decode(needed[self.graph.endpoint(node, "input")])[1]
            depths[node] = max(lag, -int(t.min()) if len(t) and t.min() < 0 else 0)
        return depths

    def end_of(self, start: int) -> int:
        """The end of the chunk starting at `start` (a chunk start)."""
        return start + (self.first_chunk if start == 0 else self.chunk)

    def run(
        self, network: NetworkLike, source: Source, start: int, length: int | None, state: State
    ) -> tuple[np.ndarray, State]:
        """Output frames `[start, end)` `[frames, n, dim]` of the chunk at `start`, and the state after it.

        `length` is the sequence's length once known (the last chunks), else None;
        the chunk then ends at `length` if that comes first. Without optional
        reads beyond the context a last chunk is padded to full size (repeated
        edge frames change none of its outputs), so it shares the steady program.
        With them, the chunk whose input would reach past the sequence's end
        (`length + right`) runs on to `length`: one last program, seeing exactly
        the frames one pass has. Callers move on by the frames returned.
        """
        full_end = self.end_of(start)
        end = full_end
        if length is not None:
            end = length if self.extra and full_end + self.extra > length else min(full_end, length)
        last = length is not None and end == length
        out_end = end if (last and self.extra) else full_end
        lo = max(-self.left, start - self.left - self.extra)
        hi = out_end + self.right + self.extra
        if length is not None and last and self.extra:
            hi = length + self.right
        inputs = {k: Block((lo - start, hi - start), b) for k, b in source(np.arange(lo, hi)).items()}
        inputs.update({node: Block((-len(value), 0), value) for node, value in state.items()})
        outputs: dict[str, Frames] = {self.name: (0, out_end - start)}
        # A last chunk without optional reads computes the state too, so that it is the steady request.
        carried = {} if last and self.extra else {k: min(d, out_end - start) for k, d in self.states.items()}
        for node, frames in carried.items():
            outputs[node] = (out_end - start - frames, out_end - start)
        result = run(network, inputs, outputs, lowering=self.lowering, precision=self.precision)
        out = result[self.name][: end - start]
        after: State = {}
        for node in carried:
            new = result[node]
            after[node] = concatenate([state[node], new])[-self.states[node] :] if node in state else new
        return out, after


class Stream:
    """Online computation of one output: `feed` frames as they arrive, `finish` at the utterance's end.

    >>> stream = Stream(network, frames_per_chunk=20)   # doctest: +SKIP
    >>> parts = [stream.feed(x[i : i + 7]) for i in range(0, len(x), 7)]   # doctest: +SKIP
    >>> y = np.concatenate([*parts, stream.finish()])   # equals compute(network, x[None])[0]   # doctest: +SKIP

    Frames are `[T_new, D]` (one utterance) or `[N, T_new, D]` (N utterances
    fed in step), or a dict of such per input for a network with several
    inputs. `frames_per_chunk` must be a multiple of the network's modulus.
    An output frame is returned once `lookahead` input frames after it have
    arrived and its chunk is complete. After `finish` the utterance is over:
    `feed` and `finish` refuse (more frames of it would be taken for a new
    utterance) until `reset()` starts the next one, with the same compiled
    programs. `lowering` is how recurrences and spliced products run and `precision` is the mixed-precision
    policy, as for `compile`.
    """

    def __init__(
        self,
        network: NetworkLike,
        frames_per_chunk: int,
        *,
        output: str | None = None,
        lowering: Lowering = "auto",
        precision: str | Precision | None = None,
    ):
        if not hasattr(network, "structure") or not hasattr(network, "params"):
            raise ArgumentTypeError(f"Stream: the network must be a symnet Network, got {type(network).__name__}")
        if isinstance(frames_per_chunk, bool) or not isinstance(frames_per_chunk, int) or frames_per_chunk <= 0:
            raise PlanError(f"frames_per_chunk must be a positive number of frames, got {frames_per_chunk!r}")
        self.network = network
        self._runner = chunk_runner(network, output, frames_per_chunk, lowering, get_precision(precision))
        self.output = self._runner.name
        self.frames_per_chunk = frames_per_chunk
        self.reset()

    @property
    def lookahead(self) -> int:
        """Input frames needed after an output frame (the right context, plus any optional reach)."""
        return self._runner.lookahead

    def reset(self) -> None:
        """Forget the utterance so far (its frames and recurrent state): the next `feed` starts a new one."""
        self._buffers: dict[str, np.ndarray] | None = None  # every frame not yet behind every chunk's input
        self._offset = 0  # the absolute frame of the buffers' first row
        self._received = 0
        self._start = 0  # the next chunk's first frame
        self._state: State = {}
        self._batched: bool | None = None
        self._finished = False

    def _check_open(self, what: str) -> None:
        if self._finished:
            raise StreamError(
                f"Stream for output {self.output!r}: {what} after finish(): the utterance is over; call reset() "
                "to start the next one"
            )

    def feed(self, frames: Any) -> jax.Array:
        """The output frames that the frames so far make final: `[T_out, dim]` (or `[N, T_out, dim]`)."""
        self._check_open("feed()")
        self._append(frames)
        runner, pieces = self._runner, []
        while self._received >= runner.end_of(self._start) + runner.lookahead:
            pieces.append(self._chunk(None))
        return self._result(pieces)

    def finish(self) -> jax.Array:
        """The remaining output frames, the last input frame repeated for the right context; the utterance is
        then over (`reset()` starts the next)."""
        self._check_open("finish()")
        if not self._received:
            raise StreamError(f"Stream for output {self.output!r}: finish() before any frame was fed")
        pieces = []
        while self._start < self._received:
            pieces.append(self._chunk(self._received))
        result = self._result(pieces)
        self.reset()
        self._finished = True
        return result

    def _chunk(self, length: int | None) -> np.ndarray:
        out, self._state = self._runner.run(self.network, self._frames, self._start, length, self._state)
        self._start += len(out)
        keep = self._start - self._runner.left - self._runner.extra - self._offset
        if keep > 0 and self._buffers is not None:  # frames no later chunk reads
            self._buffers = {k: v[keep:] for k, v in self._buffers.items()}
            self._offset += keep
        return out

    def _frames(self, t: np.ndarray) -> dict[str, np.ndarray]:
        assert self._buffers is not None
        rows = np.clip(t, 0, self._received - 1) - self._offset
        return {k: v[rows] for k, v in self._buffers.items()}

    def _result(self, pieces: list[np.ndarray]) -> jax.Array:
        n = next(iter(self._buffers.values())).shape[1] if self._buffers else 1
        out = np.concatenate(pieces) if pieces else np.zeros((0, n, self._runner.dim), np.float32)
        out = np.moveaxis(out, 0, 1)  # [n, frames, dim]
        result: jax.Array = jax.device_put(out if self._batched else out[0])
        return result

    def _append(self, frames: Any) -> None:
        """Check the frames (ShapeError naming what is wrong) and add them to the buffers, `[frames, n, dim]`."""
        named = frames if isinstance(frames, Mapping) else {"input": frames}
        graph = self._runner.graph
        if set(named) != set(graph.inputs):
            raise PlanError(
                f"Stream.feed: got inputs {sorted(named)}, the network's inputs are {sorted(graph.inputs)} "
                "(pass a dict of frames per input for several)"
            )
        blocks: dict[str, np.ndarray] = {}
        for k, v in named.items():
            array = np.asarray(v) if hasattr(v, "shape") or isinstance(v, (list, tuple)) else None
            if array is None or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
                raise ShapeError(f"Stream.feed: input {k!r} must be an array of numbers, got {type(v).__name__}")
            if np.iscomplexobj(array):
                raise ShapeError(f"Stream.feed: input {k!r} must be real numbers, got complex values ({array.dtype})")
            if array.ndim not in (2, 3):
                raise ShapeError(
                    f"Stream.feed: input {k!r} must be [T_new, D] or [N, T_new, D], got shape {array.shape}"
                )
            batched = array.ndim == 3
            if self._batched is not None and batched != self._batched:
                raise ShapeError(
                    f"Stream.feed: input {k!r} has shape {array.shape}, but earlier frames were "
                    f"{'[N, T_new, D]' if self._batched else '[T_new, D]'}: call reset() to start another utterance"
                )
            self._batched = batched
            block = np.moveaxis(array, 0, 1) if batched else array[:, None]  # [frames, n, dim]
            dim = graph.input_dims.get(k)
            if dim is not None and block.shape[2] != dim:
                raise ShapeError(f"Stream.feed: input {k!r} has {block.shape[2]} features, the network takes {dim}")
            if self._buffers is not None and block.shape[1:] != self._buffers[k].shape[1:]:
                raise ShapeError(
                    f"Stream.feed: input {k!r} frames of shape {array.shape} do not continue the earlier "
                    f"frames ({self._buffers[k].shape[1]} streams of {self._buffers[k].shape[2]} features)"
                )
            blocks[k] = block
        counts = {k: len(b) for k, b in blocks.items()}
        if len(set(counts.values())) != 1:
            raise ShapeError(f"Stream.feed: inputs have different numbers of frames: {counts}")
        if self._buffers is None:
            self._buffers = blocks
        else:
            self._buffers = {k: np.concatenate([v, blocks[k]]) for k, v in self._buffers.items()}
        self._received += next(iter(counts.values()))


def _members(graph: Graph, order: Sequence[int], shown: int = 3) -> str:
    """A recurrence's members in a message: its first few Node names, how many more, and where they were built."""
    nodes = [layer for layer in (graph.layers[m] for m in order) if isinstance(layer, Node)]
    names = [n.name for n in nodes] or [graph.describe(m) for m in order]
    text = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    places = sorted({n.where for n in nodes if n.where})
    return text + (f", built at {', '.join(places)}" if places else "")
