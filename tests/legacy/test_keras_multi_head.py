"""keras-multi-head 0.29.0's own layers against their ports.

As in test_keras_self_attention.py: the old layer on `tf_keras` with
random weights, its `get_weights()` copied with the `set_weights`
expression of docs/migration/keras-multi-head.md's checked blocks, and
the outputs compared (padded batches included).
"""

import keras
import numpy as np
import pytest
from keras_multi_head import MultiHead
from keras_multi_head import MultiHeadAttention
from tensorflow import keras as tf_keras

import keras_attention
from tests.legacy import _cyberzhg as cz

GUIDE = cz.MULTI_HEAD_GUIDE


def _ported(old, ours, call):
    call(ours)  # builds it
    cz.port(ours, GUIDE, "multi_head_weights", old_weights=old.get_weights())


@pytest.mark.parametrize(
    ("head_num", "use_bias", "history_only"),
    [(1, True, False), (2, False, True), (4, True, True)],
)
def test_self_attention_ports_exactly(head_num, use_bias, history_only, rng):
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    valid = np.ones((3, 5), dtype=bool)
    valid[1, 3:] = valid[2, 1:] = False
    old = MultiHeadAttention(
        head_num, activation=None, use_bias=use_bias, history_only=history_only
    )
    old(x)
    cz.randomize(old, seed=7)
    old_output = old(x, mask=valid).numpy()

    ours = keras_attention.MultiHeadAttention(
        num_heads=head_num, key_dim=8 // head_num, use_bias=use_bias
    )
    _ported(old, ours, lambda layer: layer(x, x))
    output = ours(
        x,
        x,
        query_mask=valid,
        value_mask=valid,
        use_causal_mask=history_only,
    ).numpy()
    cz.close(output[valid], old_output[valid])
    # A masked query: a zero context, so the output bias (the guide).
    bias = ours.get_weights()[-1] if use_bias else np.zeros(8)
    cz.close(output[~valid], np.broadcast_to(bias, output[~valid].shape))

    # The one-input form, `SelfAttention`, takes the same weights.
    one_input = keras_attention.SelfAttention(
        num_heads=head_num, use_bias=use_bias
    )
    one_input(x)
    one_input.set_weights(ours.get_weights())
    output = one_input(x, mask=valid, use_causal_mask=history_only).numpy()
    cz.close(output[valid], old_output[valid])


def test_embedding_masks_and_separate_inputs(rng):
    """`[query, key, value]` of three depths; the masks from Embedding."""
    ids = cz.padded_ids(rng, length=7)
    table = rng.normal(size=(20, 6)).astype("float32")
    query = rng.normal(size=(3, 4, 10)).astype("float32")
    value = rng.normal(size=(3, 7, 12)).astype("float32")
    query_valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], bool)

    embedding = tf_keras.layers.Embedding(20, 6, mask_zero=True)
    embedding.build((None,))
    embedding.set_weights([table])
    key, key_valid = embedding(ids), embedding.compute_mask(ids)
    old = MultiHeadAttention(4, activation=None)
    old([query, key, value])
    cz.randomize(old, seed=8)
    old_output = old(
        [query, key, value], mask=[query_valid, key_valid, None]
    ).numpy()

    ours = keras_attention.MultiHeadAttention(
        num_heads=4, key_dim=3, output_shape=12
    )
    keras_key = keras.layers.Embedding(20, 6, mask_zero=True)
    keras_key.build((None,))
    keras_key.set_weights([table])
    embedded = keras_key(ids)  # carries the Keras mask
    _ported(old, ours, lambda layer: layer(query, value, key=embedded))
    output = ours(query, value, key=embedded, query_mask=query_valid).numpy()
    cz.close(output[query_valid], old_output[query_valid])
    # The old layer ignored the query mask: its padded queries attended.
    assert np.abs(output[~query_valid] - old_output[~query_valid]).max() > 1e-3


