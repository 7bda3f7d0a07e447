"""Kaldi's objectives for output nodes, with their derivatives for `tape.backward`, and sequence objectives.

Every objective `fit` trains is an `Objective`; a name (`OBJECTIVE_NAMES`) is made the one it names once, by
`get_objective`, when `FitOptions` are made.

Per-frame objectives (Kaldi's, on flattened frames: `Linear` and `Quadratic`, whose `frame_loss` is
`objective(name, ...)`):

`linear`: the output is log-probabilities; the objective is the weighted mean
cross-entropy `-sum(w * logp[label]) / sum(w)` (Kaldi's `linear` objective
is the dot product of the output with the one-hot target; `xent` is an alias).
`quadratic`: `0.5 * sum(w * |y - target|^2) / sum(w)`.

Sequence objectives (`Objective` subclasses, e.g. `CTC`) see the output as `[batch, frames, dim]` with
per-frame weights `[batch, frames]` (0 on padding) and a per-sequence supervision that `Objective.supervision`
makes once from the chunks' frame-level targets (alignments). `Objective.loss` is a JAX function; the
derivative for `tape.backward` is `jax.value_and_grad` of it (or the objective's own custom_vjp). See
docs/training.md, "Objectives".
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import CheckpointError, ShapeError, SymnetError, TrainingError
from ..chain.chunk_numerator import chunk_numerator, state_frames
from ..chain.forward_backward import GraphArrays, graph_arrays
from ..chain.graph import ChainGraph, denominator_graph
from ..chain.objective import ChainOptions, chain_objective
from ..chain.phone_lm import estimate_phone_lm
from ..chain.phone_lm_graph import phone_lm_denominator
from ..chain.phone_numerator import phone_numerator, phone_runs
from ..chain.supervision import alignment_numerator, denominator_from_alignments
from ..chain.topology import Topology
from ..kaldi_io.fst import Fst

__all__ = [
    "Chain",
    "check_labels",
    "collapse",
    "CTC",
    "edit_distances",
    "FrameObjective",
    "get_objective",
    "greedy_decode",
    "Linear",
    "min_frames",
    "Objective",
    "objective",
    "OBJECTIVE_NAMES",
    "OBJECTIVES",
    "pack_numerators",
    "Quadratic",
]

#: Kaldi's per-frame objectives (output-node `objective=`).
OBJECTIVES = ("linear", "quadratic")


def objective(
    kind: str, output: jax.Array, targets: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`(loss, correct, delta)`: mean loss, count of correct frames (linear), d loss / d output."""
    total = jnp.maximum(weights.sum(), 1.0)
    if kind in ("linear", "xent"):
        onehot = jax.nn.one_hot(targets, output.shape[-1], dtype=output.dtype)
        loss = -(weights * (onehot * output).sum(-1)).sum() / total
        delta = -onehot * (weights / total)[:, None]
        correct = (weights * (jnp.argmax(output, -1) == targets)).sum()
        return loss, correct, delta
    if kind == "quadratic":
        diff = output - targets
        loss = 0.5 * (weights[:, None] * diff * diff).sum() / total
        return loss, jnp.zeros(()), diff * (weights / total)[:, None]
    raise SymnetError(f"unknown objective {kind!r}; Kaldi's are {OBJECTIVES}")


