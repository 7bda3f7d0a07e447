"""Kaldi xconfig files: the layer-level configs Kaldi's recipes write, expanded as xconfig_to_configs.py does.

    input dim=40 name=input
    relu-batchnorm-layer name=tdnn1 dim=512 input=Append(-2,-1,0,1,2)
    tdnnf-layer name=tdnnf2 dim=1536 bottleneck-dim=160 time-stride=1
    output-layer name=output dim=3000

`read_xconfig(path)` / `parse_xconfig(text)` read the layers (an `Xconfig`);
its `config_text("final")` is Kaldi's final.config, `config_lines()` the
config line objects, `network()` the Network (with its objectives). `read_xconfig_network`
and `parse_xconfig_network` do both steps. `is_xconfig(path)` tells an
xconfig from an nnet3 config by its first line. `LAYER_TYPES` maps every
supported layer type to its class; `KALDI_LAYER_TYPES` lists Kaldi's (all of
them supported: `UNSUPPORTED_LAYER_TYPES`, which would say why one is not,
is empty); `symnet.kaldi.xconfig.layers` has the same layers as Python
functions.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
