"""Decoding graphs built by symnet: FST algorithms (composition, determinization, minimization, epsilon removal),
grammars and n-gram LMs, the lexicon, HCLG and a CTC token graph (public names in `symnet.decode`)."""

__all__: list[str] = []
