"""layers/_options.py: options declared, not opted out, every lane.

Every engine option is in `ENGINE_OPTIONS` (the base's signature), and a
layer refuses the options it does not take, an option added to the base
included.
"""

import inspect

import pytest

import keras_attention
from keras_attention.layers import _options


def test_the_engine_options_are_the_base_signature():
    signature = inspect.signature(
        keras_attention.layers._multi_head_base.MultiHeadBase.__init__
    )
    names = [n for n in signature.parameters if n not in ("self", "kwargs")]
    assert tuple(names[1:]) == _options.ENGINE_OPTIONS


MLA = dict(kv_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4)


@pytest.mark.parametrize("option", sorted(set(_options.ENGINE_OPTIONS)))
def test_latent_attention_refuses_each_option_it_does_not_take(option):
    layer_cls = keras_attention.MultiHeadLatentAttention
    if option in layer_cls.takes:
        return
    if option in inspect.signature(layer_cls.__init__).parameters:
        pytest.fail(f"MLA names `{option}` but does not take it")
    with pytest.raises(ValueError, match=f"does not take `{option}`"):
        layer_cls(2, **MLA, **{option: None})


def test_an_option_added_to_the_base_is_refused_where_not_taken(monkeypatch):
    options = (*_options.ENGINE_OPTIONS, "differential")
    monkeypatch.setattr(_options, "ENGINE_OPTIONS", options)
    with pytest.raises(
        ValueError,
        match="MultiHeadLatentAttention does not take `differential`",
    ):
        keras_attention.MultiHeadLatentAttention(2, **MLA, differential=True)
