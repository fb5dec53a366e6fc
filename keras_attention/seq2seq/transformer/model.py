"""`TransformerTranslator`: an encoder-decoder Transformer over token ids.

Made of this package's layers only (`TransformerEncoderBlock` and
`TransformerDecoderBlock`: `SelfAttention` or `GroupedQueryAttention` with
rotary embeddings, `MultiHeadAttention` over the memory), with the raw-text
interface of `keras_attention.seq2seq.Translator` (`translate`, the
vocabularies in the config), and decoded by the package's greedy, beam and
sampling decoders through `TransformerDecoderCell` and its key/value
cache.
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.seq2seq import checks
from keras_attention.seq2seq.text_translator import EMBEDDINGS_INITIALIZER
from keras_attention.seq2seq.text_translator import END_TOKEN
from keras_attention.seq2seq.text_translator import START_TOKEN
from keras_attention.seq2seq.text_translator import TextTranslator
from keras_attention.seq2seq.transformer.blocks import TransformerDecoderBlock
from keras_attention.seq2seq.transformer.blocks import TransformerEncoderBlock
from keras_attention.seq2seq.transformer.cell import TransformerDecoderCell
from keras_attention.seq2seq.transformer.cell import run_stack


class _TiedOutput(keras.layers.Layer):
    """Logits from the target embedding's own table (Press & Wolf, 2017).

    `logits = h · Eᵀ / sqrt(model_dim) + b`: `E` is the embedding layer's
    `(vocabulary, model_dim)` table, a sublayer here and in the model
    (Keras tracks and saves it once), and the scale keeps unit-variance
    embeddings from giving logits of standard deviation `sqrt(model_dim)`
    on layer-normalized inputs. Only a `TransformerTranslator` builds it.
    """

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        self.units = embedding.input_dim

    def build(self, input_shape):
        self.bias = self.add_weight(
            shape=(self.units,), initializer="zeros", name="bias"
        )
        self.built = True

    def call(self, inputs):
        table = ops.cast(self.embedding.embeddings, inputs.dtype)
        scale = ops.cast(1.0 / self.embedding.output_dim**0.5, inputs.dtype)
        logits = ops.matmul(inputs, ops.transpose(table)) * scale
        return logits + ops.cast(self.bias, inputs.dtype)


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerTranslator(TextTranslator):
    """A pre-norm encoder-decoder Transformer (Vaswani et al., 2017).

    Encoder: `num_layers` `TransformerEncoderBlock`s over the source
    embeddings (self-attention masked at padding, rotary positions), then
    a `LayerNormalization`: the memory. Decoder: `num_layers`
    `TransformerDecoderBlock`s over the target embeddings (causal
    self-attention, cross-attention over the memory), a
    `LayerNormalization` and a softmax layer. Trained with teacher forcing
    on `(source_ids, target_input_ids)`; decoded one token per step with
    the key/value cache (`decode(use_cache=False)` runs the whole prefix
    at every step instead, with the same result).

    Args:
        source_vocabulary: Source tokens by id; id 0 is padding, id 1
            `[UNK]` (as `TextVectorization.get_vocabulary()` returns).
        target_vocabulary: Target tokens by id, the same way, holding
            `start_token` and `end_token`.
        model_dim: Width of the embeddings and the residual stream.
            Defaults to `256`.
        num_layers: Blocks in the encoder and in the decoder. Defaults to
            `3`.
        num_heads: Attention heads. Defaults to `4`.
        feed_forward_dim: Hidden width of each block's feed-forward
            network. Defaults to `1024`.
        num_key_value_heads: Key/value heads (grouped-query attention);
            `None`, the default, gives every query head its own.
        dropout: Rate on the embeddings, attention weights, feed-forward
            hidden layers and sublayer outputs in training. Defaults to
            `0.1`.
        max_output_length: Most tokens emitted, the end token included
            (also the size of the decoding cache). Defaults to `50`.
        beam_width: Beam width used by `call` (`1` is greedy). Defaults to
            `1`.
        length_penalty: GNMT length penalty exponent of beam search.
            Defaults to `0.0`.
        use_cache: Whether `call`/`decode` step with the key/value cache
            (`True`, the default) or run the whole prefix at every step.
        tie_embeddings: Whether the output layer reuses the target
            embedding's table (`logits = h · Eᵀ / sqrt(model_dim) + b`,
            Press & Wolf 2017) instead of a `Dense` layer of its own.
            Defaults to `False`.
        sliding_window: Local and global layers (Gemma 3's): with a
            window, the self-attentions of every layer but each
            `global_every`-th are local, each position seeing those
            `|i - j| < sliding_window` (the decoder's: the
            `sliding_window` most recent), and decoding keeps a
            `RollingCache` of the window for them. Defaults to `None`:
            every layer global.
        global_every: With `sliding_window`, layer `i` (from 0) is global
            where `(i + 1) % global_every == 0`: `6` is Gemma 3's five
            local layers to one global. Defaults to `6`.
        cache_dtype: The entries of the decoding caches of the global
            layers: `None` (the compute dtype), `"int8"` or
            `"float8_e4m3fn"` (a `QuantizedCache`: a quarter of float32's
            bytes for int8, with one float32 scale per position and
            head). Defaults to `None`.
        start_token: Defaults to `"[start]"`.
        end_token: Defaults to `"[end]"`.
        **kwargs: `keras.Model` keyword arguments such as `name`.

    Call arguments:
        inputs: Source ids `(batch_size, source_time)` to translate, or a
            tuple `(source_ids, target_input_ids)` for teacher forcing.
        training: Whether dropout is active.

    Returns:
        As `keras_attention.seq2seq.Translator`: for source ids `(tokens,
        scores, alignments)`, for a tuple the logits `(batch_size,
        target_time, target_vocab_size)` in `float32`. The alignments are
        the last decoder block's cross-attention weights averaged over
        heads.

    Example:

    >>> model = keras_attention.models.TransformerTranslator(
    ...     ["", "[UNK]", "ein", "hund"],
    ...     ["", "[UNK]", "[start]", "[end]", "a", "dog"],
    ...     model_dim=8,
    ...     num_layers=1,
    ...     num_heads=2,
    ...     feed_forward_dim=16,
    ...     max_output_length=4,
    ... )
    >>> tokens, scores, alignments = model(np.array([[2, 3]]))
    >>> tuple(tokens.shape), tuple(alignments.shape)
    ((1, 4), (1, 4, 2))
    >>> len(model.translate(["ein hund"]))
    1

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Xiong et al., 2020](https://arxiv.org/abs/2002.04745)
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Press & Wolf, 2017](https://arxiv.org/abs/1608.05859)
    """

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        model_dim=256,
        num_layers=3,
        num_heads=4,
        feed_forward_dim=1024,
        num_key_value_heads=None,
        dropout=0.1,
        max_output_length=50,
        beam_width=1,
        length_penalty=0.0,
        use_cache=True,
        tie_embeddings=False,
        sliding_window=None,
        global_every=6,
        cache_dtype=None,
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
        self.model_dim = model_dim
        self.num_layers = _validation.positive_int("num_layers", num_layers)
        self.num_heads = num_heads
        self.feed_forward_dim = feed_forward_dim
        self.num_key_value_heads = num_key_value_heads
        self.dropout = _validation.rate("dropout", dropout)
        self.use_cache = bool(use_cache)
        self.tie_embeddings = bool(
            _validation.optional_bool("tie_embeddings", tie_embeddings)
        )
        self.sliding_window = _validation.positive_int(
            "sliding_window", sliding_window, allow_none=True
        )
        self.global_every = _validation.positive_int(
            "global_every", global_every
        )
        if (
            cache_dtype == "float8_e4m3fn"
            and keras.backend.backend() == "tensorflow"
        ):
            # The decoding loops are graph `tf.while_loop`s, whose Switch
            # and Merge have no float8 kernels.
            raise ValueError(
                "TransformerTranslator decodes with a float8 cache on JAX "
                "and PyTorch: TensorFlow's while loops have no float8 "
                "kernels. Use cache_dtype='int8' (the same bytes) on "
                "TensorFlow. Received: cache_dtype='float8_e4m3fn'"
            )
        self.cache_dtype = cache_dtype
        self._build_layers()

    def _window_of(self, layer):
        """The window of layer `layer` (from 0): `None` where global."""
        if (layer + 1) % self.global_every == 0:
            return None
        return self.sliding_window

    def _block_arguments(self):
        return {
            "model_dim": self.model_dim,
            "num_heads": self.num_heads,
            "feed_forward_dim": self.feed_forward_dim,
            "num_key_value_heads": self.num_key_value_heads,
            "dropout": self.dropout,
        }

    def _output_layer(self):
        if self.tie_embeddings:
            return _TiedOutput(self.target_embedding, name="output_layer")
        return keras.layers.Dense(
            len(self.target_vocabulary), name="output_layer"
        )

    def _blocks(self, block_class, prefix):
        """`num_layers` blocks of `block_class`, each with its layer's
        window (local or global)."""
        return [
            block_class(
                **self._block_arguments(),
                sliding_window=self._window_of(i),
                name=f"{prefix}_{i}",
            )
            for i in range(self.num_layers)
        ]

    def _build_layers(self):
        """The sublayers, built: a loaded model is complete before its
        weights are read."""
        dim = self.model_dim
        self.source_embedding = keras.layers.Embedding(
            len(self.source_vocabulary),
            dim,
            embeddings_initializer=EMBEDDINGS_INITIALIZER,
            name="source_embedding",
        )
        self.target_embedding = keras.layers.Embedding(
            len(self.target_vocabulary),
            dim,
            embeddings_initializer=EMBEDDINGS_INITIALIZER,
            name="target_embedding",
        )
        self.encoder_blocks = self._blocks(TransformerEncoderBlock, "encoder")
        self.decoder_blocks = self._blocks(TransformerDecoderBlock, "decoder")
        self.encoder_norm = keras.layers.LayerNormalization(
            epsilon=1e-6, name="encoder_norm"
        )
        self.decoder_norm = keras.layers.LayerNormalization(
            epsilon=1e-6, name="decoder_norm"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout)
        self.output_layer = self._output_layer()
        self.decoder_cell = TransformerDecoderCell(
            self.decoder_blocks,
            self.decoder_norm,
            self.max_output_length,
            cache_dtype=self.cache_dtype,
            name="decoder_cell",
        )
        self.uncached_decoder_cell = TransformerDecoderCell(
            self.decoder_blocks,
            self.decoder_norm,
            self.max_output_length,
            use_cache=False,
            name="uncached_decoder_cell",
        )
        shape = (None, None, dim)
        self.source_embedding.build((None, None))
        self.target_embedding.build((None, None))
        for block in self.encoder_blocks:
            block.build(shape)
        for block in self.decoder_blocks:
            block.build(shape, shape)
        self.encoder_norm.build(shape)
        self.decoder_norm.build(shape)
        self.output_layer.build(shape)
        self.built = True

    def encode(self, source_ids, training=None):
        """Returns `(memory, memory_mask)` for source ids `(B, S)`."""
        self.check_source_rank(source_ids)
        source_ids = ops.cast(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)
        x = self.dropout_layer(
            self.source_embedding(source_ids), training=training
        )
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, training=training)
        return self.encoder_norm(x), mask

    def encoder_attention(self, source_ids):
        """Each encoder block's self-attention weights, by layer path.

        One inference pass of the encoder over source ids `(B, S)`;
        returns `{"<model>/<block>/self_attention": (B, heads, S, S)}`,
        first block first, each query row summing to 1 over the source's
        words (a padded query row is all zeros).
        """
        self.check_source_rank(source_ids)
        source_ids = ops.cast(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)
        x = self.source_embedding(source_ids)
        weights = {}
        for block in self.encoder_blocks:
            x, block_weights = block(
                x, padding_mask=mask, return_attention_scores=True
            )
            path = f"{self.name}/{block.name}/{block.self_attention.name}"
            weights[path] = block_weights
        return weights

    def teacher_forcing(self, source_ids, target_input_ids, training=None):
        """Logits and alignments with the gold target fed at every step.

        Returns:
            `(logits, alignments)`: `(batch_size, target_time, vocab)` in
            `float32` and `(batch_size, target_time, source_time)`; row `t`
            of the alignments belongs to the step that predicts target
            token `t + 1`.
        """
        memory, memory_mask = self.encode(source_ids, training)
        target_input_ids = ops.cast(target_input_ids, "int32")
        y = self.dropout_layer(
            self.target_embedding(target_input_ids), training=training
        )
        outputs, alignments = run_stack(
            self.decoder_blocks,
            self.decoder_norm,
            y,
            memory,
            memory_mask,
            ops.not_equal(target_input_ids, 0),
            training,
        )
        logits = ops.cast(self.output_layer(outputs), "float32")
        return logits, alignments

    def decode(
        self,
        source_ids,
        beam_width=None,
        decoding=None,
        use_cache=None,
        **options,
    ):
        """Translates ids; returns a `keras_attention.seq2seq.DecodeResult`.

        Args:
            source_ids: `(batch_size, source_time)`.
            beam_width: Defaults to the model's `beam_width`.
            decoding: `"greedy"`, `"beam"` or `"sample"`, as
                `Translator.decode`.
            use_cache: Whether each step reads the key/value cache or runs
                the whole prefix again. Defaults to the model's
                `use_cache`.
            **options: The decoding's options, as `Translator.decode`.
        """
        checks.token_id_inputs(
            "TransformerTranslator", "source_ids", source_ids, self._vocab
        )
        memory, memory_mask = self.encode(source_ids, training=False)
        use_cache = self.use_cache if use_cache is None else use_cache
        cell = self.decoder_cell if use_cache else self.uncached_decoder_cell
        common = {
            "cell": cell,
            "memory": memory,
            "embedding": self.target_embedding,
            "output_layer": self.output_layer,
            "memory_mask": memory_mask,
        }
        return self.run_decoder(common, beam_width, decoding, options)

    def get_config(self):
        return {
            **super().get_config(),
            "model_dim": self.model_dim,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "feed_forward_dim": self.feed_forward_dim,
            "num_key_value_heads": self.num_key_value_heads,
            "dropout": self.dropout,
            "use_cache": self.use_cache,
            "tie_embeddings": self.tie_embeddings,
            "sliding_window": self.sliding_window,
            "global_every": self.global_every,
            "cache_dtype": self.cache_dtype,
        }
