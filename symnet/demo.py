"""`python -m symnet.demo` (`make demo`): train a small TDNN and an LSTM on the built-in task, save, reload, compute.

The demo itself is `symnet._src.app.demo`; see its docstring for what it shows.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)

if __name__ == "__main__":
    from symnet._src.app.demo import main as _main

    _main()
