"""Typed layers: what networks use most, as layer classes with readable options (no Kaldi option strings).

- `Affine(h, out_dim)`: `W x + b` per row. Kaldi: AffineComponent.
- `TimeConv(x, out_dim, offsets=(-1, 0, 1), stride=1)`: a 1-D convolution over frames (TDNN).
  Kaldi: TdnnComponent (and a `Round` for a stride).
- `BatchNorm(h)`: batch normalisation (per channel on images). Kaldi: BatchNormComponent.
- `LayerNorm(h)`: layer normalisation with learned scale and offset. Kaldi: none.
- `Dropout(h, 0.1)`: inverted dropout (identity in test mode). Kaldi: GeneralDropoutComponent.
- `Reshape(x, (h, w, c))`, `Flatten(img)`: the rows as images (HWC) / as plain features (the identity).
- `Conv2d(img, out_channels, kernel=(3, 3), stride=, padding=, dilation=)`: 2-D convolution.
  Kaldi: ConvolutionComponent (without padding or dilation).
- `MaxPool2d(img, 2)`, `AvgPool2d(img, 2)`: 2-D pooling. Kaldi: MaxpoolingComponent (max, no padding) / none.
- `LSTM(name, x, cell=, projection=)`, `GRU(name, x, cell=)`, `Bidirectional(LSTM, name, x, ...)`: recurrent
  layers as trees of Kaldi's components (fast-lstm(p), fast-(p)gru), run by the fused scan.
- `MultiHeadAttention(name, x, heads=, key_dim=, window=(left, right) or None)`: self-attention over frames.
  Kaldi: RestrictedAttentionComponent (with `padding='zeros'`).

Dims come from the input where the engine knows them statically, image
shapes from the nearest image layer below (`Reshape`, `Conv2d`, a pool). A
layer with parameters, or with a name Kaldi needs (dropout's random stream),
takes `name=`; without one a Network names it after its Node, and its
parameters after it and their field (`conv1.filter_params`).
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
