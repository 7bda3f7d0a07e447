"""Kaldi's xconfig layers as Python functions that build symnet expressions.

Each xconfig layer type is a function named after it (`-layer` dropped,
dashes as underscores): `tdnnf-layer` is `tdnnf`, `fast-lstmp-layer`
`fast_lstmp`, `relu-batchnorm-layer` `relu_batchnorm`, `output-layer`
`output_layer`, `linear-component` `linear_component`, `res-block`
`res_block`. It takes the layer's input (a symnet descriptor over `Input`s and
the outputs of other layer functions), its `name`, and its xconfig options as
keywords with underscores (`bottleneck_dim=160`), and returns the layer's
output: the `Node` (or descriptor) that a later xconfig line would see.

    x = Input("input", 40)
    h = relu_batchnorm(splice(x, -1, 0, 1), name="tdnn1", dim=512)
    h = tdnnf(h, name="tdnnf2", dim=512, bottleneck_dim=64, time_stride=1)
    net = Network({"output": output_layer(h, name="output", dim=3000)}, seed=0)

is the network of the xconfig

    input name=input dim=40
    relu-batchnorm-layer name=tdnn1 dim=512 input=Append(-1,0,1)
    tdnnf-layer name=tdnnf2 dim=512 bottleneck-dim=64 time-stride=1
    output-layer name=output dim=3000

(`read_xconfig_network(...)` equals it). There is one code path: a
function makes the layer's xconfig line (its input written as a descriptor
over the node names), expands it with the same layer class as the xconfig
reader, and builds the config lines with the same network builder; the nodes
it returns hold the input's own nodes.
"""

from symnet._src.kaldi.text.xconfig.layers import *  # noqa: F403  (the public names)
from symnet._src.kaldi.text.xconfig.layers import __all__ as __all__
