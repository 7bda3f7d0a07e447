"""The implementation behind `symnet.display` (private: import its names from `symnet.display`)."""

from __future__ import annotations

from ..core import html as hooks
from ..core.layer import Layer
from ..core.tape import Tape
from ..engine.computation import Computation
from ..engine.summary import Summary
from ..network import Network
from .computation import computation_html, index_map_html
from .graph import graph_svg
from .html import Html, Svg
from .labels import label
from .network import network_html
from .receptive import ReceptiveField, receptive_field
from .summary import summary_html
from .tape import tape_html
from .tree import layer_html

__all__ = [
    "Html",
    "ReceptiveField",
    "Svg",
    "computation_html",
    "graph_svg",
    "index_map_html",
    "label",
    "layer_html",
    "network_html",
    "receptive_field",
    "summary_html",
    "tape_html",
]

hooks.register_html(Layer, layer_html)
hooks.register_html(Tape, tape_html)
hooks.register_html(Network, network_html)
hooks.register_html(Computation, computation_html)
hooks.register_html(Summary, summary_html)
