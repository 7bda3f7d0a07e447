from symnet._src.core.descriptor import Combine as Combine
from symnet._src.core.descriptor import Rule as Rule
from symnet._src.core.formatting import Formatter as Formatter
from symnet._src.core.html import register_html as register_html
from symnet._src.core.html import render_html as render_html
from symnet._src.core.index import decode as decode
from symnet._src.core.index import encode as encode
from symnet._src.core.layer import Product as Product
