"""The optimisers and learning-rate schedules `symnet train` offers, built on optax.

`make_optimizer(settings, total_steps)` gives the optax transformation and the
schedule (step -> learning rate) of an `OptimizerSettings`:

- `name`: `sgd`, `adam` or `adamw` (`weight_decay` is adamw's decoupled decay;
  with sgd or adam it is `optax.add_decayed_weights` before the update);
- `schedule`: `constant`; `exponential`, Kaldi's: the rate decays
  geometrically from `lr` to `final_lr` over the run (steps/nnet3/train_dnn.py's
  initial and final effective learning rates; `final_lr` defaults to lr / 10,
  as Kaldi's scripts); `cosine`: from `lr` to `final_lr` (default 0) on a
  half cosine;
- `warmup`: steps of linear warm-up from 0 to `lr` before the schedule;
- `clip`: the gradient's global norm is clipped to it first
  (`optax.clip_by_global_norm`).

Kaldi's own per-component rules (max-change, max-param-change, l2,
learning-rate factors) are `symnet.train.kaldi_rules`, which `fit` wraps
around this optimiser for networks whose components ask for them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import optax

from ..base.errors import TrainingError

__all__ = ["make_optimizer", "OPTIMIZERS", "OptimizerSettings", "SCHEDULES"]

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "exponential", "cosine")


@attrs.frozen
class OptimizerSettings:
    """What `make_optimizer` builds (the names of `symnet train`'s options)."""

    name: str = "adam"
    lr: float = 2e-3
    schedule: str = "constant"
    final_lr: float | None = None
    warmup: int = 0
    clip: float | None = None
    weight_decay: float = 0.0

    def record(self) -> dict[str, object]:
        """The settings as a checkpoint records them (`fit(run=...)`: a resume with others is refused)."""
        default = OptimizerSettings()
        changed = {k: v for k, v in attrs.asdict(self).items() if k not in ("name", "lr") and v != getattr(default, k)}
        return {"optimizer": self.name, "lr": self.lr, **changed}


def make_optimizer(
    settings: OptimizerSettings, total_steps: int
) -> tuple[optax.GradientTransformation, Callable[[int], float]]:
    """The optax transformation of `settings` for a run of `total_steps` steps, and its learning rate per step."""
    s = settings
    if s.name not in OPTIMIZERS:
        raise TrainingError(f"unknown optimizer {s.name!r}; symnet train offers {', '.join(OPTIMIZERS)}")
    if s.schedule not in SCHEDULES:
        raise TrainingError(f"unknown schedule {s.schedule!r}; symnet train offers {', '.join(SCHEDULES)}")
    if not (math.isfinite(s.lr) and s.lr > 0):
        raise TrainingError(f"the learning rate must be a positive number, got {s.lr!r}")
    if s.final_lr is not None and not (math.isfinite(s.final_lr) and s.final_lr >= 0):
        raise TrainingError(f"the final learning rate must be a number >= 0, got {s.final_lr!r}")
    if s.final_lr is not None and s.schedule == "constant":
        raise TrainingError("a final learning rate needs a schedule that changes it (exponential or cosine)")
    if s.schedule == "exponential" and s.final_lr == 0:
        raise TrainingError("the exponential schedule decays to a final learning rate > 0")
    if s.weight_decay < 0 or s.warmup < 0 or (s.clip is not None and not s.clip > 0):
        raise TrainingError("weight decay and warm-up must be >= 0 and the clipping norm > 0")
    decay_steps = max(total_steps - s.warmup, 1)
    schedule: optax.Schedule
    if s.schedule == "exponential":
        final = s.lr / 10 if s.final_lr is None else s.final_lr
        schedule = optax.exponential_decay(s.lr, decay_steps, final / s.lr)
    elif s.schedule == "cosine":
        schedule = optax.cosine_decay_schedule(s.lr, decay_steps, (s.final_lr or 0.0) / s.lr)
    else:
        schedule = optax.constant_schedule(s.lr)
    if s.warmup:
        schedule = optax.join_schedules([optax.linear_schedule(0.0, s.lr, s.warmup), schedule], [s.warmup])
    parts: list[optax.GradientTransformation] = []
    if s.clip is not None:
        parts.append(optax.clip_by_global_norm(s.clip))
    if s.name == "adamw":
        parts.append(optax.adamw(schedule, weight_decay=s.weight_decay))
    else:
        if s.weight_decay:
            parts.append(optax.add_decayed_weights(s.weight_decay))
        parts.append(optax.sgd(schedule) if s.name == "sgd" else optax.adam(schedule))
    return optax.chain(*parts), lambda step: float(schedule(step))
