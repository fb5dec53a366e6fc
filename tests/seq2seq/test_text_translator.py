"""The translators' shared raw-text side: decoding choice, vocabularies."""

import pytest

from keras_attention.seq2seq import TransformerTranslator
from keras_attention.seq2seq import Translator
from keras_attention.seq2seq.text_translator import TextTranslator
from keras_attention.seq2seq.text_translator import check_decoding
from keras_attention.seq2seq.text_translator import target_text

SOURCE = ["", "[UNK]", "ein", "hund"]
TARGET = ["", "[UNK]", "[start]", "[end]", "a", "dog"]


def test_target_text_wraps_the_tokenized_sentence():
    assert target_text("A dog!") == "[start] a dog ! [end]"


def test_check_decoding_names_the_choice_and_the_options():
    check_decoding("beam", {"length_penalty": 1.0})
    with pytest.raises(ValueError, match="decoding='nucleus'"):
        check_decoding("nucleus", {})
    with pytest.raises(ValueError, match=r"\['top_k'\]"):
        check_decoding("greedy", {"top_k": 3})


@pytest.mark.parametrize("model_class", [Translator, TransformerTranslator])
def test_both_translators_share_the_base(model_class):
    sizes = (
        {"embedding_dim": 4, "units": 4}
        if model_class is Translator
        else {"model_dim": 4, "num_layers": 1, "num_heads": 1}
    )
    model = model_class(SOURCE, TARGET, max_output_length=3, **sizes)
    assert isinstance(model, TextTranslator)
    assert model.tokens_to_words([4, 5, 3, 4]) == ["a", "dog"]
    assert model.vectorize_sources(["ein katze"]).tolist() == [[2, 1]]
    config = model.get_config()
    assert config["target_vocabulary"] == TARGET
    assert config["start_token"] == "[start]"
    with pytest.raises(ValueError, match="no '\\[end\\]' token"):
        model_class(SOURCE, TARGET[:-3], **sizes)
    with pytest.raises(ValueError, match="beam_width"):
        model_class(SOURCE, TARGET, beam_width=0, **sizes)
