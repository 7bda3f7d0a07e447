"""symnet's files: `save(path, tree)` and `load(path)` keep networks and whole training states, without pickle.

A file holds a pytree (`symnet._src.saving.tree`): Networks, arrays (JAX and
NumPy), optax states (namedtuples such as `ScaleByAdamState`, `EmptyState`,
and the tuples of a chain), and dicts, lists, tuples, None, bool, int, float
and str. A Network is kept whole (`symnet._src.saving.networks`): every layer
(core layers, descriptors, Node/Ref recurrences, components, users' layer
classes) with its fields, the Weights' initialisers and names, the arrays of
`params` and `state`, and the outputs' `objectives`. Loading gives a network
with equal structure (`==`) and the same arrays, so equal outputs. Nothing in
a file is executed and no module is imported by a name it holds: the
structure is JSON (`symnet._src.saving.structure`), only classes the running
process has defined are built, namedtuples come back as the type of a
template (`load(path, like=...)`) or of optax's exported state classes, and
the arrays are plain numbers read without pickle (`symnet._src.saving.archive`).

Kaldi's own formats (configs, nnet3 model files, `symnet.kaldi`) remain the
export for networks Kaldi can express.
"""

from __future__ import annotations

__all__: list[str] = []
