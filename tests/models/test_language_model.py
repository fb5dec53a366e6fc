"""The decoder-only language model: its layers, windows and evaluation."""

import numpy as np
import pytest

from keras_attention import GroupedQueryAttention
from keras_attention import SelfAttention
from keras_attention.data import language
from keras_attention.models import language_model


@pytest.mark.tensorflow_lane
def test_blocks_alternate_local_and_global_and_the_logits_are_causal():
    """Other lanes (3 s on JAX): `tests/models/test_generation.py` builds
    a local block under a global one and holds the cached generation to
    the full model's logits."""
    model = language_model.build_language_model(
        11,
        model_dim=8,
        num_layers=3,
        num_heads=2,
        feed_forward_dim=8,
        sliding_window=4,
        global_every=3,
    )
    blocks = [model.get_layer(f"block_{i}") for i in range(3)]
    assert [b.sliding_window for b in blocks] == [4, 4, None]
    assert isinstance(blocks[0].self_attention, GroupedQueryAttention)
    assert isinstance(blocks[2].self_attention, SelfAttention)
    ids = np.array([[3, 4, 5, 6]])
    logits = np.asarray(model(ids))
    assert logits.shape == (1, 4, 11)
    # Causal: a later id changes no earlier logit.
    changed = np.asarray(model(np.array([[3, 4, 5, 9]])))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    assert not np.allclose(changed[:, 3], logits[:, 3])
    with pytest.raises(ValueError, match="num_layers=0"):
        language_model.build_language_model(11, num_layers=0)


def test_nope_layers_leave_the_rotation_out_and_generate_cached():
    from keras_attention.models import Generator

    model = language_model.build_language_model(
        11,
        model_dim=8,
        num_layers=3,
        num_heads=2,
        feed_forward_dim=8,
        layer_types=("full", "full", "linear"),
        nope_layers=[1],
    )
    blocks = [model.get_layer(f"block_{i}") for i in range(2)]
    assert blocks[0].self_attention.rotary_embedding is not None
    assert blocks[1].self_attention.rotary_embedding is None
    generator = Generator(model)
    prompt = np.array([[3, 4, 5]], "int32")
    np.testing.assert_array_equal(
        generator.generate(prompt, 3), generator.generate_uncached(prompt, 3)
    )
    for bad in ([2], [3], [True], 1):
        with pytest.raises(ValueError, match="Received: nope_layers="):
            language_model.build_language_model(
                11,
                num_layers=3,
                layer_types=("full", "full", "linear"),
                nope_layers=bad,
            )


class _Answers:
    """A generator that continues each prompt with `answer(prompt)`."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def generate(self, prompts, new_tokens):
        self.calls.append(prompts.shape)
        rows = [list(p) + self.answer(list(p))[:new_tokens] for p in prompts]
        return np.asarray(rows)


@pytest.mark.backend_independent
def test_continuation_accuracy_checks_each_translation_word_for_word():
    lines = ["a b = x y", "c = z", "a c = x z", "b = y"]
    vocabulary = language.build_vocabulary(lines)
    groups = language_model.synthetic_prompts(lines, vocabulary)
    assert sorted(groups) == [(2, 2), (3, 3)]
    gold = {
        tuple(p): list(a)
        for ps, ans in groups.values()
        for p, a in zip(ps, ans, strict=True)
    }
    right = _Answers(lambda p: gold[tuple(p)])
    accuracy, generated = language_model.continuation_accuracy(
        right, lines, vocabulary
    )
    assert accuracy == 1.0
    # One batch per length.
    assert right.calls == [(2, 2), (2, 3)]
    assert language.decode(generated[0][1], vocabulary) == "z"
    # A translation one word off, on one line in four.
    first = tuple(language.to_ids("a b =", vocabulary))
    wrong = _Answers(
        lambda p: gold[tuple(p)][::-1] if tuple(p) == first else gold[tuple(p)]
    )
    assert (
        language_model.continuation_accuracy(wrong, lines, vocabulary)[0]
        == 0.75
    )


@pytest.mark.backend_independent
def test_perplexity_is_the_exponential_of_the_loss():
    assert language_model.perplexity(np.log(7.0)) == pytest.approx(7.0)
