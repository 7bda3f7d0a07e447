from symnet._src.engine.compile_cache import enable_compile_cache as enable_compile_cache
from symnet._src.engine.compiling import compile as compile
from symnet._src.engine.computation import Computation as Computation
from symnet._src.engine.request import ComputationRequest as ComputationRequest
from symnet._src.engine.runner import record as record
from symnet._src.engine.step_values import Rows as Rows
from symnet._src.engine.streaming import Stream as Stream
from symnet._src.engine.streaming import recurrent_states as recurrent_states
