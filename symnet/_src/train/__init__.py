"""The implementation behind `symnet.train` (private: import its names from `symnet.train`, which imports each
module here on first use)."""

__all__: list[str] = []
