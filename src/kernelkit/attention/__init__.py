"""Linear (random-feature) attention: FAVOR+, FAVOR++, FAVOR#, hybrid and linear maps.

``linear_attention`` is a drop-in for :func:`torch.nn.functional.scaled_dot_product_attention`
(shapes ``(..., L, d)``, softmax of ``q k^T / sqrt(d)``), bidirectional or causal; exact
softmax attention is :func:`kernelkit.kernels.softmax_attention`. Causal attention also
runs as a recurrence with a constant-size state (autoregressive decoding):
:func:`init_decoding_state` and :func:`linear_attention_step`, or
:meth:`FavorAttention.step`. Needs PyTorch.
"""

from ..features.favor import Moments
from ._maps import FEATURE_MAPS, FITTED_MAPS
from .decoding import LinearAttentionState, init_decoding_state, linear_attention_step
from .functional import (
    attention_moments,
    draw_features,
    hybrid_base_size,
    linear_attention,
)
from .module import FavorAttention

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
