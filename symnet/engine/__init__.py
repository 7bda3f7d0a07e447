"""The Index engine: requests, planning and lowering, from Indexes to one jitted JAX program.

- `ComputationRequest`: which Indexes of which inputs are given and which outputs are wanted.
- `compile(net, request)`: plans the request and lowers it to a `Computation`, one jitted program
  (`computation(net, inputs)`; `Computation.explain()` says what runs); `Rows` are its inputs' and
  outputs' row layouts.
- `Stream`: runs a recurrent network chunk by chunk with its state carried over;
  `recurrent_states` lists the states a chunk hands on.
- `record()`: the Computations a block of `net.compute` calls ran, each with its `explain()`.
- `enable_compile_cache(dir)`: keep compiled programs on disk, so a later process reads them back.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
