"""nnet3-compute over Kaldi tables: the network's `output` for every utterance of a features rspecifier,
written to a matrix wspecifier, all of it or (on an error) nothing. What `symnet compute` runs.

The computation is `symnet._src.kaldi.compute.nnet3_compute`'s (a `ComputeJob`: utterances added one at a time,
each output written as soon as it is computed); the tables are read by `symnet._src.train.kaldi_data`,
which sits beside `kaldi`, so this module is one layer above both.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .base.errors import SymnetError
from .kaldi.compute.ark_writer import ArchiveWriter
from .kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer, check_ivector_options
from .kaldi_io.tables import iter_table, read_table

if TYPE_CHECKING:
    from .network import Network

__all__ = ["ComputeSummary", "compute_table", "warn_non_finite"]


class ComputeSummary(NamedTuple):
    """What `compute_table` did: utterances computed and written, and those skipped (Kaldi's 'failed for')."""

    done: int
    failed: int


def compute_table(
    network: Network,
    features: str,
    output: str,
    options: ComputeOptions | None = None,
    *,
    priors: np.ndarray | None = None,
    ivectors: str | None = None,
    online_ivectors: str | None = None,
    online_ivector_period: int = 0,
    allow_pipes: bool = False,
) -> ComputeSummary:
    """Kaldi's nnet3-compute: `network`'s `output` for every utterance of the table `features`, written to
    `output` (`Nnet3Computer`'s numbers, with `options` and `priors` as there).

    Args:
        network: the network (test mode is set here); its `output` node is computed.
        features: a features rspecifier (`scp:feats.scp`, `ark:feats.ark`, `ark:cmd |`).
        output: a matrix wspecifier (`ark:out.ark`, `ark,t:out.txt`, `ark,scp:out.ark,out.scp`, `ark:-`),
            written atomically: on any error it is left as it was (or absent).
        options: nnet3-compute's options (default: Kaldi's, `ComputeOptions()`).
        priors: an acoustic model's priors, whose logs are subtracted from the output (`--use-priors`).
        ivectors: an rspecifier of one i-vector per utterance (not with `online_ivectors`).
        online_ivectors: an rspecifier of i-vectors every `online_ivector_period` frames per utterance.
        online_ivector_period: frames between rows of `online_ivectors`.
        allow_pipes: run the shell commands that scp entries name (a command in the rspecifier always runs).

    As in Kaldi, an utterance without frames or without an i-vector is skipped with a warning (naming it),
    and a warning names an utterance whose features or output have NaN or Inf entries. Features that are
    not a matrix or of the wrong dim are a SymnetError naming the utterance, and so is a table of which no
    utterance was computed; nothing is written then.
    """
    check_ivector_options(bool(ivectors), bool(online_ivectors), online_ivector_period)
    computer = Nnet3Computer(network, options or ComputeOptions(), priors=priors)
    input_dim = computer.graph.input_dims.get("input")
    per_utterance = read_table(ivectors, "i-vectors", allow_pipes=allow_pipes) if ivectors else None
    online = read_table(online_ivectors, "online i-vectors", allow_pipes=allow_pipes) if online_ivectors else None
    writer = ArchiveWriter(output)
    job = computer.job(online_ivector_period)
    done = failed = 0

    def write(outputs: list[tuple[Any, np.ndarray]]) -> None:
        nonlocal done
        for utt, out in outputs:
            warn_non_finite(utt, "output", out)
            writer.write(utt, out)
            done += 1

    try:
        for utt, feats in iter_table(features, "features", allow_pipes=allow_pipes):
            feats = np.asarray(feats)
            if feats.ndim != 2:
                raise SymnetError(f"utterance {utt}: the features are not a matrix (shape {feats.shape})")
            if len(feats) == 0:
                warnings.warn(f"zero-length utterance {utt}: skipped", stacklevel=2)
                failed += 1
                continue
            if input_dim is not None and feats.shape[1] != input_dim:
                raise SymnetError(
                    f"utterance {utt}: the features have dim {feats.shape[1]}, but the network's "
                    f"input has dim {input_dim}"
                )
            extra: dict[str, Any] = {}
            if per_utterance is not None:
                if utt not in per_utterance:
                    warnings.warn(f"no i-vector for utterance {utt} in {ivectors}: skipped", stacklevel=2)
                    failed += 1
                    continue
                extra["ivector"] = np.asarray(per_utterance[utt]).reshape(-1)
            if online is not None:
                if utt not in online:
                    warnings.warn(
                        f"no online i-vectors for utterance {utt} in {online_ivectors}: skipped", stacklevel=2
                    )
                    failed += 1
                    continue
                extra["online_ivectors"] = np.asarray(online[utt])
            warn_non_finite(utt, "input features", feats)
            write(job.add(utt, feats, **extra))
        write(job.finish())
        if done == 0:
            raise SymnetError(f"no utterance was computed (failed for {failed}); nothing written")
        writer.commit()
    finally:
        writer.abort()
    return ComputeSummary(done, failed)


def warn_non_finite(utt: str, what: str, matrix: Any) -> None:
    """Warn (naming the utterance) if `matrix` has NaN or Inf entries: they propagate through the network
    as in Kaldi's arithmetic, so the output is not to be trusted."""
    values = np.asarray(matrix)
    if not np.issubdtype(values.dtype, np.floating):
        return
    with np.errstate(over="ignore", invalid="ignore"):  # a sum that overflows only means: look closer
        if np.isfinite(values.sum()):  # a NaN or Inf anywhere makes the sum non-finite: one pass, no temporary
            return
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        warnings.warn(
            f"utterance {utt}: the {what} have {int(bad.sum())} non-finite values (first {values[row, col]} "
            f"at frame {row}, dim {col})",
            stacklevel=2,
        )
