"""`python -m symnet.demo` (`make demo`): train a small TDNN and an LSTM on the built-in task, save, reload, compute.

The demo itself is `symnet._src.demo`; see its docstring for what it shows.
"""

from symnet._src.demo import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
