"""What Kaldi's `nnet3-compute` does, option for option (nnet3bin/nnet3-compute.cc, nnet-am-decodable-simple.cc).

For each utterance:

1. The network is put in test mode (batch-norm uses its stored statistics,
   dropout is off). Kaldi also applies `CollapseModel`, rewrites that do not
   change the outputs, so there is nothing to do here.
2. `frames_per_chunk` is rounded up to a multiple of
   lcm(`frame_subsampling_factor`, the network's modulus).
3. The output frames (every `frame_subsampling_factor`-th) are split into
   chunks of `frames_per_chunk`; the last chunk is shorter.
4. Each chunk gets `left + extra_left_context` input frames before its first
   output frame and `right + extra_right_context` after its last (the
   `_initial`/`_final` variants, when >= 0, replace them for the first and last
   chunk), taken from the utterance with frame indices clamped to the first and
   last frame.
5. Each chunk is a separate computation whose first output frame is t = 0, so
   recurrences restart at every chunk and IfDefined/Failover see the chunk's
   padded window as what is available.
6. An i-vector, if given, is one row at Index (0, 0, 0); with online i-vectors
   the row is the one for frame `first_output + (last_output - first_output) // 2`
   divided by the period (clamped to the last row, an error if that is more than
   50 frames off).
7. Log-priors are subtracted (`use_priors`), the acoustic scale applied, and
   with `apply_exp` the exponential taken.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import Round, Switch
from ..engine import ComputationRequest, compile
from ..engine.graph import Graph
from ..errors import ShapeError, SymnetError
from ..core.index import IndexSet


@attrs.frozen
class ComputeOptions:
    """nnet3-compute's options (Kaldi's names with dashes turned into underscores)."""

    frames_per_chunk: int = 50
    extra_left_context: int = 0
    extra_right_context: int = 0
    extra_left_context_initial: int = -1
    extra_right_context_final: int = -1
    frame_subsampling_factor: int = 1
    acoustic_scale: float = 1.0
    apply_exp: bool = False

    def __attrs_post_init__(self) -> None:
        if self.frames_per_chunk < 1 or self.frame_subsampling_factor < 1:
            raise SymnetError("--frames-per-chunk and --frame-subsampling-factor must be > 0")
        if self.extra_left_context < 0 or self.extra_right_context < 0:
            raise SymnetError("--extra-left-context and --extra-right-context must be >= 0")


def modulus(network: Any) -> int:
    """The network's shift-invariance modulus (Kaldi's Nnet::Modulus): lcm of Round moduli and Switch sizes."""
    result = 1
    for layer in Graph(dict(network.structure.outputs)).layers:
        if isinstance(layer, Round):
            result = math.lcm(result, layer.t_modulus)
        elif isinstance(layer, Switch):
            result = math.lcm(result, len(layer.parts))
    return result


class Nnet3Computer:
    """nnet3-compute for one network and one set of options; call it once per utterance.

    Test mode, the context and the chunk size are worked out once; chunks of one
    shape share one compiled computation.
    """

    def __init__(self, network: Any, options: ComputeOptions = ComputeOptions(), *, priors: np.ndarray | None = None):
        from ..components import set_test_mode

        self.network = set_test_mode(network, True)
        self.options = options
        self.log_priors = None if priors is None else np.log(np.asarray(priors, dtype=np.float32))
        self.graph = Graph(dict(self.network.structure.outputs))
        if "output" not in self.graph.outputs:
            raise SymnetError(f"nnet3-compute reads the output node 'output'; this network has {list(self.graph.outputs)}")
        self.left, self.right = self.network.context("output")
        step = math.lcm(options.frame_subsampling_factor, modulus(self.network))
        self.frames_per_chunk = step * -(-options.frames_per_chunk // step)

    def __call__(
        self,
        features: np.ndarray,
        *,
        ivector: np.ndarray | None = None,
        online_ivectors: np.ndarray | None = None,
        online_ivector_period: int = 0,
    ) -> np.ndarray:
        """The `output` for one utterance `[T, D]`, as nnet3-compute writes it."""
        options, network = self.options, self.network
        features = np.asarray(features, dtype=np.float32)
        if features.ndim != 2 or len(features) == 0:
            raise ShapeError(f"features must be a non-empty [T, D] matrix, got shape {features.shape}")
        if ivector is not None and online_ivectors is not None:
            raise SymnetError("give --ivectors or --online-ivectors, not both")
        if online_ivectors is not None and online_ivector_period <= 0:
            raise SymnetError("--online-ivectors needs --online-ivector-period > 0")
        _check_dims(self.graph, features, ivector, online_ivectors)
        f = options.frame_subsampling_factor
        num_frames = len(features)
        num_subsampled = -(-num_frames // f)
        per_chunk = self.frames_per_chunk // f
        pieces = []
        for start in range(0, num_subsampled, per_chunk):
            count = min(num_subsampled - start, per_chunk)
            first_out, last_out = start * f, (start + count - 1) * f
            extra_left = options.extra_left_context
            extra_right = options.extra_right_context
            if first_out == 0 and options.extra_left_context_initial >= 0:
                extra_left = options.extra_left_context_initial
            if start + count == num_subsampled and options.extra_right_context_final >= 0:
                extra_right = options.extra_right_context_final
            first_in, last_in = first_out - self.left - extra_left, last_out + self.right + extra_right
            frames = np.clip(np.arange(first_in, last_in + 1), 0, num_frames - 1)
            inputs = {"input": IndexSet.range(n=1, t=(first_in - first_out, last_in + 1 - first_out))}
            matrices = {"input": jnp.asarray(features[frames])}
            row = _ivector(ivector, online_ivectors, online_ivector_period, first_out, last_out - first_out)
            if row is not None:
                inputs["ivector"] = IndexSet.of([(0, 0, 0)])
                matrices["ivector"] = jnp.asarray(row[None, :], jnp.float32)
            outputs = {"output": IndexSet.of([(0, i * f) for i in range(count)])}
            request = ComputationRequest(inputs=inputs, outputs=outputs)
            pieces.append(np.asarray(compile(network, request)(network, matrices)["output"]))
        out = np.concatenate(pieces, axis=0)
        if self.log_priors is not None:
            out = out - self.log_priors[None, :]
        out = out * options.acoustic_scale
        return np.exp(out) if options.apply_exp else out


def nnet3_compute(network: Any, features: np.ndarray, options: ComputeOptions = ComputeOptions(), *,
                  priors: np.ndarray | None = None, **ivectors: Any) -> np.ndarray:
    """One utterance through `Nnet3Computer(network, options, priors=priors)`."""
    return Nnet3Computer(network, options, priors=priors)(features, **ivectors)


def _ivector(ivector, online, period: int, first_out: int, num_out: int) -> np.ndarray | None:
    if ivector is not None:
        return np.asarray(ivector, dtype=np.float32)
    if online is None:
        return None
    frame = first_out + num_out // 2
    row = frame // period
    if row >= len(online):
        if (row - (len(online) - 1)) * period > 50:
            raise SymnetError(
                f"could not get an i-vector for frame {frame}: only {len(online)} rows at "
                f"--online-ivector-period={period} (mismatched period?)"
            )
        row = len(online) - 1
    return np.asarray(online[row], dtype=np.float32)


def _check_dims(graph: Graph, features: np.ndarray, ivector, online) -> None:
    dim = graph.input_dims.get("input")
    if dim is not None and features.shape[1] != dim:
        raise ShapeError(f"the network expects 'input' features of dim {dim}, but these have dim {features.shape[1]}")
    has_ivector = "ivector" in graph.inputs
    given = ivector is not None or online is not None
    if has_ivector != given:
        raise ShapeError("the network " + ("takes" if has_ivector else "has no") + " 'ivector' input, but i-vectors "
                         + ("were not given" if has_ivector else "were given"))
    if has_ivector:
        width = (np.shape(ivector)[-1] if ivector is not None else np.shape(online)[-1])
        want = graph.input_dims.get("ivector")
        if want is not None and width != want:
            raise ShapeError(f"the network expects i-vectors of dim {want}, but these have dim {width}")
