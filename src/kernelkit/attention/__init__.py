"""Linear (random-feature) attention: FAVOR+, FAVOR++, FAVOR#, hybrid and linear maps.

``linear_attention`` is a drop-in for :func:`torch.nn.functional.scaled_dot_product_attention`
(shapes ``(..., L, d)``, softmax of ``q k^T / sqrt(d)``), bidirectional or causal; exact
softmax attention is :func:`kernelkit.kernels.softmax_attention`. Causal attention also
runs as a recurrence with a constant-size state (autoregressive decoding):
:func:`init_decoding_state` and :func:`linear_attention_step`, or
:meth:`FavorAttention.step`. Needs PyTorch: ``pip install "kernelkit[torch]"`` (without
it, importing this package raises a ``ModuleNotFoundError`` that says so).
"""

from .._backend.optional import require

require("torch", "kernelkit.attention")

from ..features.favor import Moments  # noqa: E402
from ._maps import FEATURE_MAPS, FITTED_MAPS  # noqa: E402
from .decoding import LinearAttentionState, init_decoding_state, linear_attention_step  # noqa: E402
from .functional import (  # noqa: E402
    attention_moments,
    draw_features,
    hybrid_base_size,
    linear_attention,
)
from .module import FavorAttention  # noqa: E402

__all__ = [
    "FEATURE_MAPS",
    "FITTED_MAPS",
    "FavorAttention",
    "LinearAttentionState",
    "Moments",
    "attention_moments",
    "draw_features",
    "hybrid_base_size",
    "init_decoding_state",
    "linear_attention",
    "linear_attention_step",
]