def test_relu_activation_has_no_equivalent(rng):
    """The guide: only `activation=None` ports exactly."""
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    old = MultiHeadAttention(2)  # activation="relu"
    old(x)
    cz.randomize(old, seed=9)
    ours = keras_attention.MultiHeadAttention(num_heads=2, key_dim=4)
    _ported(old, ours, lambda layer: layer(x, x))
    relu_after = keras.ops.relu(ours(x, x)).numpy()
    assert np.abs(relu_after - old(x).numpy()).max() > 1e-2


# MultiHead.


@pytest.mark.parametrize(
    ("reg_index", "reg_factor"), [(0, 0.1), ([0, 1], [0.1, 0.01])]
)
def test_multi_head_dense_copies_and_penalty(reg_index, reg_factor, rng):
    inputs = rng.normal(size=(2, 4)).astype("float32")
    old = MultiHead(
        tf_keras.layers.Dense(3),
        layer_num=2,
        reg_index=reg_index,
        reg_factor=reg_factor,
    )
    # In a model: alone, the old layer's `losses` misses it.
    tensor = tf_keras.Input((4,))
    model = tf_keras.Model(tensor, old(tensor))
    # The penalty: computed once, in build, from the initial weights (and
    # gone from `model.losses` once the model is called eagerly).
    old_penalty = sum(float(loss) for loss in model.losses)  # one per index
    old_output = model(inputs).numpy()
    old_weights = old.get_weights()
    assert len(old_weights) == 4

    layer = keras_attention.MultiHead(
        keras.layers.Dense(3),
        num_heads=2,
        reg_index=reg_index,
        reg_factor=reg_factor,
    )
    layer(inputs)
    cz.port(layer, GUIDE, "multi_head_wrapper", old_weights=old_weights)
    output = layer(inputs)
    cz.close(output, old_output)
    [penalty] = cz.numpy(*layer.losses)
    cz.close(penalty, old_penalty)


def test_multi_head_lstm_with_mask(rng):
    ids = cz.padded_ids(rng, length=5)
    table = rng.normal(size=(20, 4)).astype("float32")
    embedding = tf_keras.layers.Embedding(20, 4, mask_zero=True)
    embedding.build((None,))
    embedding.set_weights([table])
    old = MultiHead(tf_keras.layers.LSTM(3), layer_num=2)
    vectors, valid = embedding(ids), embedding.compute_mask(ids)
    old(vectors, mask=valid)
    cz.randomize(old, seed=10)
    old_output = old(vectors, mask=valid).numpy()

    tokens = keras.Input(shape=(None,), dtype="int32")
    keras_embedding = keras.layers.Embedding(20, 4, mask_zero=True)
    layer = keras_attention.MultiHead(keras.layers.LSTM(3), num_heads=2)
    model = keras.Model(tokens, layer(keras_embedding(tokens)))
    keras_embedding.set_weights([table])
    cz.port(layer, GUIDE, "multi_head_wrapper", old_weights=old.get_weights())
    output = model.predict(ids, verbose=0)
    assert output.shape == (3, 3, 2)
    cz.close(output, old_output)


def test_multi_head_hidden_dim_is_a_dense_in_each_copy(rng):
    """The guide's `multi_head_hidden_dim` block on the old layer's own
    weights (its `W, b, copies` line restated as the bindings)."""
    inputs = rng.normal(size=(2, 4)).astype("float32")
    old = MultiHead(tf_keras.layers.Dense(3), layer_num=2, hidden_dim=4)
    old(inputs)
    cz.randomize(old, seed=11)
    old_output = old(inputs).numpy()
    old_weights = old.get_weights()
    assert [w.shape for w in old_weights][:2] == [(4, 8), (8,)]

    copy = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(3)])
    layer = keras_attention.MultiHead(copy, num_heads=2)
    layer(inputs)
    W, b, copies = old_weights[0], old_weights[1], old_weights[2:]  # noqa: N806
    cz.port(layer, GUIDE, "multi_head_hidden_dim", W=W, b=b, copies=copies)
    cz.close(layer(inputs), old_output)
