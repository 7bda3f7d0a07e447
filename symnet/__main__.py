"""`python -m symnet ...`: the command line, as the `symnet` script runs it (`symnet --help`)."""

import sys

from symnet._src.app.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