class Objective:
    """A sequence objective for `fit(objective=...)`.

    Subclasses set `name` and define `loss`; `supervision` and `check` have defaults for frame-level integer
    targets. In a training step the output of `[batch * frames]` rows (Kaldi's t-major order) is given to
    `loss` as `[batch, frames, dim]`, at the output frame rate (every `frame_subsampling_factor`-th frame).

    To plug in an objective that is a JAX function `f(outputs [B, T, D], lengths [B], supervision) -> scalar`
    (with its own custom_vjp or not): subclass, build the per-chunk supervision in `supervision`, and in
    `loss` return `f(output, (weights > 0).sum(1), supervision) / max(weights.sum(), 1)` and its statistics.
    A loss divided by another total returns it as the statistic `weight` (over a mesh each device's loss is
    weighted by its share of it).
    """

    name: ClassVar[str] = "objective"
    #: Whether the objective is per frame (Kaldi's `linear`/`quadratic`): the trainer then gives `frame_loss`
    #: the output's rows and the frames' targets, and the objective has no `supervision` or `loss`.
    per_frame: ClassVar[bool] = False

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        """ShapeError unless `targets [chunks, frames]` are integer labels in [0, out_dim)."""
        check_labels(self.name, targets, out_dim, what, output)

    def supervision(self, targets: np.ndarray, weights: np.ndarray, subsampling: int = 1) -> Mapping[str, np.ndarray]:
        """Per-chunk supervision from frame-level `targets [chunks, frames(, K)]` and `weights [chunks, frames]`
        (both at the full frame rate; the outputs are every `subsampling`-th frame): a mapping of arrays, each
        with a leading chunk axis (minibatches index it)."""
        return {"targets": targets[:, ::subsampling], "weights": weights[:, ::subsampling]}

    #: Other outputs of the network the objective reads (their values come to `loss` as `extra`, at the
    #: same frames as the output's; `fit` checks each has the output's dim and backpropagates into it).
    @property
    def extra_outputs(self) -> tuple[str, ...]:
        return ()

    def loss(
        self,
        output: jax.Array,
        weights: jax.Array,
        supervision: Mapping[str, jax.Array],
        extra: Mapping[str, jax.Array] | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(loss normalised per output frame: a sum over sequences / max(sum(weights), 1), statistics).

        `output [B, T, D]`, `weights [B, T]` (output frame rate, 0 on padding), `supervision`: this
        minibatch's rows of `supervision(...)`, `extra`: the `extra_outputs`' values `[B, T, D]` by name
        (an objective without extra outputs may define `loss` without this argument).
        Statistics: sums over the minibatch, at least `correct` and `count` (the loop reports
        `correct / count` as the accuracy)."""
        raise NotImplementedError

    def value_and_grad(
        self,
        output: jax.Array,
        weights: jax.Array,
        supervision: Mapping[str, jax.Array],
        extra: Mapping[str, jax.Array] | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array, dict[str, jax.Array]]:
        """(loss, statistics, d loss / d output, d loss / d each extra output): `jax.value_and_grad` of `loss`."""
        if not self.extra_outputs:  # `loss` may take three arguments (an objective of one output)
            (value, stats), delta = jax.value_and_grad(self.loss, has_aux=True)(output, weights, supervision)
            return value, stats, delta, {}
        (value, stats), (delta, extra_deltas) = jax.value_and_grad(self.loss, argnums=(0, 3), has_aux=True)(
            output, weights, supervision, dict(extra or {})
        )
        return value, stats, delta, extra_deltas

    def frame_loss(
        self, output: jax.Array, targets: jax.Array, weights: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """A per-frame objective's `(loss, correct frames, d loss / d output)` of output rows `[rows, dim]`."""
        raise NotImplementedError(f"the {self.name!r} objective is not per frame")

    def describe(self) -> str:
        """What a checkpoint records as the objective (a resume with another is refused)."""
        return self.name

    def run_state(self) -> dict[str, Any]:
        """What the objective has kept from the minibatches so far that later ones depend on, as JSON values: a
        checkpoint saves it and a resume gives it back (`resume`), so the rest of the run is the one it would
        have been. Most objectives keep nothing."""
        return {}

    def resume(self, state: Mapping[str, Any], path: str) -> None:
        """Take back a checkpoint's `run_state()` (CheckpointError naming `path` where it is not one)."""
        if state:
            raise CheckpointError(
                f"{path}: the {self.name!r} objective keeps no state; the checkpoint has {state!r:.60}"
            )


class FrameObjective(Objective):
    """Kaldi's per-frame objectives on the flattened frames (`objective(name, ...)`), by their Kaldi name."""

    per_frame: ClassVar[bool] = True

    def frame_loss(
        self, output: jax.Array, targets: jax.Array, weights: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        return objective(self.name, output, targets, weights)


@attrs.frozen
class Linear(FrameObjective):
    """Kaldi's `linear` objective (`xent`): the cross-entropy of log-probability outputs and one label per frame."""

    name: ClassVar[str] = "linear"


@attrs.frozen
class Quadratic(FrameObjective):
    """Kaldi's `quadratic` objective: half the squared distance of the output to one target vector per frame."""

    name: ClassVar[str] = "quadratic"

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        """ShapeError unless `targets [chunks, frames, out_dim]` are finite real vectors."""
        if targets.ndim != 3 or targets.shape[-1] != out_dim:
            raise ShapeError(
                f"{what}: the 'quadratic' objective needs a target vector of dim {out_dim} "
                f"(output {output!r}) per frame, got targets of shape {targets.shape[2:] or '()'} "
                "per frame"
            )
        if not np.issubdtype(targets.dtype, np.number) or np.issubdtype(targets.dtype, np.complexfloating):
            raise ShapeError(f"{what}: the 'quadratic' objective needs real-valued targets, got {targets.dtype}")
        finite = np.isfinite(targets)
        if not finite.all():
            raise ShapeError(f"{what}: the targets contain {targets[~finite][0]}")


@attrs.frozen
class CTC(Objective):
    """Connectionist temporal classification (`optax.ctc_loss`) on a per-frame output.

    The output is taken as unnormalised log-probabilities: optax applies log-softmax, which leaves a
    log-softmax output unchanged, so a `LogSoftmax` output and a plain affine output both work. `blank` is the
    blank's index in the output (default 0). The supervision of a chunk is its frame labels with repeats
    collapsed and `blank` labels dropped (a phone alignment gives the chunk's phone sequence). A chunk whose
    labels cannot be aligned to its output frames (more labels, plus blanks between repeats, than frames) is
    a warning when its supervision is made, and it is left out of the loss (weight 0).
    Statistics: `correct` = reference tokens - edit distance of the greedy decode, `count` = tokens, so the
    reported accuracy is 1 - token error rate.
    """

    blank: int = 0
    name: ClassVar[str] = "ctc"

    def describe(self) -> str:
        return "ctc" if self.blank == 0 else f"ctc(blank={self.blank})"

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        check_labels(self.name, targets, out_dim, what, output)
        if not 0 <= self.blank < out_dim:
            raise ShapeError(
                f"{what}: the CTC blank {self.blank} is not an index of output {output!r} of dim {out_dim}"
            )
        if out_dim < 2:
            raise ShapeError(f"{what}: CTC needs an output of dim >= 2 (blank and a label), {output!r} has {out_dim}")

    def supervision(self, targets: np.ndarray, weights: np.ndarray, subsampling: int = 1) -> Mapping[str, np.ndarray]:
        sequences = [collapse(t[w > 0], self.blank) for t, w in zip(targets, weights)]
        frames = (weights[:, ::subsampling] > 0).sum(1)
        need = np.array([len(s) + int(np.sum(s[1:] == s[:-1])) for s in sequences])
        short = int(np.sum(need > frames))
        if short:
            warnings.warn(
                f"CTC: {short} of {len(sequences)} chunks have more labels than their {subsampling}-subsampled "
                "output frames can align (labels + blanks between repeats); they are left out of the loss "
                "(use longer chunks or a smaller frame subsampling factor)",
                stacklevel=2,
            )
        longest = max(1, max(len(s) for s in sequences))
        labels = np.zeros((len(sequences), longest), np.int32)
        paddings = np.ones((len(sequences), longest), np.float32)
        for i, s in enumerate(sequences):
            labels[i, : len(s)], paddings[i, : len(s)] = s, 0.0
        return {"labels": labels, "label_paddings": paddings}

    def loss(
        self,
        output: jax.Array,
        weights: jax.Array,
        supervision: Mapping[str, jax.Array],
        extra: Mapping[str, jax.Array] | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        import optax

        labels, label_paddings = supervision["labels"], supervision["label_paddings"]
        frames = weights > 0
        frame_paddings = (~frames).astype(output.dtype)
        per_sequence = optax.ctc_loss(output, frame_paddings, labels, label_paddings, blank_id=self.blank)
        lengths = (1 - label_paddings).sum(-1)
        # A sequence that cannot be aligned (optax's loss is then ~1e5) or has no frames is left out.
        usable = (frames.sum(-1) >= min_frames(labels, label_paddings)) & frames.any(-1)
        total = jnp.where(usable[:, None], weights, 0.0).sum()
        loss = jnp.where(usable, per_sequence, 0.0).sum() / jnp.maximum(total, 1.0)
        hyp, hyp_lengths = greedy_decode(jax.lax.stop_gradient(output), frames, self.blank)
        errors = edit_distances(labels, lengths.astype(jnp.int32), hyp, hyp_lengths)
        tokens = jnp.where(usable, lengths, 0.0).sum()
        correct = tokens - jnp.where(usable, errors, 0).sum()
        return loss, {"correct": correct, "count": tokens, "weight": total}


def _normalized(numerator: ChainGraph, den: ChainGraph) -> ChainGraph:
    """A chunk's open-ended numerator weighted by the denominator as `nnet3-chain-get-egs` weights its chunks."""
    if not numerator.final.any():  # no complete path: nothing to weight
        return numerator
    frames = int(state_frames(numerator).max())
    return chunk_numerator(numerator, 0, frames, den)


@attrs.frozen(eq=False)
class Chain(Objective):
    """Kaldi's chain (LF-MMI) objective (`symnet.chain.chain_objective`) on an output of pdf pseudo
    log-likelihoods (no log-softmax), with numerators from each chunk's alignment.

    Two kinds of alignment:

    - with `topology` (a `symnet.chain.Topology`; Kaldi's recipe): the targets are *phone* ids (>= 1) per
      frame, and each chunk's numerator is Kaldi's chain-get-supervision graph of its phones
      (`symnet._src.chain.phone_numerator`, with `left_tolerance` and `right_tolerance`, default 5 and 5, open at
      the chunk's ends as Kaldi's chunk splitting leaves them), weighted by the denominator as Kaldi's egs
      are (`chunk_numerator`: each pdf sequence weighted by its best path through the denominator, as
      `nnet3-chain-get-egs` weights it); the output has one pdf per phone and
      pdf-class (`pdfs`, default gmm-init-mono's numbering); without `den` the denominator is the phone LM of
      the training chunks' phone sequences (`estimate_phone_lm` with Kaldi's defaults) through the
      topology (`phone_lm_denominator`). Statistics: the frames whose argmax pdf belongs to the aligned phone;
    - without (symnet's own construction): the targets are pdf-ids per frame, as below.

    `den`: the denominator graph, a `symnet.chain.ChainGraph`: Kaldi's den.fst by
    `symnet.chain.read_denominator_graph(path, num_pdfs)`, or symnet's pdf bigram by
    `symnet.chain.denominator_from_alignments`; a den.fst as an `Fst` (`symnet.chain.read_fst(path)`): `fit`
    makes its graph for the output's dim; None (and `fit(objective="chain")`): `fit` makes the pdf bigram
    from the training alignments at the output frame rate (`for_output`). `options`: Kaldi's ChainTrainingOptions
    (`l2_regularize`, `leaky_hmm_coefficient`, `out_of_range_regularize`, `xent_regularize`).
    `xent_output`: the name of the network's cross-entropy output (Kaldi's `output-xent`, a log-softmax of the
    output's dim at the same frames), trained as Kaldi trains it with `xent_regularize` > 0: its derivative is
    `xent_regularize` times the numerator posteriors (both are needed together; Kaldi's recipes use
    `xent_regularize=0.1` and give `output-xent` a learning-rate factor of `0.5 / xent_regularize`, which
    `kaldi_rules` applies for a network from a Kaldi config).
    `tolerance`: the numerator of a chunk is `symnet.chain.alignment_numerator(alignment, subsampling=k,
    tolerance=tolerance)`: at output frame j every pdf aligned within `tolerance` input frames of frame j*k
    (0: the subsampled alignment itself). This is symnet's construction, not Kaldi's chain-get-supervision
    (phone alignments through the tree and topology with left/right tolerance on phone boundaries).

    The loss is `-(objf + l2_term) / frames` (Kaldi's per-frame objective, negated); its gradient is Kaldi's
    `numerator - denominator occupation` (the objective's custom_vjp), and with `xent_output` the gradient
    also has `output-xent`'s term (its objective is not in the loss, as Kaldi reports it apart).
    Statistics: frames whose argmax is the aligned pdf (`correct`) of the output frames (`count`): the frame
    accuracy."""

    den: ChainGraph | Fst | None = None
    options: ChainOptions = ChainOptions()
    tolerance: int = 0
    xent_output: str | None = None
    topology: Topology | None = None
    pdfs: Mapping[int, Sequence[int]] | None = None
    left_tolerance: int | None = None
    right_tolerance: int | None = None
    name: ClassVar[str] = "chain"

    def __attrs_post_init__(self) -> None:
        if self.den is not None and not isinstance(self.den, (ChainGraph, Fst)):
            raise TrainingError(
                f"Chain(den=...) takes a symnet.chain.ChainGraph (read_denominator_graph or "
                "denominator_from_alignments) or a den.fst's symnet.chain.Fst (read_fst), got "
                f"{type(self.den).__name__}"
            )
        if not isinstance(self.options, ChainOptions):
            raise TrainingError(f"Chain(options=...) takes a symnet.chain.ChainOptions, got {self.options!r:.60}")
        if self.xent_output is not None and not isinstance(self.xent_output, str):
            raise TrainingError(f"Chain: xent_output must be an output's name, got {self.xent_output!r}")
        if bool(self.options.xent_regularize) != (self.xent_output is not None):
            raise TrainingError(
                f"Chain: xent_regularize={self.options.xent_regularize} with xent_output={self.xent_output!r}: "
                "the cross-entropy output is trained only with both (e.g. xent_output='output-xent', "
                "options=ChainOptions(xent_regularize=0.1), as Kaldi's recipes); give both or neither"
            )
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, np.integer)) or self.tolerance < 0:
            raise TrainingError(f"Chain: tolerance must be an integer >= 0 (input frames), got {self.tolerance!r}")
        if self.topology is None:
            given = [n for n in ("pdfs", "left_tolerance", "right_tolerance") if getattr(self, n) is not None]
            if given:
                raise TrainingError(f"Chain: {', '.join(given)} apply to phone alignments: give topology= too")
        else:
            if not isinstance(self.topology, Topology):
                raise TrainingError(f"Chain(topology=...) takes a symnet.chain.Topology, got {self.topology!r:.60}")
            if self.tolerance:
                raise TrainingError(
                    "Chain: tolerance applies to pdf alignments; with a topology give left_tolerance and "
                    "right_tolerance (Kaldi's, default 5 and 5)"
                )

    def describe(self) -> str:
        o = self.options
        den = "from-alignments" if self.den is None else "fst" if isinstance(self.den, Fst) else _graph_digest(self.den)
        return (
            f"chain(den={den}, tolerance={self.tolerance}, l2_regularize={o.l2_regularize}, "
            f"leaky_hmm_coefficient={o.leaky_hmm_coefficient}, out_of_range_regularize={o.out_of_range_regularize}"
            + (f", xent_output={self.xent_output}, xent_regularize={o.xent_regularize}" if self.xent_output else "")
            + (self._describe_topology() if self.topology is not None else "")
            + ")"
        )

    def _describe_topology(self) -> str:
        assert self.topology is not None
        digest = hashlib.sha256(repr((sorted(self.topology.phones.items()), sorted(self._pdf_map().items()))).encode())
        return f", topology={digest.hexdigest()[:12]}, tolerances=({self.left_tolerance}, {self.right_tolerance})"

    @property
    def extra_outputs(self) -> tuple[str, ...]:
        return () if self.xent_output is None else (self.xent_output,)

    def _pdf_map(self) -> dict[int, tuple[int, ...]]:
        assert self.topology is not None
        given = self.topology.monophone_pdfs() if self.pdfs is None else self.pdfs
        return {int(p): tuple(int(x) for x in v) for p, v in given.items()}

    def _phone_of_pdf(self) -> np.ndarray:
        """Per pdf-id, its phone (0 for a pdf of no phone)."""
        pdfs = self._pdf_map()
        out = np.zeros(1 + max(max(v) for v in pdfs.values()), np.int32)
        for phone, ids in pdfs.items():
            out[list(ids)] = phone
        return out

    def with_denominator(self, den: ChainGraph) -> Chain:
        """This objective with denominator graph `den`."""
        return attrs.evolve(self, den=den)

    def for_output(self, targets: np.ndarray, weights: np.ndarray, num_pdfs: int, subsampling: int) -> Chain:
        """This objective with its denominator graph made for an output of `num_pdfs`: a den.fst `Fst` as Kaldi's
        DenominatorGraph, None as symnet's pdf bigram of the alignments `targets [chunks, frames]` (their frames
        of weight > 0) at frame subsampling `subsampling`; a ChainGraph as it is."""
        if isinstance(self.den, Fst):
            return self.with_denominator(denominator_graph(self.den, num_pdfs))
        if self.den is not None:
            return self
        alignments = [t[w > 0] for t, w in zip(targets, weights)]
        if self.topology is not None:
            lm = estimate_phone_lm(phone_runs(a)[0] for a in alignments if len(a))
            return self.with_denominator(phone_lm_denominator(lm, self.topology, self._pdf_map()))
        return self.with_denominator(denominator_from_alignments(alignments, num_pdfs, subsampling=subsampling))

    def check(self, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
        if targets.ndim != 2 or not np.issubdtype(targets.dtype, np.integer):
            raise ShapeError(
                f"{what}: the 'chain' objective makes its numerators from one integer pdf-id per frame (an "
                f"alignment), got {targets.dtype} targets of shape {targets.shape[2:] or '()'} per frame (for "
                "Kaldi's chain egs use symnet.kaldi.read_cegs and symnet.chain.chain_objective)"
            )
        if self.topology is None:
            check_labels(self.name, targets, out_dim, what, output)
        else:
            unknown = sorted(set(np.unique(targets).tolist()) - set(self.topology.phones) - {0})
            if unknown:
                raise ShapeError(
                    f"{what}: phone {unknown[0]} has no HMM in the chain topology (the targets must be phone ids, "
                    f"the topology's are {sorted(self.topology.phones)[:10]}...)"
                )
            if (pdfs := len(self._phone_of_pdf())) != out_dim:
                raise ShapeError(f"{what}: the chain topology has {pdfs} pdfs, output {output!r} dim {out_dim}")
        if isinstance(self.den, ChainGraph) and self.den.num_pdfs != out_dim:
            raise ShapeError(
                f"{what}: the chain denominator graph has {self.den.num_pdfs} pdfs, output {output!r} dim {out_dim}"
            )

    def supervision(self, targets: np.ndarray, weights: np.ndarray, subsampling: int = 1) -> Mapping[str, np.ndarray]:
        """Each chunk's numerator graph (`alignment_numerator` of its frames of weight > 0, which must be a
        prefix of weight-1 frames), padded to one size, and its alignment at the output frames."""
        if targets.ndim != 2:
            raise ShapeError(f"the chain objective needs [chunks, frames] pdf alignments, got shape {targets.shape}")
        valid = weights > 0
        if not np.isin(weights, (0.0, 1.0)).all() or (valid[:, 1:] & ~valid[:, :-1]).any():
            raise TrainingError(
                "the chain objective weights whole sequences: each chunk's frame weights must be 1 on a prefix of "
                "its frames and 0 after (padding); other per-frame weights are not supported"
            )
        if self.topology is not None:
            if not isinstance(self.den, ChainGraph):
                raise TrainingError(
                    "Chain(topology=...): the numerators are weighted by the denominator graph (as Kaldi's egs are), "
                    "so it must be made first: for_output(...) or Chain(den=...)"
                )
            den = self.den
            left = 5 if self.left_tolerance is None else self.left_tolerance
            right = 5 if self.right_tolerance is None else self.right_tolerance
            pdfs = self._pdf_map()
            graphs = [
                _normalized(
                    phone_numerator(
                        t[v],
                        self.topology,
                        pdfs,
                        subsampling=subsampling,
                        left_tolerance=left,
                        right_tolerance=right,
                        open_ends=True,
                    ),
                    den,
                )
                if v.any()
                else None
                for t, v in zip(targets, valid)
            ]
            failed = sum(g is not None and not g.final.any() for g in graphs)
            if failed:
                warnings.warn(
                    f"Chain: {failed} of {len(graphs)} chunks have no numerator path (more phones than their "
                    f"{subsampling}-subsampled frames can hold with this topology); Kaldi's default objective "
                    "counts for them, with no derivative",
                    stacklevel=2,
                )
        else:
            num_pdfs = self.den.num_pdfs if isinstance(self.den, ChainGraph) else int(targets.max(initial=0)) + 1
            graphs = [
                alignment_numerator(t[v], num_pdfs, subsampling=subsampling, tolerance=self.tolerance)
                if v.any()
                else None
                for t, v in zip(targets, valid)
            ]
        return pack_numerators(graphs, targets[:, ::subsampling].astype(np.int32))

    def loss(
        self,
        output: jax.Array,
        weights: jax.Array,
        supervision: Mapping[str, jax.Array],
        extra: Mapping[str, jax.Array] | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        if not isinstance(self.den, ChainGraph):
            raise TrainingError(
                "Chain() has no denominator graph: pass Chain(den=...) (symnet.chain.read_denominator_graph or "
                "denominator_from_alignments), or train with fit, which makes one (from a den.fst Fst, or from "
                "the training alignments)"
            )
        s = supervision
        num = GraphArrays(s["src"], s["dst"], s["pdf"], s["log_prob"], s["log_initial"], s["log_final"])
        frames = weights > 0
        lengths = frames.sum(1).astype(jnp.int32)
        result = chain_objective(
            output,
            graph_arrays(self.den, output.dtype),
            num,
            lengths,
            (lengths > 0).astype(output.dtype),
            options=self.options,
            xent_output=None if self.xent_output is None else (extra or {})[self.xent_output],
        )
        # The value is the chain objective's; the gradient also has output-xent's term (Kaldi's derivative).
        xent = self.options.xent_regularize * result.xent_objf
        total = result.objf + result.l2_term + (xent - jax.lax.stop_gradient(xent))
        loss = -total / jnp.maximum(result.weight, 1.0)
        # Where there is no alignment (chain egs: -1), the numerator posteriors' best pdf is the reference.
        aligned = s["alignment"][:, : output.shape[1]]
        aligned = jnp.where(aligned >= 0, aligned, jnp.argmax(result.num_post, -1))
        best = jnp.argmax(jax.lax.stop_gradient(output), -1)
        if self.topology is not None:  # the aligned phone's pdfs are right
            best = jnp.asarray(self._phone_of_pdf())[best]
        correct = (frames & (best == aligned)).sum()
        statistics = {"correct": correct.astype(output.dtype), "count": frames.sum().astype(output.dtype)}
        return loss, {**statistics, "weight": result.weight}


def pack_numerators(graphs: Sequence[ChainGraph | None], alignment: np.ndarray) -> dict[str, np.ndarray]:
    """Per-chunk numerator graphs as arrays with a leading chunk axis, padded to one size (None: a chunk with
    no frames, no path), and each chunk's `alignment [chunks, output frames]` (-1: none), for `Chain.loss`."""
    arcs = max([g.num_arcs for g in graphs if g is not None] + [1])
    states = max([g.num_states for g in graphs if g is not None] + [alignment.shape[1] + 1])
    n = len(graphs)
    out: dict[str, np.ndarray] = {
        "src": np.zeros((n, arcs), np.int32),
        "dst": np.zeros((n, arcs), np.int32),
        "pdf": np.zeros((n, arcs), np.int32),
        "log_prob": np.full((n, arcs), -np.inf, np.float32),
        "log_initial": np.full((n, states), -np.inf, np.float32),
        "log_final": np.full((n, states), -np.inf, np.float32),
    }
    for i, g in enumerate(graphs):
        if g is None:
            continue
        for key in ("src", "dst", "pdf", "log_prob"):
            out[key][i, : g.num_arcs] = getattr(g, key)
        out["log_initial"][i, : g.num_states] = g.log_initial
        out["log_final"][i, : g.num_states] = g.log_final
    out["alignment"] = alignment
    return out


def _graph_digest(graph: ChainGraph) -> str:
    h = hashlib.sha256()
    for a in (graph.src, graph.dst, graph.pdf, graph.log_prob, graph.log_initial, graph.log_final):
        h.update(np.ascontiguousarray(a).tobytes())
    return f"{graph.num_states}-states-{graph.num_arcs}-arcs-{h.hexdigest()[:12]}"


def check_labels(name: str, targets: np.ndarray, out_dim: int, what: str, output: str) -> None:
    """ShapeError unless `targets [chunks, frames]` are integer labels in [0, out_dim) (`what`: the data)."""
    if targets.ndim != 2 or not np.issubdtype(targets.dtype, np.integer):
        raise ShapeError(
            f"{what}: the {name!r} objective needs one integer label per frame (an alignment), got "
            f"{targets.dtype} targets of shape {targets.shape[2:] or '()'} per frame"
        )
    bad = (targets < 0) | (targets >= out_dim)
    if bad.any():
        raise ShapeError(
            f"{what}: label {int(targets[bad][0])} is out of range for output {output!r} of dim {out_dim} "
            f"(labels must be in [0, {out_dim}))"
        )


#: Every name `fit(objective=...)` takes, and what makes its objective: `xent` is `linear`, `chain` is
#: `Chain()` (fit makes its denominator from the training alignments).
_NAMED: dict[str, Callable[[], Objective]] = {
    "linear": Linear,
    "xent": Linear,
    "quadratic": Quadratic,
    "ctc": CTC,
    "chain": Chain,
}
OBJECTIVE_NAMES = tuple(_NAMED)


def get_objective(objective: str | Objective) -> Objective:
    """The objective `fit(objective=...)` names (`OBJECTIVE_NAMES`), or an `Objective` as it is; a TrainingError
    names anything else and lists the names."""
    if isinstance(objective, Objective):
        return objective
    if not isinstance(objective, str):
        raise TrainingError(
            f"objective must be a string (one of {OBJECTIVE_NAMES}) or a symnet.train.Objective, got {objective!r:.60}"
        )
    if objective not in _NAMED:
        raise TrainingError(f"unknown objective {objective!r}; fit takes {OBJECTIVE_NAMES} or a symnet.train.Objective")
    return _NAMED[objective]()


# -- CTC helpers ---------------------------------------------------------------------------------------------


def collapse(labels: np.ndarray, blank: int | None = None) -> np.ndarray:
    """`labels` with runs of equal labels collapsed to one, then `blank` labels dropped (numpy)."""
    labels = np.asarray(labels)
    if not len(labels):
        return labels.astype(np.int32)
    keep = np.ones(len(labels), bool)
    keep[1:] = labels[1:] != labels[:-1]
    out = labels[keep]
    return (out[out != blank] if blank is not None else out).astype(np.int32)


def min_frames(labels: jax.Array, label_paddings: jax.Array) -> jax.Array:
    """Per sequence, the fewest frames a CTC alignment of `labels` needs: its length plus one blank between
    each pair of equal neighbours."""
    valid = label_paddings == 0
    repeats = (labels[:, 1:] == labels[:, :-1]) & valid[:, 1:] & valid[:, :-1]
    return valid.sum(-1) + repeats.sum(-1)


def greedy_decode(output: jax.Array, frames: jax.Array, blank: int = 0) -> tuple[jax.Array, jax.Array]:
    """Best-path CTC decode of `output [B, T, D]` over the frames where `frames [B, T]` is true: the argmax
    per frame, repeats collapsed, blanks dropped. Returns `(labels [B, T]` padded with `blank`, `lengths [B])`."""
    best = jnp.where(frames, jnp.argmax(output, -1), blank)
    previous = jnp.concatenate([jnp.full_like(best[:, :1], -1), best[:, :-1]], axis=1)
    keep = (best != previous) & (best != blank) & frames
    position = jnp.cumsum(keep, axis=1) - 1
    width = best.shape[1]
    target = jnp.where(keep, position, width)  # past the end: dropped
    rows = jnp.broadcast_to(jnp.arange(best.shape[0])[:, None], best.shape)
    out = jnp.full_like(best, blank).at[rows, target].set(best, mode="drop")
    return out, keep.sum(-1)


def edit_distances(ref: jax.Array, ref_lengths: jax.Array, hyp: jax.Array, hyp_lengths: jax.Array) -> jax.Array:
    """Levenshtein distances `[B]` between `ref [B, L]` and `hyp [B, M]` (their first `*_lengths` entries), in
    JAX: one `lax.scan` over reference positions, each row's insertions by a cumulative minimum."""

    def one(r: jax.Array, lr: jax.Array, h: jax.Array, lh: jax.Array) -> jax.Array:
        cols = jnp.arange(h.shape[0] + 1)

        def row(previous: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
            substitute = previous[:-1] + (h != token)
            best = jnp.concatenate([previous[:1] + 1, jnp.minimum(previous[1:] + 1, substitute)])
            current = jax.lax.cummin(best - cols) + cols
            return current, current

        _, rows = jax.lax.scan(row, cols, r)
        table = jnp.concatenate([cols[None], rows])
        return table[lr, lh]

    return jax.vmap(one)(ref, ref_lengths, hyp, hyp_lengths)
