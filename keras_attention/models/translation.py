"""An attention encoder-decoder translator (Bahdanau et al. / Luong et al.).

`Translator` is the model of the translation example: token ids →
`Embedding(mask_zero=True)` → a bidirectional GRU encoder (the memory) →
an `AttentionDecoderCell` (GRU, input feeding, Luong's attentional layer
`tanh(W_c [c_t; h_t])`) started from the encoder's last states through a
`Dense` bridge → a softmax over the target vocabulary. Both vocabularies
are part of its config, so a saved `.keras` file translates raw text on its
own (`Translator.translate`). The helpers below build the vocabularies,
evaluate BLEU with sacrebleu and measure where the decoder attends.
"""

import keras
import numpy as np
from keras import ops

from keras_attention.data.translation import detokenize
from keras_attention.data.translation import tokenize
from keras_attention.seq2seq.attention import BahdanauAttention
from keras_attention.seq2seq.attention import LuongAttention
from keras_attention.seq2seq.cell import AttentionDecoder
from keras_attention.seq2seq.cell import AttentionDecoderCell
from keras_attention.seq2seq.decoding import beam_search_decode
from keras_attention.seq2seq.decoding import greedy_decode

START_TOKEN = "[start]"
END_TOKEN = "[end]"
_ATTENTIONS = ("bahdanau", "general", "concat")
# Ids below this are "" (padding) and "[UNK]" in a TextVectorization vocab.
_SPECIAL_IDS = 2


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"positive integer. Received: {name}={value!r}"
        )


def _vectorizer(vocabulary):
    return keras.layers.TextVectorization(
        standardize=None, split="whitespace", vocabulary=list(vocabulary)
    )


def target_text(text: str) -> str:
    """The tokenized target with its start and end tokens."""
    return f"{START_TOKEN} {tokenize(text)} {END_TOKEN}"


def build_vocabularies(
    sources, targets, max_source_tokens=None, max_target_tokens=None
):
    """Adapts one `TextVectorization` per language on training text.

    Args:
        sources: Training source sentences (raw text).
        targets: Training target sentences (raw text).
        max_source_tokens: Optional vocabulary size limit (most frequent
            tokens kept), padding and `[UNK]` included.
        max_target_tokens: The same for the target.

    Returns:
        `(source_vocabulary, target_vocabulary)`: lists of strings that
        start with `""` (padding, id 0) and `"[UNK]"` (id 1); the target
        one holds `"[start]"` and `"[end]"`.
    """
    vocabularies = []
    for texts, max_tokens in (
        ([tokenize(t) for t in sources], max_source_tokens),
        ([target_text(t) for t in targets], max_target_tokens),
    ):
        layer = keras.layers.TextVectorization(
            max_tokens=max_tokens, standardize=None, split="whitespace"
        )
        layer.adapt(texts)
        vocabularies.append([str(w) for w in layer.get_vocabulary()])
    return tuple(vocabularies)


