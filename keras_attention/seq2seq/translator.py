"""An attention encoder-decoder translator (Bahdanau et al. / Luong et al.).

`Translator` is a complete, serializable neural machine translation model
built from this package: token ids → `Embedding(mask_zero=True)` → a
bidirectional GRU encoder (the memory) → an `AttentionDecoderCell` (GRU,
input feeding, Luong's attentional layer `tanh(W_c [c_t; h_t])`) started
from the encoder's last states through a `Dense` bridge → a softmax over the
target vocabulary. Both vocabularies are part of its config, so a saved
`.keras` file translates raw text on its own (`Translator.translate`), and
it loads after `import keras_attention` with `safe_mode=True`.
`keras_attention.models.translation` builds, trains and evaluates it.
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.seq2seq import checks
from keras_attention.seq2seq.attention import BahdanauAttention
from keras_attention.seq2seq.attention import LuongAttention
from keras_attention.seq2seq.cell import AttentionDecoderCell
from keras_attention.seq2seq.decoder import AttentionDecoder
from keras_attention.seq2seq.monotonic import BahdanauMonotonicAttention
from keras_attention.seq2seq.monotonic import LuongMonotonicAttention
from keras_attention.seq2seq.text_translator import EMBEDDINGS_INITIALIZER
from keras_attention.seq2seq.text_translator import END_TOKEN as END_TOKEN
from keras_attention.seq2seq.text_translator import START_TOKEN as START_TOKEN
from keras_attention.seq2seq.text_translator import TextTranslator
from keras_attention.seq2seq.text_translator import target_text as target_text

_ATTENTIONS = (
    "bahdanau",
    "general",
    "concat",
    "bahdanau_monotonic",
    "luong_monotonic",
)


@keras.saving.register_keras_serializable(package="keras_attention")
class Translator(TextTranslator):
    """A BiGRU encoder and an attention GRU decoder over token ids.

    Encoder: `h̄ = BiGRU(E_src x)`, the memory, masked where `x = 0`.
    Decoder: `AttentionDecoderCell(GRUCell(units), attention,
    attention_layer_units=units)` started at `tanh(W_b [→h̄_S; ←h̄_1])`;
    `p(y_t | y_{<t}, x) = softmax(W_o ã_t)` where `ã_t = tanh(W_c [c_t;
    h_t])` and `c_t` is the attention context. Trained with teacher forcing
    on `(source_ids, target_input_ids)`; decoded greedily or with beam
    search. Both embeddings start from `N(0, 1)`: Keras's default
    `uniform(±0.05)` leaves the decoder on the unigram plateau for many
    epochs on real text.

    Args:
        source_vocabulary: Source tokens by id; id 0 is padding, id 1
            `[UNK]` (as `TextVectorization.get_vocabulary()` returns).
        target_vocabulary: Target tokens by id, the same way, holding
            `start_token` and `end_token`.
        embedding_dim: Size of both embeddings. Defaults to `64`.
        units: Units of each encoder direction and of the decoder.
            Defaults to `64`.
        attention: `"bahdanau"` (additive), `"general"` or `"concat"`
            (Luong), or a monotonic mechanism (Raffel et al., 2017, expected
            alignments, `mode="parallel"`): `"bahdanau_monotonic"`
            (`BahdanauMonotonicAttention(units, normalize=True)`) or
            `"luong_monotonic"` (`LuongMonotonicAttention("general",
            scale=True)`). Defaults to `"bahdanau"`.
        max_output_length: Most tokens emitted by `call`/`decode`, the end
            token included. Defaults to `50`.
        beam_width: Beam width used by `call` (`1` is greedy). Defaults to
            `1`.
        length_penalty: GNMT length penalty exponent of beam search.
            Defaults to `0.0`.
        dropout: Dropout rate on the embeddings and the attentional
            vectors during training. Defaults to `0.0`.
        start_token: Defaults to `"[start]"`.
        end_token: Defaults to `"[end]"`.
        **kwargs: `keras.Model` keyword arguments such as `name`.

    Call arguments:
        inputs: Source ids `(batch_size, source_time)` to translate, or a
            tuple `(source_ids, target_input_ids)` for teacher forcing
            (training), the target input starting with the start token.
        training: Whether dropout is active.

    Returns:
        For source ids, the tuple `(tokens, scores, alignments)` of
        `keras_attention.seq2seq.DecodeResult`: `(batch_size,
        max_output_length)` int32, `(batch_size,)` log-probabilities and
        `(batch_size, max_output_length, source_time)` weights. For a
        tuple, the logits `(batch_size, target_time, target_vocab_size)`
        in `float32`.

    Example:

    >>> model = keras_attention.seq2seq.Translator(
    ...     ["", "[UNK]", "ein", "hund"],
    ...     ["", "[UNK]", "[start]", "[end]", "a", "dog"],
    ...     embedding_dim=8,
    ...     units=8,
    ...     max_output_length=4,
    ... )
    >>> tokens, scores, alignments = model(np.array([[2, 3]]))
    >>> tuple(tokens.shape), tuple(alignments.shape)
    ((1, 4), (1, 4, 2))
    >>> len(model.translate(["ein hund"]))
    1

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        embedding_dim=64,
        units=64,
        attention="bahdanau",
        max_output_length=50,
        beam_width=1,
        length_penalty=0.0,
        dropout=0.0,
        start_token=START_TOKEN,
        end_token=END_TOKEN,
        **kwargs,
    ):
        super().__init__(
            source_vocabulary,
            target_vocabulary,
            max_output_length=max_output_length,
            beam_width=beam_width,
            length_penalty=length_penalty,
            start_token=start_token,
            end_token=end_token,
            **kwargs,
        )
        _check_positive_int("embedding_dim", embedding_dim)
        _check_positive_int("units", units)
        if attention not in _ATTENTIONS:
            raise ValueError(
                "Received an invalid value for argument `attention`, "
                f"expected one of {list(_ATTENTIONS)}. "
                f"Received: attention={attention!r}"
            )
        self.embedding_dim = embedding_dim
        self.units = units
        self.attention = attention
        self.dropout = _validation.rate("dropout", dropout)
        self._build_layers()

    def _build_layers(self):
        """Creates the sublayers and, every size being known, their weights.

        So a loaded model is complete before its weights are read.
        """
        embedding_dim, units = self.embedding_dim, self.units
        # Embeddings start from N(0, 1), as PyTorch's `nn.Embedding`. With
        # Keras's default uniform(±0.05) the inputs are so small that the
        # decoder (GRU, then Luong's attentional layer, then the softmax)
        # sits on the unigram plateau for many epochs on real text
        # (Multi30k: ~11 epochs on 1,000 pairs against ~1 with N(0, 1)).
        self.source_embedding = keras.layers.Embedding(
            len(self.source_vocabulary),
            embedding_dim,
            mask_zero=True,
            embeddings_initializer=EMBEDDINGS_INITIALIZER,
            name="source_embedding",
        )
        self.encoder = keras.layers.Bidirectional(
            keras.layers.GRU(units, return_sequences=True, return_state=True),
            name="encoder",
        )
        self.bridge = keras.layers.Dense(
            units, activation="tanh", name="bridge"
        )
        self.target_embedding = keras.layers.Embedding(
            len(self.target_vocabulary),
            embedding_dim,
            mask_zero=True,
            embeddings_initializer=EMBEDDINGS_INITIALIZER,
            name="target_embedding",
        )
        self.decoder_cell = AttentionDecoderCell(
            keras.layers.GRUCell(units, name="gru_cell"),
            _mechanism(self.attention, units),
            attention_layer_units=units,
            name="decoder_cell",
        )
        self.decoder = AttentionDecoder(
            self.decoder_cell, return_alignments=True, name="decoder"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout)
        self.output_layer = keras.layers.Dense(
            len(self.target_vocabulary), name="output_layer"
        )
        self.source_embedding.build((None, None))
        self.encoder.build((None, None, embedding_dim))
        self.bridge.build((None, 2 * units))
        self.target_embedding.build((None, None))
        self.decoder.build((None, None, embedding_dim), (None, None, 2 * units))
        self.output_layer.build((None, units))
        self.built = True

    def encode(self, source_ids, training=None):
        """Returns `(memory, memory_mask, initial_decoder_state)`."""
        self.check_source_rank(source_ids)
        source_ids = ops.cast(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)
        x = self.dropout_layer(
            self.source_embedding(source_ids), training=training
        )
        memory, forward, backward = self.encoder(
            x, mask=mask, training=training
        )
        state = self.bridge(ops.concatenate([forward, backward], axis=-1))
        return memory, mask, state

    def teacher_forcing(self, source_ids, target_input_ids, training=None):
        """Logits and alignments with the gold target fed at every step.

        Args:
            source_ids: `(batch_size, source_time)`.
            target_input_ids: `(batch_size, target_time)`, starting with
                the start token; id 0 is padding.
            training: Whether dropout is active.

        Returns:
            `(logits, alignments)`: `(batch_size, target_time, vocab)` in
            `float32` and `(batch_size, target_time, source_time)`; row `t`
            of the alignments belongs to the step that predicts target
            token `t + 1`.
        """
        memory, memory_mask, state = self.encode(source_ids, training)
        target_input_ids = ops.cast(target_input_ids, "int32")
        y = self.dropout_layer(
            self.target_embedding(target_input_ids), training=training
        )
        outputs, alignments = self.decoder(
            y,
            memory,
            memory_mask=memory_mask,
            initial_state=[state],
            inputs_mask=ops.not_equal(target_input_ids, 0),
            training=training,
        )
        outputs = self.dropout_layer(outputs, training=training)
        logits = ops.cast(self.output_layer(outputs), "float32")
        return logits, alignments

    def decode(self, source_ids, beam_width=None, decoding=None, **options):
        """Translates ids; returns a `keras_attention.seq2seq.DecodeResult`.

        Args:
            source_ids: `(batch_size, source_time)`.
            beam_width: Defaults to the model's `beam_width`.
            decoding: `"greedy"`, `"beam"` (`beam_search_decode`) or
                `"sample"` (`sample_decode`). Defaults to `"beam"` when the
                beam is wider than 1, else `"greedy"`.
            **options: For `"beam"`: `length_penalty` (defaults to the
                model's) and `coverage_penalty`; for `"sample"`:
                `temperature`, `top_k`, `top_p` and `seed`.
        """
        checks.token_id_inputs(
            "Translator", "source_ids", source_ids, self._vocab
        )
        memory, memory_mask, state = self.encode(source_ids, training=False)
        common = {
            "cell": self.decoder_cell,
            "memory": memory,
            "embedding": self.target_embedding,
            "output_layer": self.output_layer,
            "memory_mask": memory_mask,
            "cell_state": [state],
        }
        return self.run_decoder(common, beam_width, decoding, options)

    def get_config(self):
        return {
            **super().get_config(),
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "attention": self.attention,
            "dropout": self.dropout,
        }


def _mechanism(attention, units):
    """The `Translator`'s attention mechanism for its `attention` name."""
    if attention == "bahdanau":
        return BahdanauAttention(units, name="attention")
    if attention == "bahdanau_monotonic":
        return BahdanauMonotonicAttention(
            units, normalize=True, name="attention"
        )
    if attention == "luong_monotonic":
        return LuongMonotonicAttention("general", scale=True, name="attention")
    return LuongAttention(attention, units=units, name="attention")
