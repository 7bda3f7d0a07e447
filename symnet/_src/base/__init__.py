"""What every layer of symnet may use, and which imports nothing of symnet: the errors, safe reading and atomic
writing of files, bounded reads, paths, host memory, the version, the old module paths, text helpers, Levenshtein
alignment and the public modules' exports."""

__all__: list[str] = []
