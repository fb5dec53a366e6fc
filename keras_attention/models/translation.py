"""Builds, trains and evaluates the translator of the translation example.

The model itself is `keras_attention.seq2seq.Translator` (re-exported here);
this module adapts its vocabularies on training text, feeds it with
`tf.data`, trains it under a `tf.distribute` strategy with resumable
checkpoints, scores it with sacrebleu and measures where it attends (its
pictures are `translation_views`). TensorFlow is imported inside the
training helpers only.
"""

import keras
import numpy as np
from keras import ops

from keras_attention._validation import non_negative_length
from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.models import distribute
from keras_attention.models import fitting
from keras_attention.models.losses import SmoothedSequenceLoss
from keras_attention.models.schedules import TimeLimit
from keras_attention.models.schedules import learning_rate_schedule
from keras_attention.models.truecasing import postprocess
from keras_attention.seq2seq.transformer import TransformerTranslator
from keras_attention.seq2seq.translator import END_TOKEN as END_TOKEN
from keras_attention.seq2seq.translator import START_TOKEN as START_TOKEN
from keras_attention.seq2seq.translator import Translator as Translator
from keras_attention.seq2seq.translator import target_text as target_text
from keras_attention.text import tokenize

#: `train_translator(architecture=...)` → the model class it builds.
ARCHITECTURES = {"rnn": Translator, "transformer": TransformerTranslator}


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

    Example:

    >>> sources, targets = keras_attention.models.build_vocabularies(
    ...     ["ein Hund läuft ."], ["a dog runs ."]
    ... )
    >>> sources[:2], "[start]" in targets, "[end]" in targets
    (['', '[UNK]'], True, True)
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


def decode_corpus(
    model,
    source_ids,
    beam_width=None,
    batch_size=64,
    decoding=None,
    length_penalty=None,
):
    """Decodes many sentences with `model.predict` (compiled, batched).

    The choices are those of `Translator.translate`: greedy, or beam
    search with a width and a GNMT length penalty.

    Args:
        model: A `Translator`.
        source_ids: `(num_sentences, source_time)` ids.
        beam_width: Defaults to the model's `beam_width`.
        batch_size: Sentences per batch. Defaults to `64`.
        decoding: `"greedy"` or `"beam"`. Defaults to `"beam"` when the
            beam is wider than 1, else `"greedy"` (as `Translator.decode`).
        length_penalty: Beam search's length penalty alpha. Defaults to
            the model's `length_penalty`.

    Returns:
        `(tokens, scores, alignments)` as NumPy arrays.
    """
    if decoding not in (None, "greedy", "beam"):
        raise ValueError(
            "Received an invalid value for argument `decoding`, expected "
            f"'greedy' or 'beam' (sampling: `Translator.translate`). "
            f"Received: decoding={decoding!r}"
        )
    if beam_width is not None:
        _check_positive_int("beam_width", beam_width)
    saved = (model.beam_width, model.length_penalty)
    if decoding == "greedy":
        beam_width = 1
    wanted = (
        saved[0] if beam_width is None else beam_width,
        saved[1] if length_penalty is None else float(length_penalty),
    )
    if wanted == saved:
        # The model's own settings: its compiled predict function serves.
        outputs = model.predict(source_ids, batch_size=batch_size, verbose=0)
        return tuple(np.asarray(o) for o in outputs)
    model.beam_width, model.length_penalty = wanted
    try:
        model.make_predict_function(force=True)
        outputs = model.predict(source_ids, batch_size=batch_size, verbose=0)
    finally:
        model.beam_width, model.length_penalty = saved
        model.make_predict_function(force=True)
    return tuple(np.asarray(o) for o in outputs)


def translate_corpus(
    model,
    sources,
    beam_width=None,
    batch_size=64,
    decoding=None,
    length_penalty=None,
    truecaser=None,
):
    """Translates raw sentences; returns `(translations, tokens, alignments)`.

    `translations` are strings from `postprocess` (`[UNK]` replaced,
    recased with `truecaser` when given), `tokens[i]` the decoded target
    words of sentence `i` and `alignments[i]` its `(target_words,
    source_words)` weights. `decoding`, `beam_width` and `length_penalty`
    as in `decode_corpus`.
    """
    ids = model.vectorize_sources(sources)
    tokens, _, weights = decode_corpus(
        model, ids, beam_width, batch_size, decoding, length_penalty
    )
    translations, words_list, alignments = [], [], []
    for i, text in enumerate(sources):
        words = model.tokens_to_words(tokens[i])
        source_length = len(tokenize(text).split())
        weight = weights[i, : len(words), :source_length]
        translations.append(postprocess(words, text, weight, truecaser))
        words_list.append(words)
        alignments.append(weight)
    return translations, words_list, alignments


