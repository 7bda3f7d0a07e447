"""Kaldi's chain egs (`cegs.*.ark`, from nnet3-chain-get-egs) as `fit`'s training data.

Each example is one chunk: its input matrix (with the context Kaldi cut around it) becomes a row of
`Chunks.features`, and its supervision FST, already weighted by the normalization FST as Kaldi's egs
are, becomes its numerator. `fit` takes them with the objective `chain_egs` returns:

    data = chain_egs(read_cegs("ark:cegs.1.ark"), den=read_fst("den.fst"))
    fit(net, data.chunks, optimizer, objective=data.objective, frame_subsampling_factor=data.frame_subsampling_factor)

The chunks' targets hold each example's number (the objective finds its numerator by it), so validation
examples can be given in the same call (`valid=`), each set as its own Chunks.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import attrs
import jax
import numpy as np

from ..base.errors import CheckpointError, ShapeError, TrainingError
from ..chain.graph import ChainGraph, numerator_graph
from ..chain.objective import ChainOptions
from ..kaldi_io.fst import Fst
from .examples import Chunks
from .objectives import Chain, pack_numerators

__all__ = [
    "ChainArrays",
    "ChainEgs",
    "ChainEgsData",
    "Held",
    "HeldChunks",
    "HeldSupervision",
    "StreamedChainEgs",
    "chain_arrays",
    "chain_egs",
]


@attrs.frozen(eq=False)
class ChainEgs(Chain):
    """The chain objective with the numerators of Kaldi's chain egs (`numerators[i]` for the chunk whose
    targets are `i`) and their per-frame derivative weights (`deriv_weights[i]`: Kaldi scales the derivative,
    not the objective, by them; nnet3-chain-get-egs gives the frames that overlap a neighbouring chunk 0.5).
    `den` must be given (the den.fst the egs were made with). The accuracy reported is the frames whose
    argmax pdf is the numerator posteriors' best."""

    numerators: tuple[ChainGraph, ...] = ()
    deriv_weights: tuple[np.ndarray, ...] = ()
    name: ClassVar[str] = "chain"

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        if targets.ndim != 2 or not np.issubdtype(targets.dtype, np.integer):
            raise ShapeError(f"{what}: chain egs chunks hold their example's number per frame, got {targets.dtype}")
        if targets.size and (targets.min() < 0 or targets.max() >= len(self.numerators)):
            raise ShapeError(f"{what}: example {int(targets.max())} is not one of the {len(self.numerators)} given")
        pdfs = {g.num_pdfs for g in self.numerators}
        if pdfs != {out_dim}:
            raise ShapeError(f"{what}: the egs' supervision has {sorted(pdfs)} pdfs, output {output!r} dim {out_dim}")
        if self.den is None:
            raise TrainingError("chain egs need the den.fst they were made with: chain_egs(..., den=read_fst(path))")

    def supervision(self, targets: np.ndarray, weights: np.ndarray, subsampling: int = 1) -> Mapping[str, np.ndarray]:
        graphs = [self.numerators[int(t[0])] if w.any() else None for t, w in zip(targets, weights)]
        frames = -(-targets.shape[1] // subsampling)
        out = pack_numerators(graphs, np.full((len(targets), frames), -1, np.int32))
        out["deriv_weights"] = np.stack([self.deriv_weights[int(t[0])][:frames] for t in targets]).astype(np.float32)
        return out

    def loss(
        self,
        output: jax.Array,
        weights: jax.Array,
        supervision: Mapping[str, jax.Array],
        extra: Mapping[str, jax.Array] | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        # The same values; the gradient through each frame scaled by its derivative weight, for `output` and for
        # `output-xent` alike (Kaldi's NnetChainTrainer::ProcessOutputs scales both derivatives by them).
        w = supervision["deriv_weights"][:, : output.shape[1], None]

        def scaled(x: jax.Array) -> jax.Array:
            v = w.astype(x.dtype)
            return x * v + jax.lax.stop_gradient(x * (1 - v))

        if extra is not None and self.xent_output is not None:
            extra = {**extra, self.xent_output: scaled(extra[self.xent_output])}
        return super().loss(scaled(output), weights, supervision, extra)

    def describe(self) -> str:
        return super().describe() + f" on {len(self.numerators)} chain egs"


@attrs.frozen(eq=False)
class Held:
    """One streamed chain eg's numerator graph and derivative weights, and the sizes a minibatch holding it is
    padded to at least (`arcs`, `states`): the largest numerator of its corpus (`stream_cegs`), or of its chunk
    width in its window (`stream_chain_data`), so that minibatches share compiled steps."""

    graph: ChainGraph
    deriv_weights: np.ndarray
    arcs: int
    states: int


class HeldSupervision:
    """The supervision of the chain egs in the minibatches that live: `add` numbers one (`Held`), which is found by
    its number (`[number]`) for as long as something holds it (a `HeldChunks`), and then dropped."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[int, Held] = weakref.WeakValueDictionary()
        self._numbers = itertools.count()
        self._lock = threading.Lock()  # added by fit's reading thread, found by the training step's

    def add(self, held: Held) -> int:
        with self._lock:
            number = next(self._numbers)
            self._held[number] = held
        return number

    def __getitem__(self, number: int) -> Held:
        with self._lock:
            held = self._held.get(number)
        if held is None:
            raise TrainingError(f"chain eg number {number} is not one of the streamed egs' (their minibatch is gone)")
        return held


@attrs.frozen(eq=False)
class HeldChunks(Chunks):
    """Chunks of streamed chain egs, which hold their egs' supervision (`held`) while they live."""

    held: tuple[Held, ...] = ()


@attrs.frozen(eq=False)
class StreamedChainEgs(ChainEgs):
    """The chain objective of chain egs read as training goes (`symnet.train.stream_cegs`): each chunk's numerator
    and derivative weights are found by the number its targets hold (`supervision`), and padded to the largest
    numerator of its corpus, so that a minibatch trains as it would in memory (`ChainEgs`)."""

    supervisions: HeldSupervision = attrs.field(factory=HeldSupervision)
    #: Per chunk width (output frames), the most arcs and states a minibatch was padded to so far: a minibatch of
    #: smaller numerators is padded as far, so that its step is one already compiled (padding adds no path).
    _padding: dict[int, tuple[int, int]] = attrs.field(factory=dict, init=False)

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        if targets.ndim != 2 or not np.issubdtype(targets.dtype, np.integer):
            raise ShapeError(f"{what}: chain egs chunks hold their example's number per frame, got {targets.dtype}")
        pdfs = {self.supervisions[int(t[0])].graph.num_pdfs for t in targets}
        if pdfs != {out_dim}:
            raise ShapeError(f"{what}: the egs' supervision has {sorted(pdfs)} pdfs, output {output!r} dim {out_dim}")
        if self.den is None:
            raise TrainingError("chain egs need the den.fst they were made with: stream_cegs(..., den=read_fst(path))")

    def supervision(self, targets: np.ndarray, weights: np.ndarray, subsampling: int = 1) -> Mapping[str, np.ndarray]:
        held = [self.supervisions[int(t[0])] for t in targets]
        frames = -(-targets.shape[1] // subsampling)
        graphs = [h.graph if w.any() else None for h, w in zip(held, weights)]
        out = pack_numerators(graphs, np.full((len(targets), frames), -1, np.int32))
        arcs, states = self._padding.get(frames, (1, frames + 1))
        arcs, states = max(arcs, *(h.arcs for h in held)), max(states, *(h.states for h in held))
        self._padding[frames] = (arcs, states)
        for name, fill in (("src", 0), ("dst", 0), ("pdf", 0), ("log_prob", -np.inf)):
            out[name] = _padded(out[name], arcs, fill)
        for name in ("log_initial", "log_final"):
            out[name] = _padded(out[name], states, -np.inf)
        out["deriv_weights"] = np.stack([h.deriv_weights[:frames] for h in held]).astype(np.float32)
        return out

    def describe(self) -> str:
        return Chain.describe(self) + " on chain egs read as training goes"

    def run_state(self) -> dict[str, Any]:
        """The padding so far per chunk width: the rest of a resumed run pads (and so rounds) as it would have."""
        return {"padding": {str(frames): list(sizes) for frames, sizes in sorted(self._padding.items())}}

    def resume(self, state: Mapping[str, Any], path: str) -> None:
        padding = state.get("padding", {}) if isinstance(state, Mapping) else None
        ok = isinstance(padding, Mapping) and all(
            key.isdigit() and isinstance(sizes, list) and len(sizes) == 2 and all(type(n) is int for n in sizes)
            for key, sizes in padding.items()
        )
        if not ok:
            raise CheckpointError(f"{path}: the chain egs' padding per chunk width is {state!r:.80}")
        self._padding.clear()
        self._padding.update({int(key): (sizes[0], sizes[1]) for key, sizes in padding.items()})


def _padded(a: np.ndarray, size: int, fill: float) -> np.ndarray:
    """`a` [n, m] padded with `fill` to [n, size] (as `pack_numerators` pads to the largest graph it is given)."""
    if a.shape[1] >= size:
        return a
    return np.concatenate([a, np.full((len(a), size - a.shape[1]), fill, a.dtype)], axis=1)


@attrs.frozen(eq=False)
class ChainEgsData:
    """What `chain_egs` returns: the examples as `chunks` (and `valid` ones, or None), the `objective` that
    knows their numerators, and the egs' `frame_subsampling_factor` (for `fit`)."""

    chunks: Chunks
    valid: Chunks | None
    objective: ChainEgs
    frame_subsampling_factor: int


def chain_egs(
    examples: Iterable[Any],
    den: Fst | ChainGraph,
    *,
    valid: Iterable[Any] = (),
    options: ChainOptions | None = None,
    input: str = "input",
    output: str = "output",
    xent_output: str | None = None,
) -> ChainEgsData:
    """Chain egs (`symnet.kaldi.read_cegs`) as `fit`'s data: one chunk per example, its numerator from its
    supervision. Every example must have one sequence (egs as nnet3-chain-get-egs writes them, not merged),
    the same chunk shape, an input `input` with contiguous frames, an output `output` at frames 0, k, 2k, ...,
    and supervision weight 1 (TrainingError naming the example otherwise); derivative weights apply as in
    Kaldi's training. `den`: the den.fst the egs were made with (`read_fst`)."""
    train_list, valid_list = list(examples), list(valid)
    if not train_list:
        raise TrainingError("chain_egs: no examples")
    graphs: list[ChainGraph] = []
    derivs: list[np.ndarray] = []
    shape: dict[str, int] = {}
    train = _chunks(train_list, graphs, derivs, shape, input, output)
    held_out = _chunks(valid_list, graphs, derivs, shape, input, output) if valid_list else None
    objective = ChainEgs(
        den=den,
        options=options or ChainOptions(),
        xent_output=xent_output,
        numerators=tuple(graphs),
        deriv_weights=tuple(derivs),
    )
    return ChainEgsData(train, held_out, objective, shape["k"])


def _chunks(
    examples: Sequence[Any],
    graphs: list[ChainGraph],
    derivs: list[np.ndarray],
    shape: dict[str, int],
    input: str,
    output: str,
) -> Chunks:
    features, numbers = [], []
    for eg in examples:
        arrays = chain_arrays(eg, input, output)
        if shape and shape != arrays.shape:
            raise TrainingError(
                f"chain eg {eg.key!r}: chunk shape {arrays.shape}, the first eg's {shape}; chain_egs takes egs of "
                "one shape only (stream_cegs and stream_chain_data train egs of several chunk sizes side by side)"
            )
        shape.update(arrays.shape)
        numbers.append(len(graphs))
        graphs.append(numerator_graph(arrays.supervision.fst, arrays.supervision.label_dim))
        derivs.append(arrays.deriv_weights)
        features.append(arrays.features)
    width = shape["width"]
    targets = np.repeat(np.asarray(numbers, np.int64)[:, None], width, axis=1)
    return Chunks(
        features=np.stack(features),
        targets=targets,
        weights=np.ones((len(examples), width), np.float32),
        left=shape["left"],
        right=shape["right"],
    )


class ChainArrays(NamedTuple):
    """One chain eg as training arrays: its input `features` float32 [left + width + right, dim], its `shape`
    (`k`: frame subsampling, `width`: input frames of its outputs, `left`, `right`: context), its supervision and
    its derivative weights float32 [width / k] (ones where the eg has none)."""

    features: np.ndarray
    shape: dict[str, int]
    supervision: Any
    deriv_weights: np.ndarray


def chain_arrays(eg: Any, input: str = "input", output: str = "output") -> ChainArrays:
    """A chain eg as `chain_egs` trains on it, with its checks (a TrainingError naming the eg)."""
    where = f"chain eg {eg.key!r}"
    inputs = {io.name: io for io in eg.inputs}
    outputs = {o.name: o for o in eg.outputs}
    if input not in inputs or output not in outputs:
        raise TrainingError(
            f"{where}: needs input {input!r} and output {output!r}; it has inputs {sorted(inputs)}, outputs "
            f"{sorted(outputs)}"
        )
    extra = sorted(set(inputs) - {input})
    if extra:
        raise TrainingError(f"{where}: inputs {extra} (e.g. i-vectors) are not used by chain_egs; give egs without")
    x, out = inputs[input], outputs[output]
    sup = out.supervision
    if sup.num_sequences != 1 or sup.e2e:
        raise TrainingError(f"{where}: {sup.num_sequences} sequences (merged or end-to-end egs); give single egs")
    if sup.weight != 1.0:
        raise TrainingError(f"{where}: supervision weight {sup.weight} (chain_egs trains weight-1 egs)")
    in_t, out_t = x.indexes[:, 1], out.indexes[:, 1]
    if (np.diff(in_t) != 1).any() or (x.indexes[:, 0] != 0).any():
        raise TrainingError(f"{where}: input {input!r} frames are not one contiguous sequence")
    k = int(out_t[1] - out_t[0]) if len(out_t) > 1 else 1
    if out_t[0] != 0 or (np.diff(out_t) != k).any() or len(out_t) != sup.frames_per_sequence:
        raise TrainingError(f"{where}: output frames {out_t.tolist()[:6]}... are not 0, k, 2k, ...")
    width = len(out_t) * k
    shape = {"k": k, "width": width, "left": int(-in_t[0]), "right": int(in_t[-1] - (width - 1))}
    deriv = np.ones(len(out_t), np.float32) if out.deriv_weights is None else out.deriv_weights
    return ChainArrays(np.asarray(x.matrix, np.float32), shape, sup, deriv)
