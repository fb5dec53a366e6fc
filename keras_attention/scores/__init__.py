"""Attention score functions as Keras layers.

A score maps `query (..., Tq, Dq)` and `key (..., Tk, Dk)` to logits
`(..., Tq, Tk)`. Extra leading axes (such as attention heads) are carried
through, so one score serves single-head and multi-head attention alike.
Logits are computed in `float32` when the inputs are half precision.

`get(identifier)` turns a name, a config dict or an instance into a score
layer, like `keras.activations.get`. The package holds the base
(`base.py`), the dot-product family (`dot_product.py`), the additive
family (`additive.py`), the location score (`location.py`) and the
registry (`registry.py`).
"""

from keras_attention.scores.additive import AdditiveScore as AdditiveScore
from keras_attention.scores.additive import (
    BaseAdditiveScore as BaseAdditiveScore,
)
from keras_attention.scores.additive import ConcatScore as ConcatScore
from keras_attention.scores.additive import (
    NormalizedAdditiveScore as NormalizedAdditiveScore,
)
from keras_attention.scores.base import Score as Score
from keras_attention.scores.dot_product import BilinearScore as BilinearScore
from keras_attention.scores.dot_product import CosineScore as CosineScore
from keras_attention.scores.dot_product import DotScore as DotScore
from keras_attention.scores.dot_product import ScaledDotScore as ScaledDotScore
from keras_attention.scores.location import LocationScore as LocationScore
from keras_attention.scores.registry import deserialize as deserialize
from keras_attention.scores.registry import get as get
from keras_attention.scores.registry import serialize as serialize
