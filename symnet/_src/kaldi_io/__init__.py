"""Kaldi's and OpenFst's file formats, bytes to arrays and back, with no dependency above symnet's base modules.

`binary` (Kaldi's binary and text tokens, the readers), `writer` (the writer), `numbers` (the number
words, int32 range and float printing both share), `ark` (archives and their objects, read safely), `ark_stream` (the
bounded reader they share), `posterior` (posteriors), `scp` (scp files and their entries),
`tables` (Kaldi tables by rspecifier), `egs`, `egs_parse`, `egs_index`, `egs_sparse` (nnet3 and chain egs),
`egs_archives` (egs by position, for streams) and `fst` (OpenFst's binary and text FSTs). Every layer above may
use them: `kaldi` (models), `train` (training data), `chain` (graphs), `decode`. Nothing is imported here, so
one format costs only its own module.
"""

__all__: list[str] = []
