"""The applications on the library: the `symnet` command line (`cli`, one module per command) and the demo
(`python -m symnet.demo`)."""

__all__: list[str] = []
