"""The decoder cell the seq2seq cell and decoder tests share."""

import keras

from keras_attention import seq2seq


def decoder_cell(kind="gru", attention=None, **kwargs):
    """A GRU (or LSTM) `AttentionDecoderCell` of 8 units, Bahdanau(5) by
    default."""
    inner = (
        keras.layers.GRUCell(8) if kind == "gru" else keras.layers.LSTMCell(8)
    )
    attention = attention or seq2seq.BahdanauAttention(5)
    return seq2seq.AttentionDecoderCell(inner, attention, **kwargs)
