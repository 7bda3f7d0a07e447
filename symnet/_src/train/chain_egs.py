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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import jax
import numpy as np

from ..chain.graph import ChainGraph, numerator_graph
from ..chain.objective import ChainOptions
from ..errors import ShapeError, TrainingError
from ..kaldi_io.fst import Fst
from .examples import Chunks
from .objectives import Chain, pack_numerators

__all__ = ["chain_egs", "ChainEgs", "ChainEgsData"]


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
        here = {"k": k, "width": width, "left": int(-in_t[0]), "right": int(in_t[-1] - (width - 1))}
        if shape and shape != here:
            raise TrainingError(f"{where}: chunk shape {here}, the first eg's {shape}; egs of one shape only")
        shape.update(here)
        numbers.append(len(graphs))
        graphs.append(numerator_graph(sup.fst, sup.label_dim))
        derivs.append(np.ones(len(out_t), np.float32) if out.deriv_weights is None else out.deriv_weights)
        features.append(np.asarray(x.matrix, np.float32))
    width = shape["width"]
    targets = np.repeat(np.asarray(numbers, np.int64)[:, None], width, axis=1)
    return Chunks(
        features=np.stack(features),
        targets=targets,
        weights=np.ones((len(examples), width), np.float32),
        left=shape["left"],
        right=shape["right"],
    )