@keras.saving.register_keras_serializable(package="keras_attention")
class Translator(keras.Model):
    """A BiGRU encoder and an attention GRU decoder over token ids.

    Encoder: `h̄ = BiGRU(E_src x)`, the memory, masked where `x = 0`.
    Decoder: `AttentionDecoderCell(GRUCell(units), attention,
    attention_layer_units=units)` started at `tanh(W_b [→h̄_S; ←h̄_1])`;
    `p(y_t | y_{<t}, x) = softmax(W_o ã_t)` where `ã_t = tanh(W_c [c_t;
    h_t])` and `c_t` is the attention context. Trained with teacher forcing
    on `(source_ids, target_input_ids)`; decoded greedily or with beam
    search.

    Args:
        source_vocabulary: Source tokens by id; id 0 is padding, id 1
            `[UNK]` (as `TextVectorization.get_vocabulary()` returns).
        target_vocabulary: Target tokens by id, the same way, holding
            `start_token` and `end_token`.
        embedding_dim: Size of both embeddings. Defaults to `64`.
        units: Units of each encoder direction and of the decoder.
            Defaults to `64`.
        attention: `"bahdanau"` (additive), `"general"` or `"concat"`
            (Luong). Defaults to `"bahdanau"`.
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

    >>> from keras_attention.models.translation import Translator
    >>> model = Translator(
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
        super().__init__(**kwargs)
        for name, value in (
            ("embedding_dim", embedding_dim),
            ("units", units),
            ("max_output_length", max_output_length),
            ("beam_width", beam_width),
        ):
            _check_positive_int(name, value)
        if attention not in _ATTENTIONS:
            raise ValueError(
                "Received an invalid value for argument `attention`, "
                f"expected one of {list(_ATTENTIONS)}. "
                f"Received: attention={attention!r}"
            )
        self.source_vocabulary = [str(w) for w in source_vocabulary]
        self.target_vocabulary = [str(w) for w in target_vocabulary]
        for token in (start_token, end_token):
            if token not in self.target_vocabulary:
                raise ValueError(
                    f"The target vocabulary has no {token!r} token; build it "
                    "from texts made by `target_text`. Received: "
                    f"target_vocabulary[:10]={self.target_vocabulary[:10]}"
                )
        self.embedding_dim = embedding_dim
        self.units = units
        self.attention = attention
        self.max_output_length = max_output_length
        self.beam_width = beam_width
        self.length_penalty = float(length_penalty)
        self.dropout = float(dropout)
        self.start_token = start_token
        self.end_token = end_token
        self.start_id = self.target_vocabulary.index(start_token)
        self.end_id = self.target_vocabulary.index(end_token)

        self.source_embedding = keras.layers.Embedding(
            len(self.source_vocabulary),
            embedding_dim,
            mask_zero=True,
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
            name="target_embedding",
        )
        if attention == "bahdanau":
            mechanism = BahdanauAttention(units, name="attention")
        else:
            mechanism = LuongAttention(attention, units=units, name="attention")
        self.decoder_cell = AttentionDecoderCell(
            keras.layers.GRUCell(units, name="gru_cell"),
            mechanism,
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
        # Every size is known now, so the variables are created here: a
        # loaded model is complete before its weights are read.
        self.source_embedding.build((None, None))
        self.encoder.build((None, None, embedding_dim))
        self.bridge.build((None, 2 * units))
        self.target_embedding.build((None, None))
        self.decoder.build((None, None, embedding_dim), (None, None, 2 * units))
        self.output_layer.build((None, units))
        self.built = True

    def encode(self, source_ids, training=None):
        """Returns `(memory, memory_mask, initial_decoder_state)`."""
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

    def decode(self, source_ids, beam_width=None):
        """Translates ids; returns a `keras_attention.seq2seq.DecodeResult`."""
        beam_width = self.beam_width if beam_width is None else beam_width
        memory, memory_mask, state = self.encode(source_ids, training=False)
        common = {
            "cell": self.decoder_cell,
            "memory": memory,
            "embedding": self.target_embedding,
            "output_layer": self.output_layer,
            "start_token": self.start_id,
            "end_token": self.end_id,
            "max_length": self.max_output_length,
            "memory_mask": memory_mask,
            "cell_state": [state],
        }
        if beam_width == 1:
            return greedy_decode(**common)
        return beam_search_decode(
            **common, beam_width=beam_width, length_penalty=self.length_penalty
        )

    def call(self, inputs, training=None):
        if isinstance(inputs, (list, tuple)):
            source_ids, target_input_ids = inputs
            logits, _ = self.teacher_forcing(
                source_ids, target_input_ids, training=training
            )
            return logits
        result = self.decode(inputs)
        return result.tokens, result.scores, result.alignments

    def vectorize_sources(self, texts):
        """Raw source texts → padded ids `(batch_size, longest)` (NumPy)."""
        ids = _vectorizer(self.source_vocabulary)([tokenize(t) for t in texts])
        return np.asarray(ops.convert_to_numpy(ids), dtype="int32")

    def vectorize_targets(self, texts):
        """Raw target texts → ids of `[start] ... [end]`, padded (NumPy)."""
        ids = _vectorizer(self.target_vocabulary)(
            [target_text(t) for t in texts]
        )
        return np.asarray(ops.convert_to_numpy(ids), dtype="int32")

    def tokens_to_words(self, tokens):
        """One id sequence → its words, up to the end token."""
        words = []
        for token in np.asarray(tokens).tolist():
            if token == self.end_id:
                break
            if token >= _SPECIAL_IDS and token != self.start_id:
                words.append(self.target_vocabulary[token])
            elif token == 1:
                words.append("[UNK]")
        return words

    def translate(self, texts, beam_width=None, return_alignments=False):
        """Translates raw texts eagerly.

        Args:
            texts: A list of source sentences.
            beam_width: Defaults to the model's `beam_width`.
            return_alignments: Whether to also return, per sentence, the
                `(target_words, source_words, weights)` triple for plots.

        Returns:
            The detokenized translations, and the alignments if asked.
        """
        ids = self.vectorize_sources(texts)
        result = self.decode(ids, beam_width=beam_width)
        tokens = ops.convert_to_numpy(result.tokens)
        weights = ops.convert_to_numpy(result.alignments)
        translations, alignments = [], []
        for i, text in enumerate(texts):
            words = self.tokens_to_words(tokens[i])
            translations.append(detokenize(words))
            source_words = tokenize(text).split()
            alignments.append(
                (
                    words,
                    source_words,
                    weights[i, : len(words), : len(source_words)],
                )
            )
        if return_alignments:
            return translations, alignments
        return translations

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocabulary": self.source_vocabulary,
            "target_vocabulary": self.target_vocabulary,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "attention": self.attention,
            "max_output_length": self.max_output_length,
            "beam_width": self.beam_width,
            "length_penalty": self.length_penalty,
            "dropout": self.dropout,
            "start_token": self.start_token,
            "end_token": self.end_token,
        }


def decode_corpus(model, source_ids, beam_width=None, batch_size=64):
    """Decodes many sentences with `model.predict` (compiled, batched).

    Args:
        model: A `Translator`.
        source_ids: `(num_sentences, source_time)` ids.
        beam_width: Defaults to the model's `beam_width`.
        batch_size: Sentences per batch. Defaults to `64`.

    Returns:
        `(tokens, scores, alignments)` as NumPy arrays.
    """
    previous = model.beam_width
    if beam_width is not None:
        _check_positive_int("beam_width", beam_width)
        model.beam_width = beam_width
    try:
        model.make_predict_function(force=True)
        outputs = model.predict(source_ids, batch_size=batch_size, verbose=0)
    finally:
        model.beam_width = previous
        model.make_predict_function(force=True)
    return tuple(np.asarray(o) for o in outputs)


def translate_corpus(model, sources, beam_width=None, batch_size=64):
    """Translates raw sentences; returns `(translations, tokens, alignments)`.

    `translations` are detokenized strings, `tokens[i]` the target words of
    sentence `i` and `alignments[i]` its `(target_words, source_words)`
    weights.
    """
    ids = model.vectorize_sources(sources)
    tokens, _, weights = decode_corpus(model, ids, beam_width, batch_size)
    translations, words_list, alignments = [], [], []
    for i, text in enumerate(sources):
        words = model.tokens_to_words(tokens[i])
        source_length = len(tokenize(text).split())
        translations.append(detokenize(words))
        words_list.append(words)
        alignments.append(weights[i, : len(words), :source_length])
    return translations, words_list, alignments


def corpus_bleu(hypotheses, references) -> float:
    """Corpus BLEU (sacrebleu, 13a tokenization, case-insensitive).

    Case is ignored because the model's tokenizer lower-cases its input;
    `hypotheses` and `references` are detokenized strings.
    """
    import sacrebleu

    return float(
        sacrebleu.corpus_bleu(
            list(hypotheses), [list(references)], lowercase=True
        ).score
    )


def alignment_accuracy(model, corpus, batch_size=128) -> float:
    """Share of target words whose strongest attention falls on their source.

    Definition. For every pair of `corpus` (which must carry gold
    `alignments`, e.g. from `make_synthetic_translation`), the gold target
    is fed to the decoder (teacher forcing, so every target word has a
    decoder step and a gold source position). For target word `j`, the
    step that predicts it attends with weights `α_j` over the source words;
    the word counts as aligned when `argmax_s α_js` is the position of the
    source word it translates. The result is the number of aligned target
    words over the number of target words (the end token is not a word and
    is not counted).

    Args:
        model: A `Translator`.
        corpus: A `ParallelCorpus` with `alignments`.
        batch_size: Pairs per batch. Defaults to `128`.

    Returns:
        A float in `[0, 1]`.
    """
    if corpus.alignments is None:
        raise ValueError(
            "alignment_accuracy needs gold alignments (the synthetic task "
            "has them). Received: corpus.alignments=None"
        )
    hits = total = 0
    for start in range(0, len(corpus), batch_size):
        stop = start + batch_size
        source_ids = model.vectorize_sources(corpus.sources[start:stop])
        target_ids = model.vectorize_targets(corpus.targets[start:stop])
        _, weights = model.teacher_forcing(
            source_ids, target_ids[:, :-1], training=False
        )
        weights = ops.convert_to_numpy(weights)
        for i, gold in enumerate(corpus.alignments[start:stop]):
            predicted = weights[i, : len(gold)].argmax(axis=-1)
            hits += int(np.sum(predicted == np.asarray(gold)))
            total += len(gold)
    return hits / max(total, 1)


# Training and reporting for the example. TensorFlow (tf.data,
# tf.distribute) is imported inside these functions only.


def get_strategy(name: str = "none"):
    """`"none"`, `"mirrored"` or `"multi-worker"` → a `tf.distribute` strategy.

    `"multi-worker"` reads the cluster from `TF_CONFIG` (without it, it runs
    as a single worker) and must be created before any other TensorFlow op.
    """
    import tensorflow as tf

    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(
        "Received an invalid value for argument `distribute`, expected one "
        "of ['none', 'mirrored', 'multi-worker']. "
        f"Received: distribute={name!r}"
    )


def is_chief(strategy=None) -> bool:
    """Whether this process writes the run's files (worker 0 / no cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
    )