def corpus_bleu(hypotheses, references, lowercase=True) -> float:
    """Corpus BLEU with sacrebleu (13a tokenization, detokenized text).

    Args:
        hypotheses: Detokenized translations.
        references: Detokenized references, one per hypothesis.
        lowercase: Whether case is ignored. Defaults to `True`, the
            figure for a lower-casing model; `False` is the published,
            case-sensitive BLEU.
    """
    import sacrebleu

    # Rounded: sacrebleu's float sums give 100.00000000000004 for a perfect
    # match, which metrics.json would keep.
    return round(
        sacrebleu.corpus_bleu(
            list(hypotheses), [list(references)], lowercase=lowercase
        ).score,
        6,
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


def make_dataset(
    model, corpus, batch_size, shuffle=False, seed=0, bucket_by_length=False
):
    """`((source_ids, target_input_ids), target_output_ids)` batches.

    Each batch is cut to its own longest sentence, so short sentences do not
    pay for the longest of the corpus; with `bucket_by_length` each batch
    also holds pairs of about one length (the longer side of each pair),
    so little is padded at all. Sharded by data under a multi-worker
    strategy.
    """
    import tensorflow as tf

    sources = model.vectorize_sources(corpus.sources)
    targets = model.vectorize_targets(corpus.targets)
    dataset = tf.data.Dataset.from_tensor_slices((sources, targets))

    def trim(source, target):
        def length(ids):
            return tf.reduce_max(tf.reduce_sum(tf.cast(ids > 0, "int32"), 1))

        source = source[:, : length(source)]
        target = target[:, : length(target)]
        return (source, target[:, :-1]), target[:, 1:]

    def pair_length(source, target):
        lengths = [
            tf.reduce_sum(tf.cast(ids > 0, "int32")) for ids in (source, target)
        ]
        return tf.maximum(*lengths)

    return fitting.batched(
        dataset,
        batch_size,
        shuffle,
        seed,
        trim,
        length_fn=pair_length if bucket_by_length else None,
    )


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
    callbacks=None,
    label_smoothing=0.0,
    schedule="constant",
    max_minutes=None,
    architecture="rnn",
    warmup_steps=0,
    bucket_by_length=False,
    **model_kwargs,
):
    """Builds a translator on `train`'s vocabularies and fits it.

    Vocabularies are adapted on `train` only. The model is built in
    `strategy`'s scope; callbacks, backups and resuming as in
    `keras_attention.models.fitting` (the best weights in
    `output_dir/checkpoint.weights.h5`, the backup in `output_dir/backup`).

    Args:
        train: Training `ParallelCorpus`.
        validation: Validation `ParallelCorpus`.
        output_dir: Run directory.
        epochs: Most epochs. Defaults to `20`.
        batch_size: Defaults to `64`.
        learning_rate: Adam's learning rate. Defaults to `3e-3`.
        patience: Epochs without validation improvement before stopping.
            Defaults to `3`.
        strategy: From `keras_attention.models.distribute.get_strategy`
            (a `tf.distribute` strategy or a `keras.distribution`).
            Defaults to no distribution.
        seed: Seed of the initialisation and the shuffling. Defaults to `0`.
        verbose: `fit`'s verbosity. Defaults to `1`.
        max_source_tokens: Optional source vocabulary size.
        max_target_tokens: Optional target vocabulary size.
        callbacks: Optional extra Keras callbacks, run after the built-in
            ones.
        label_smoothing: `ε` of `SmoothedSequenceLoss`. Defaults to `0.0`
            (plain cross-entropy).
        schedule: Learning-rate schedule, `"constant"`, `"cosine"`
            (decayed over `epochs` epochs) or `"cosine_time"` (decayed over
            `max_minutes`); see `learning_rate_schedule`. Defaults to
            `"constant"`.
        max_minutes: Optional wall-time cap (`TimeLimit`): training stops
            after the batch that crosses it, and the result's
            `time_limit_stopped` says so. The model it leaves depends on
            the machine's speed; `epochs` alone does not.
        architecture: `"rnn"` (`keras_attention.seq2seq.Translator`, the
            default) or `"transformer"` (`TransformerTranslator`).
        warmup_steps: Steps of linear learning-rate warm-up. Defaults to
            `0` (none).
        bucket_by_length: Whether the training batches hold pairs of about
            one length (`make_dataset`). Defaults to `False`.
        **model_kwargs: Arguments of the model class: for `Translator`
            `embedding_dim`, `units`, `attention`, `dropout`, ...; for
            `TransformerTranslator` `model_dim`, `num_layers`,
            `num_heads`, `feed_forward_dim`, `num_key_value_heads`,
            `tie_embeddings`, `dropout`; for both `max_output_length`,
            `beam_width`, `length_penalty`.

    Returns:
        A `keras_attention.models.fitting.FitResult`.
    """
    if schedule == "cosine_time" and not max_minutes:
        raise ValueError(
            "schedule='cosine_time' decays over the time budget: give "
            f"`max_minutes`. Received: max_minutes={max_minutes!r}"
        )
    non_negative_length("warmup_steps", warmup_steps)
    keras.utils.set_random_seed(seed)
    model = _build_translator(
        architecture,
        train,
        (max_source_tokens, max_target_tokens),
        strategy,
        model_kwargs,
    )
    steps = -(-len(train) // batch_size) * epochs
    rate = learning_rate_schedule(learning_rate, schedule, steps, warmup_steps)
    if max_minutes:
        limit = TimeLimit(
            max_minutes,
            anneal=schedule == "cosine_time",
            warmup_steps=warmup_steps,
        )
        callbacks = [*(callbacks or []), limit]
    loss = (
        SmoothedSequenceLoss(label_smoothing)
        if label_smoothing
        else keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        )
    )
    result = fitting.fit(
        model,
        make_dataset(
            model,
            train,
            batch_size,
            shuffle=True,
            seed=seed,
            bucket_by_length=bucket_by_length,
        ),
        make_dataset(model, validation, batch_size),
        output_dir,
        compile_args=lambda: _compile_args(rate, loss),
        batch_size=batch_size,
        strategy=strategy,
        epochs=epochs,
        patience=patience,
        verbose=verbose,
        callbacks=callbacks,
    )
    if max_minutes:
        result.time_limit_stopped = limit.stopped
    if label_smoothing and getattr(result.model, "compiled", False):
        _compile_with_builtin_loss(result.model, learning_rate)
    return result


