"""Data-parallel training over a `jax.sharding.Mesh`: each minibatch split over the mesh's data axis.

`fit(..., mesh=mesh)` builds a `DataParallel`: the minibatch's chunks are cut
into one group of `batch_size / devices` consecutive chunks per device along
`data_axis` (each group in Kaldi's own (t, n) row order), the parameters,
state and optimiser state are replicated, and one `jax.jit` runs a
`jax.shard_map` in which every device computes its own chunks with a
Computation compiled for the local batch. Within it the losses are weighted
by frames (`Reduction`): each device's derivative is scaled by its share of
the minibatch's frames and the gradients are summed (`psum`) over the data
axis, so the summed gradient and loss are the one-device minibatch's. Every
device then applies the same optax update to the same replicated values.

Training-mode batch-norm sums its minibatch statistics over the data axis
(`symnet._src.components.normalize.statistics_across`): every device normalises
with the whole minibatch's mean and variance, as on one device (unlike
PyTorch's DistributedDataParallel, whose BatchNorm uses each device's own).

Several processes (`jax.distributed.initialize`) work the same way with a
mesh over all processes' devices: every process calls `fit` with the same
data (or the same stream's index) and makes only the part of each minibatch
its own devices compute (`local_groups`): in memory it slices it, from a
stream it reads only those sequences (`symnet._src.train.minibatches`). Each
device's chunks are the same whatever the number of processes, so the run is
too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..base.errors import TrainingError
from ..components.natural_gradient import NaturalGradientState

__all__ = ["DATA_AXIS", "DataParallel", "Reduction"]

DATA_AXIS = "data"


class Reduction:
    """How one device's objective and gradients join the other devices' (over mesh axis `axis`)."""

    def __init__(self, axis: str | None) -> None:
        self.axis = axis

    def share(self, local: jax.Array) -> jax.Array:
        """This device's share of the minibatch's frames (`local`: the total its mean loss divides by, its
        weights' sum): the factor turning its mean into its part of the mean over all devices."""
        if self.axis is None:
            return jnp.ones((), local.dtype)
        return jnp.maximum(local, 1.0) / jnp.maximum(jax.lax.psum(local, self.axis), 1.0)

    def sum(self, tree: Any) -> Any:
        """`tree` summed over the devices (itself on one device)."""
        return tree if self.axis is None else jax.lax.psum(tree, self.axis)

    def key(self, key: jax.Array) -> jax.Array:
        """A key of this device's own (dropout masks differ between the devices' chunks)."""
        if self.axis is None:
            return key
        return jax.random.fold_in(key, jax.lax.axis_index(self.axis))


def _slicer(array: np.ndarray) -> Callable[[Any], np.ndarray]:
    """The callback of `jax.make_array_from_callback`: the part of `array` one device holds."""

    def part(index: Any) -> np.ndarray:
        return np.asarray(array[index])

    return part


def local_groups(mesh: Mesh, axis: str) -> tuple[int, ...]:
    """The places along mesh axis `axis` that hold a device of this process (its share of each minibatch)."""
    devices = np.moveaxis(mesh.devices, list(mesh.axis_names).index(axis), 0)
    me = jax.process_index()
    return tuple(d for d in range(devices.shape[0]) if any(dev.process_index == me for dev in np.ravel(devices[d])))


class DataParallel:
    """A minibatch of `batch_size` chunks split over `mesh`'s `data_axis`; everything else replicated."""

    def __init__(self, mesh: Any, batch_size: int, data_axis: str = DATA_AXIS) -> None:
        if not isinstance(mesh, Mesh):
            raise TrainingError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        if data_axis not in mesh.axis_names:
            raise TrainingError(f"the mesh has no axis {data_axis!r} (data_axis); its axes are {mesh.axis_names}")
        self.mesh, self.axis = mesh, data_axis
        self.devices = int(mesh.shape[data_axis])
        if batch_size % self.devices:
            raise TrainingError(
                f"batch_size {batch_size} does not divide over the {self.devices} devices of mesh axis "
                f"{data_axis!r}: give a multiple of {self.devices}"
            )
        self.local_batch = batch_size // self.devices
        self.replicated = NamedSharding(mesh, P())
        self.split = NamedSharding(mesh, P(data_axis))
        self.local_groups = local_groups(mesh, data_axis)
        # where each of this process's groups is in the arrays it makes (`shard`, `stack`)
        self._place = {group: i for i, group in enumerate(self.local_groups)}

    def local_rows(self, filled: np.ndarray) -> np.ndarray:
        """Of a whole minibatch's `batch_size` chunks, those this process's devices compute, in group order."""
        groups = filled.reshape(self.devices, self.local_batch)
        return groups[list(self.local_groups)].reshape(-1)

    def check_optimizer_state(self, opt_state: Any) -> None:
        if isinstance(opt_state, NaturalGradientState):
            raise TrainingError(
                "natural gradient (symnet._src.components.natural_gradient.optimizer) with a mesh: its "
                "preconditioners are updated from each device's own chunks and would differ between "
                "devices; train it without mesh"
            )

    def replicate(self, tree: Any) -> Any:
        """Every array of `tree` placed on all the mesh's devices (this process's devices get their copies)."""

        def place(leaf: Any) -> Any:
            if isinstance(leaf, jax.Array) and leaf.sharding == self.replicated:
                return leaf
            value = np.asarray(leaf)
            return jax.make_array_from_callback(value.shape, self.replicated, _slicer(value))

        return jax.tree.map(place, tree)

    def stack(self, per_group: list[tuple[np.ndarray, ...]]) -> tuple[jax.Array, ...]:
        """This process's groups' own arrays (`per_group[i]` for `local_groups[i]`, all of the same shapes) as
        `[devices, ...]` arrays split over the axis."""
        return tuple(self._global(np.stack(parts)) for parts in zip(*per_group))

    def shard_chunks(self, tree: Any) -> Any:
        """Per-chunk arrays of this process's part of a minibatch (`[local rows, ...]`, a sequence objective's
        supervision), each as `[devices, local_batch, ...]` split over the axis."""
        groups = len(self.local_groups)
        return jax.tree.map(lambda a: self._global(np.ascontiguousarray(a).reshape(groups, -1, *a.shape[1:])), tree)

    def shard(self, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
        """This process's part of a minibatch (its `local_rows`' matrices, in (t, n) row order), each as a
        `[devices, rows per device, ...]` array split over the axis.

        Group d (the devices at place d of the data axis) gets chunks `d * local_batch ... (d + 1) * local_batch
        - 1` of the whole minibatch, in (t, n) order of its own.
        """
        groups = len(self.local_groups)
        out = []
        for array in arrays:
            frames = array.shape[0] // (groups * self.local_batch)
            grouped = array.reshape((frames, groups, self.local_batch) + array.shape[1:]).swapaxes(0, 1)
            out.append(self._global(np.ascontiguousarray(grouped.reshape((groups, -1) + array.shape[1:]))))
        return tuple(out)

    def _global(self, local: np.ndarray) -> jax.Array:
        """`local[i]` (group `local_groups[i]`'s) as part of a `[devices, ...]` array split over the axis; the
        other groups' parts are other processes'."""
        place = self._place

        def part(index: Any) -> np.ndarray:
            group = index[0].start or 0
            return local[place[group] : place[group] + 1][(slice(None), *index[1:])]

        return jax.make_array_from_callback((self.devices, *local.shape[1:]), self.split, part)

    def jit(self, fn: Callable[..., Any], layout: str, donate: tuple[int, ...] = ()) -> Any:
        """`fn` run on every device in one jit; `layout` has one letter per argument: `r` replicated,
        `s` split over the data axis (`fn` gets this device's `[rows, ...]`).

        `fn`'s outputs must be the same on every device (they are declared replicated).
        """

        def per_device(*args: Any) -> Any:
            return fn(*(jax.tree.map(lambda v: v[0], a) if kind == "s" else a for kind, a in zip(layout, args)))

        specs = tuple(P(self.axis) if kind == "s" else P() for kind in layout)
        shardings = tuple(self.split if kind == "s" else self.replicated for kind in layout)
        # Unchecked replication: the Tape differentiates, and collectives are placed by hand (Reduction),
        # except batch-norm's psum inside `jax.vjp`, whose transpose is then a psum, as its global
        # statistics need (each device's derivative of the summed statistics, summed).
        mapped = jax.shard_map(per_device, mesh=self.mesh, in_specs=specs, out_specs=P(), check_vma=False)
        return jax.jit(mapped, in_shardings=shardings, out_shardings=self.replicated, donate_argnums=donate)