def make_dataset(model, corpus, batch_size, shuffle=False, seed=0):
    """`((source_ids, target_input_ids), target_output_ids)` batches.

    Each batch is cut to its own longest sentence, so short sentences do not
    pay for the longest of the corpus.
    """
    import tensorflow as tf

    sources = model.vectorize_sources(corpus.sources)
    targets = model.vectorize_targets(corpus.targets)
    dataset = tf.data.Dataset.from_tensor_slices((sources, targets))
    if shuffle:
        dataset = dataset.shuffle(len(corpus), seed=seed)

    def trim(source, target):
        def length(ids):
            return tf.reduce_max(tf.reduce_sum(tf.cast(ids > 0, "int32"), 1))

        source = source[:, : length(source)]
        target = target[:, : length(target)]
        return (source, target[:, :-1]), target[:, 1:]

    return dataset.batch(batch_size).map(trim).prefetch(tf.data.AUTOTUNE)


class TrainResult:
    """What `train_translator` returns: the model and how training went."""

    def __init__(self, model, history, epochs_trained, train_seconds):
        self.model = model
        self.history = history
        self.epochs_trained = epochs_trained
        self.train_seconds = train_seconds


def train_translator(
    train,
    validation,
    output_dir,
    epochs=20,
    batch_size=64,
    learning_rate=3e-3,
    patience=3,
    strategy=None,
    seed=0,
    verbose=1,
    max_source_tokens=None,
    max_target_tokens=None,
    **model_kwargs,
):
    """Builds a `Translator` on `train`'s vocabularies and fits it.

    Vocabularies are adapted on `train` only. The model is built and
    compiled in `strategy.scope()`. Callbacks: the progress bar (or one
    line per epoch with `verbose=2`), `EarlyStopping` on the validation
    loss (best weights restored), `ModelCheckpoint` of the best model in
    `output_dir/checkpoint.keras`, and `BackupAndRestore` in
    `output_dir/backup`, so a killed run resumes from its last epoch.

    Args:
        train: Training `ParallelCorpus`.
        validation: Validation `ParallelCorpus`.
        output_dir: Run directory.
        epochs: Most epochs. Defaults to `20`.
        batch_size: Defaults to `64`.
        learning_rate: Adam's learning rate. Defaults to `3e-3`.
        patience: Epochs without validation improvement before stopping.
            Defaults to `3`.
        strategy: A `tf.distribute` strategy. Defaults to the default one.
        seed: Seed of the initialisation and the shuffling. Defaults to `0`.
        verbose: `fit`'s verbosity. Defaults to `1`.
        max_source_tokens: Optional source vocabulary size.
        max_target_tokens: Optional target vocabulary size.
        **model_kwargs: `Translator` arguments (`embedding_dim`, `units`,
            `attention`, `max_output_length`, `beam_width`, `dropout`, ...).

    Returns:
        A `TrainResult`.
    """
    import os
    import time

    if strategy is None:
        strategy = get_strategy("none")
    keras.utils.set_random_seed(seed)
    source_vocabulary, target_vocabulary = build_vocabularies(
        train.sources, train.targets, max_source_tokens, max_target_tokens
    )
    if "max_output_length" not in model_kwargs:
        longest = max(len(tokenize(t).split()) for t in train.targets)
        model_kwargs["max_output_length"] = 2 * longest + 2
    with strategy.scope():
        model = Translator(source_vocabulary, target_vocabulary, **model_kwargs)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate, clipnorm=5.0),
            loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, ignore_class=0
            ),
            jit_compile=False,
        )
    train_data = make_dataset(model, train, batch_size, shuffle=True, seed=seed)
    validation_data = make_dataset(model, validation, batch_size)
    os.makedirs(output_dir, exist_ok=True)
    backup_dir = os.path.join(output_dir, "backup")
    checkpoint = os.path.join(output_dir, "checkpoint.keras")
    if not is_chief(strategy):
        # Other workers write throw-away copies (as Keras asks for).
        index = strategy.cluster_resolver.task_id
        backup_dir = os.path.join(backup_dir, f"worker_{index}")
        checkpoint = os.path.join(output_dir, f"worker_{index}.keras")
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir),
        keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=patience, restore_best_weights=True
        ),
        keras.callbacks.ModelCheckpoint(
            checkpoint, monitor="val_loss", save_best_only=True
        ),
    ]
    start = time.perf_counter()
    history = model.fit(
        train_data,
        validation_data=validation_data,
        epochs=epochs,
        callbacks=callbacks,
        verbose=verbose,
        # The dataset shuffles itself.
        shuffle=False,
    )
    seconds = time.perf_counter() - start
    return TrainResult(
        model, history.history, len(history.history.get("loss", [])), seconds
    )