def _build_translator(architecture, train, max_tokens, strategy, kwargs):
    """The `architecture`'s model on `train`'s vocabularies, in the scope."""
    if architecture not in ARCHITECTURES:
        raise ValueError(
            "Received an invalid value for argument `architecture`, expected "
            f"one of {list(ARCHITECTURES)}. Received: "
            f"architecture={architecture!r}"
        )
    vocabularies = build_vocabularies(train.sources, train.targets, *max_tokens)
    if "max_output_length" not in kwargs:
        longest = max(len(tokenize(t).split()) for t in train.targets)
        kwargs["max_output_length"] = 2 * longest + 2
    with distribute.scope(strategy):
        return ARCHITECTURES[architecture](*vocabularies, **kwargs)


def _compile_args(rate, loss):
    """`compile`'s arguments of the translator's training."""
    return {
        "optimizer": keras.optimizers.Adam(rate, clipnorm=5.0),
        "loss": loss,
        # XLA is kept off on TensorFlow: it compiles the training step
        # since the memory is projected outside the decoder's loop, but
        # again for each batch shape (`make_dataset` cuts every batch to
        # its longest sentence), 7 times slower on Multi30k than the graph
        # (BENCHMARKS.md). On JAX, whose un-jitted steps run op by op,
        # "auto" compiles the step with jax.jit.
        "jit_compile": (
            False if keras.backend.backend() == "tensorflow" else "auto"
        ),
    }


def _compile_with_builtin_loss(model, learning_rate):
    """Compiles a trained model with plain cross-entropy before it is saved.

    The saved model names only built-in Keras classes, so that it loads
    after `import keras_attention` alone.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        ),
    )
    # Built, so that loading finds the variables it expects.
    model.optimizer.build(model.trainable_variables)


def evaluate_translator(
    model,
    corpus,
    beam_width=None,
    batch_size=64,
    decoding=None,
    length_penalty=None,
    truecaser=None,
):
    """BLEU (and alignment accuracy when `corpus` has gold alignments).

    Translations come from `translate_corpus` (the decoding choices of
    `decode_corpus`; recased with `truecaser` when given) and are scored
    against the raw references.

    Returns:
        A dict with `bleu` (case-sensitive, as published), `bleu_uncased`
        (case-insensitive), `examples`, and `alignment_accuracy` on data
        with alignments, plus the `translations`, `words` and
        `alignments` (decoded) lists for reports.
    """
    translations, words, alignments = translate_corpus(
        model,
        corpus.sources,
        beam_width=beam_width,
        batch_size=batch_size,
        decoding=decoding,
        length_penalty=length_penalty,
        truecaser=truecaser,
    )
    references = list(corpus.targets)
    result = {
        "bleu": corpus_bleu(translations, references, lowercase=False),
        "bleu_uncased": corpus_bleu(translations, references),
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
