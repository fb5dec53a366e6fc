"""The multi-head engine's options: which it has, which a layer takes,
and how they are saved (private module).

`ENGINE_OPTIONS` are the arguments of `MultiHeadBase.__init__` after
`num_heads`. A layer declares those it takes (`takes`; all of them unless
it says otherwise), and one given an option it does not take refuses it
with a `ValueError` naming the option and the layer (`_refuse_untaken`),
so an option added to the engine is never silently accepted by a
variant that does not implement it.
"""

import keras

from keras_attention import scores as scores_lib
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mods
from keras_attention.layers import _projections

# The engine's options: the arguments of `MultiHeadBase.__init__` after
# `num_heads`. A layer takes those of its `takes`, and refuses the others
# (`_refuse_untaken`); tests/layers/test_options.py keeps this list
# equal to the signature.
ENGINE_OPTIONS = (
    "key_dim",
    "value_dim",
    "dropout",
    "use_bias",
    "flash_attention",
    "kernel_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "activity_regularizer",
    "kernel_constraint",
    "bias_constraint",
    "use_gate",
    "seed",
    "score",
    "chunk_size",
    "attention_activation",
    "penalty_coefficient",
    "score_mod",
    "mask_mod",
    "rotary_embedding",
    "use_sinks",
    "query_key_norm",
    "query_key_norm_epsilon",
    "query_pre_attn_scalar",
)


class EngineOptions:
    """The options half of `MultiHeadBase`: `takes`, the refusal of the
    others, and the config every layer of the engine shares."""

    takes = ENGINE_OPTIONS

    def _refuse_untaken(self, kwargs):
        """A `ValueError` for an engine option this layer does not take."""
        for name in ENGINE_OPTIONS:
            if name in kwargs and name not in self.takes:
                raise ValueError(
                    f"{type(self).__name__} does not take `{name}` (it takes "
                    f"{', '.join(self.takes)}). Received: "
                    f"{name}={kwargs[name]!r}"
                )

    def _engine_config(self):
        """The config every layer of the engine shares."""
        rotary = self.rotary_embedding
        return {
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "flash_attention": self.flash_attention,
            **_projections.projection_config(self),
            "use_gate": self.use_gate,
            "seed": self.seed,
            "score": scores_lib.serialize(self.score),
            "chunk_size": self.chunk_size,
            "attention_activation": _logit_activation.serialize(
                self.attention_activation
            ),
            "penalty_coefficient": self.penalty_coefficient,
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
            "rotary_embedding": None
            if rotary is None
            else keras.saving.serialize_keras_object(rotary),
            "use_sinks": self.use_sinks,
            "query_key_norm": self.query_key_norm,
            "query_key_norm_epsilon": self.query_key_norm_epsilon,
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
        }

    def get_config(self):
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            **self._engine_config(),
        }
        config = {**super().get_config(), **config}
        config["dtype"] = self._dtype_policy_config()
        return config