def evaluate_translator(model, corpus, beam_width=None, batch_size=64):
    """BLEU (and alignment accuracy when `corpus` has gold alignments).

    Returns:
        A dict with `bleu`, `examples`, and `alignment_accuracy` on data
        with alignments, plus the `translations`, `words` and `alignments`
        (decoded) lists for reports.
    """
    translations, words, alignments = translate_corpus(
        model, corpus.sources, beam_width=beam_width, batch_size=batch_size
    )
    references = [detokenize(tokenize(t)) for t in corpus.targets]
    result = {
        "bleu": corpus_bleu(translations, references),
        "examples": len(corpus),
        "translations": translations,
        "words": words,
        "alignments": alignments,
    }
    if corpus.alignments is not None:
        result["alignment_accuracy"] = alignment_accuracy(
            model, corpus, batch_size=batch_size
        )
    return result


def save_alignment_plot(sources, words, alignments, path, count=4):
    """Target × source heatmaps of the first `count` decoded sentences."""
    from keras_attention.visualize import plot_attention_grid

    weights_list, x_labels, y_labels, titles = [], [], [], []
    for i in range(min(count, len(sources))):
        source_words = tokenize(sources[i]).split()
        target_words = list(words[i]) or ["(empty)"]
        weights = np.asarray(alignments[i], dtype="float32")
        if weights.shape[0] == 0:
            weights = np.zeros((1, len(source_words)), dtype="float32")
        weights_list.append(weights)
        x_labels.append(source_words)
        y_labels.append(target_words)
        titles.append(f"sentence {i}")
    plot_attention_grid(weights_list, x_labels, y_labels, titles, path=path)
