"""seq2seq/checks.py: the decoders' and mechanisms' input checks, directly.

`tests/test_bad_inputs.py` reaches them through their callers; here each
check meets a hand case of what it passes and what it refuses, with the
argument and the value named in the message.
"""

import keras
import numpy as np
import pytest

from keras_attention.seq2seq import checks


def test_batch_sizes_and_steps():
    checks.batch_sizes("L", a=(2, 3), b=(None, 4), c=(2, 1))
    with pytest.raises(ValueError, match=r"Received: a.shape=\(2, 3\), b"):
        checks.batch_sizes("L", a=(2, 3), b=(3, 3))
    checks.same_batch("L", (2, 1, 4), (2, 5, 4))
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 0, 4\)"):
        checks.same_batch("L", (2, 0, 4), (2, 5, 4))


def test_vocabulary_size_reads_the_embedding_then_the_output_layer():
    embedding = keras.layers.Embedding(7, 3)
    dense = keras.layers.Dense(9)
    assert checks.vocabulary_size(embedding, dense) == 7
    assert checks.vocabulary_size(lambda ids: ids, dense) == 9
    assert checks.vocabulary_size(lambda ids: ids, lambda h: h) is None


def test_token_ids_in_the_vocabulary():
    embedding, dense = keras.layers.Embedding(5, 2), keras.layers.Dense(5)
    checks.token_ids(embedding, dense, 1, 2, 0)
    checks.token_ids(embedding, dense, np.int64(4), 2, 0)
    with pytest.raises(ValueError, match=r"Received: end_token=5"):
        checks.token_ids(embedding, dense, 1, 5, 0)
    with pytest.raises(ValueError, match=r"Received: pad_token=-1"):
        checks.token_ids(embedding, dense, 1, 2, -1)
    with pytest.raises(ValueError, match=r"Received: start_token=True"):
        checks.token_ids(embedding, dense, True, 2, 0)
    # An unknown vocabulary only asks for non-negative ids.
    checks.token_ids(lambda i: i, lambda h: h, 1, 99, 0)


def test_token_id_inputs():
    checks.token_id_inputs("L", "ids", np.array([[0, 4]]), 5)
    with pytest.raises(TypeError, match=r"ids.dtype=float32"):
        checks.token_id_inputs("L", "ids", np.zeros((1, 2), "float32"), 5)
    with pytest.raises(TypeError, match=r"ids.dtype=string"):
        checks.token_id_inputs("L", "ids", np.array([["a"]]), 5)
    with pytest.raises(ValueError, match=r"ids.shape=\(1, 0\)"):
        checks.token_id_inputs("L", "ids", np.zeros((1, 0), "int32"), 5)
    with pytest.raises(ValueError, match=r"ids.shape=\(2,\)"):
        checks.token_id_inputs("L", "ids", np.zeros((2,), "int32"), 5)
    with pytest.raises(ValueError, match=r"min 0 and max 5"):
        checks.token_id_inputs("L", "ids", np.array([[0, 5]]), 5)
    with pytest.raises(ValueError, match=r"min -1"):
        checks.token_id_inputs("L", "ids", np.array([[-1, 2]]), None)
    # Symbolic ids are checked for dtype and rank only.
    checks.token_id_inputs("L", "ids", keras.Input((3,), dtype="int32"), 5)


def test_logits_and_memory_dtypes():
    checks.logits_2d(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match=r"log_probs.shape=\(2, 3, 1\)"):
        checks.logits_2d(np.zeros((2, 3, 1), "float32"))
    with pytest.raises(TypeError, match="log_probs"):
        checks.logits_2d(np.zeros((2, 3), "int32"))
    checks.floating_memory("L", np.zeros((1, 2, 3), "float32"))
    with pytest.raises(TypeError, match="memory"):
        checks.floating_memory("L", np.zeros((1, 2, 3), "int32"))
