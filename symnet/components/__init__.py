"""Kaldi nnet3's simple components as symnet layers.

Every component is a layer class named after its Kaldi type
(`AffineComponent`, `RectifiedLinearComponent`, ...) whose operands are its
input and its parameters (Weights named `{component}.{param}`, with Kaldi's
token names in lower case: `affine1.linear_params`, `affine1.bias_params`),
whose hyper-parameters are fields, and whose unused Kaldi metadata is in
`options`. Each has `input_dim` and `output_dim`.

Building a component from Kaldi config options (with Kaldi's defaults, checks
and initialisation) and reading or writing it in a model file is
`symnet.kaldi`'s job: `symnet.kaldi.build_component(kaldi_type, name, options,
input)`, one record per Kaldi type in `symnet.kaldi.COMPONENTS`.

Modes: DropoutComponent, GeneralDropoutComponent, DropoutMaskComponent,
SpecAugmentTimeMaskComponent and BatchNormComponent have a `test_mode` field;
`set_test_mode(net_or_layer, True)` rewrites a tree (or a Network) with every
such component switched, as Kaldi's nnet3-compute does.
"""

from symnet._src.base import exports as _exports

#: `Constant`, the initialiser now named `symnet.Full`: found for one release, with a DeprecationWarning.
_DEPRECATED = {
    "Constant": (
        "symnet._src.core.initializers",
        "Full",
        "symnet.components.Constant is deprecated: it is the initialiser symnet.Full (jnp.full's name), and "
        "Constant named too many things (Const, ConstantComponent)",
    ),
}

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True, deprecated=_DEPRECATED)
