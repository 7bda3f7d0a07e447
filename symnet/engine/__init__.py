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

from symnet._src.engine.compile_cache import enable_compile_cache
from symnet._src.engine.computation import Computation, compile
from symnet._src.engine.request import ComputationRequest
from symnet._src.engine.runner import record
from symnet._src.engine.step_values import Rows
from symnet._src.engine.streaming import Stream, recurrent_states

__all__ = [
    "Computation",
    "ComputationRequest",
    "Rows",
    "Stream",
    "compile",
    "enable_compile_cache",
    "record",
    "recurrent_states",
]
