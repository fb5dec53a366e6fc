"""keras-attention: classic attention mechanisms as Keras 3 layers."""

from keras_attention import distribution as distribution
from keras_attention import hub as hub
from keras_attention import layers as layers
from keras_attention import ops as ops
from keras_attention import saving as saving
from keras_attention import scores as scores
from keras_attention import seq2seq as seq2seq
from keras_attention import text as text
from keras_attention.layers._cache import AttentionCache as AttentionCache
from keras_attention.layers._cache import KeyValueCache as KeyValueCache
from keras_attention.layers._gated_delta_cache import (
    GatedDeltaCache as GatedDeltaCache,
)
from keras_attention.layers._paged_cache import PagedCache as PagedCache
from keras_attention.layers._quantized_cache import (
    QuantizedCache as QuantizedCache,
)
from keras_attention.layers._rolling_cache import RollingCache as RollingCache
from keras_attention.layers.additive import (
    AdditiveAttention as AdditiveAttention,
)
from keras_attention.layers.attention import Attention as Attention
from keras_attention.layers.gated_delta_net import (
    GatedDeltaNet as GatedDeltaNet,
)
from keras_attention.layers.grouped_query import (
    GroupedQueryAttention as GroupedQueryAttention,
)
from keras_attention.layers.grouped_query import (
    GroupQueryAttention as GroupQueryAttention,
)
from keras_attention.layers.hard import HardAttention as HardAttention
from keras_attention.layers.hard import reinforce_loss as reinforce_loss
from keras_attention.layers.latent import (
    MultiHeadLatentAttention as MultiHeadLatentAttention,
)
from keras_attention.layers.multi_head import (
    MultiHeadAttention as MultiHeadAttention,
)
from keras_attention.layers.pooling import AttentionPooling as AttentionPooling
from keras_attention.layers.relative_position import (
    RelativePositionBias as RelativePositionBias,
)
from keras_attention.layers.rotary import RotaryEmbedding as RotaryEmbedding
from keras_attention.layers.self_attention import SelfAttention as SelfAttention
from keras_attention.layers.structured import (
    StructuredSelfAttention as StructuredSelfAttention,
)
from keras_attention.layers.wrapper import MultiHead as MultiHead
from keras_attention.saving import export_for_serving as export_for_serving
from keras_attention.saving import load_model as load_model

__version__ = "0.1.0.dev0"

# The example code loads on first use, so `import keras_attention` stays
# free of it (docs/architecture.md) while `keras_attention.models` works.
_LAZY_SUBPACKAGES = ("data", "models", "visualize")


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES:
        return __import__(f"keras_attention.{name}", fromlist=[name])
    raise AttributeError(f"module 'keras_attention' has no attribute {name!r}")
