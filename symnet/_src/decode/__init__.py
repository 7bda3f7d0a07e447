"""Decoding and scoring: word error rates as Kaldi's `compute-wer` counts them (public names in
`symnet.decode`)."""

__all__: list[str] = []
