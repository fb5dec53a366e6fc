"""A small decoder-only language model of the package's layers: built,
trained and evaluated.

The model is a functional `keras.Model`: token embeddings, `num_layers`
causal `TransformerEncoderBlock`s (pre-norm; `SelfAttention` with rotary
positions, or `GroupedQueryAttention` with fewer key/value heads or a
window) or, in a hybrid (`layer_types`), Gated DeltaNet
`GatedDeltaBlock`s, a final `LayerNormalization` and the logits. Every layer is
registered, so a saved model loads with `keras.saving.load_model` after
`import keras_attention`. `keras_attention.models.Generator` generates
from it with the blocks' caches; its text is
`keras_attention.data.language`'s.
"""

import math

import keras
import numpy as np

from keras_attention import _validation
from keras_attention.data import language
from keras_attention.seq2seq.transformer import GatedDeltaBlock
from keras_attention.seq2seq.transformer import TransformerEncoderBlock

LAYER_TYPES = ("full", "linear")


def build_language_model(
    vocabulary_size,
    model_dim=128,
    num_layers=2,
    num_heads=4,
    num_key_value_heads=None,
    feed_forward_dim=512,
    dropout=0.1,
    sliding_window=None,
    global_every=6,
    layer_types=None,
    nope_layers=(),
):
    """The decoder-only model: ids `(batch, time)` → logits `(batch, time,
    vocabulary_size)`.

    Args:
        vocabulary_size: Ids are in `[0, vocabulary_size)`.
        model_dim: Width of the residual stream. Defaults to `128`.
        num_layers: Causal blocks. Defaults to `2`.
        num_heads: Attention heads (a divisor of `model_dim`). Defaults
            to `4`.
        num_key_value_heads: Key/value heads (grouped-query attention);
            `None` (the default) is one per head.
        feed_forward_dim: Hidden width of the feed-forward networks.
            Defaults to `512`.
        dropout: Dropout rate of the blocks. Defaults to `0.1`.
        sliding_window: With a window, every block but each
            `global_every`-th is local: position `i` sees `i -
            sliding_window < j <= i` (Gemma 3's alternation). Defaults
            to `None`, every block global.
        global_every: Every how many blocks one is global. Defaults to
            `6` (five local to one global).
        layer_types: A hybrid model's pattern, repeated over the blocks:
            a sequence of `"full"` (attention, a `TransformerEncoderBlock`)
            and `"linear"` (Gated DeltaNet, a `GatedDeltaBlock`), e.g.
            Qwen3.5's `("linear", "linear", "linear", "full")`. The
            window and `global_every` count the full blocks only.
            Defaults to `None`, every block full.
        nope_layers: The indices of the full blocks whose attention does
            not rotate (NoPE: positions from the causal mask alone), e.g.
            SmolLM3's every fourth, `range(3, num_layers, 4)`. Defaults
            to `()`, every full block rotates.

    Returns:
        A `keras.Model` named `decoder_lm` with layers `token_embedding`,
        `block_0`, ..., `final_norm` and `logits`.

    Example:

    >>> from keras_attention.models import language_model
    >>> model = language_model.build_language_model(
    ...     16, model_dim=8, num_layers=1, num_heads=2, feed_forward_dim=16
    ... )
    >>> tuple(model(np.array([[3, 4, 5]])).shape)
    (1, 3, 16)
    """
    vocabulary_size = _validation.positive_int(
        "vocabulary_size", vocabulary_size
    )
    num_layers = _validation.positive_int("num_layers", num_layers)
    global_every = _validation.positive_int("global_every", global_every)
    types = _layer_types(layer_types, num_layers)
    nope = _nope_layers(nope_layers, types)
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(
        vocabulary_size, model_dim, name="token_embedding"
    )(ids)
    full = 0
    for i in range(num_layers):
        if types[i] == "linear":
            x = GatedDeltaBlock(
                model_dim,
                num_heads,
                feed_forward_dim,
                num_key_value_heads=num_key_value_heads,
                dropout=dropout,
                name=f"block_{i}",
            )(x)
            continue
        full += 1
        local = sliding_window is not None and full % global_every
        x = TransformerEncoderBlock(
            model_dim,
            num_heads,
            feed_forward_dim,
            num_key_value_heads=num_key_value_heads,
            dropout=dropout,
            sliding_window=sliding_window if local else None,
            use_rotary_embedding=i not in nope,
            name=f"block_{i}",
        )(x, use_causal_mask=True)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    logits = keras.layers.Dense(vocabulary_size, name="logits")(x)
    return keras.Model(ids, logits, name="decoder_lm")


def _layer_types(layer_types, num_layers):
    """The type of each of `num_layers` blocks: the pattern repeated."""
    if layer_types is None:
        return ("full",) * num_layers
    pattern = (
        (layer_types,) if isinstance(layer_types, str) else tuple(layer_types)
    )
    if not pattern or any(t not in LAYER_TYPES for t in pattern):
        raise ValueError(
            "Expected `layer_types` to be a non-empty sequence of 'full' "
            f"and 'linear'. Received: layer_types={layer_types!r}"
        )
    return tuple(pattern[i % len(pattern)] for i in range(num_layers))


def _nope_layers(nope_layers, types):
    """`nope_layers` as a set, each the index of a full block."""
    try:
        indices = set(nope_layers)
    except TypeError:
        indices = None
    full = {i for i, kind in enumerate(types) if kind == "full"}
    if indices is None or not all(
        isinstance(i, int) and not isinstance(i, bool) and i in full
        for i in indices
    ):
        raise ValueError(
            "Expected `nope_layers` to be indices of full (attention) "
            f"blocks, in {sorted(full)}. Received: nope_layers="
            f"{nope_layers!r}"
        )
    return indices


def train_language_model(
    model,
    train,
    validation,
    epochs=3,
    batch_size=32,
    learning_rate=1e-3,
    verbose=0,
):
    """Fits `model` on `(inputs, targets)` windows (`language.windows`):
    the cross-entropy of the next id from the logits, Adam.

    Returns:
        The history, `{"loss": [...], "val_loss": [...]}`.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(
        *train,
        validation_data=validation,
        epochs=epochs,
        batch_size=batch_size,
        verbose=verbose,
    )
    return history.history


def perplexity(loss) -> float:
    """`exp(loss)` of a mean cross-entropy in nats."""
    return math.exp(min(float(loss), 700.0))


def synthetic_prompts(lines, vocabulary):
    """`{(prompt length, answer length): (prompts, answers)}` of synthetic
    lines: the ids up to and with the `=`, and the ids that must follow
    (the translation and `[end]`), grouped by length so that each group
    is one batch."""
    groups = {}
    for line in lines:
        ids = language.to_ids(line, vocabulary)
        cut = ids.index(vocabulary.index(language.SEPARATOR)) + 1
        answer = ids[cut:] + [language.END_ID]
        prompts, answers = groups.setdefault((cut, len(answer)), ([], []))
        prompts.append(ids[:cut])
        answers.append(answer)
    return {
        lengths: (np.asarray(prompts, "int32"), np.asarray(answers, "int32"))
        for lengths, (prompts, answers) in sorted(groups.items())
    }


def continuation_accuracy(generator, lines, vocabulary):
    """`(accuracy, generated)`: the share of synthetic lines whose greedy
    continuation of `SOURCE =` is their translation and `[end]`, word for
    word, and `[(prompt ids, generated ids)]` of each line, by prompt
    length (one compiled generation per length)."""
    correct, generated = 0, []
    groups = synthetic_prompts(lines, vocabulary)
    for prompts, answers in groups.values():
        length, new = prompts.shape[1], answers.shape[1]
        ids = generator.generate(prompts, new)
        correct += int(np.all(ids[:, length:] == answers, axis=1).sum())
        generated += [
            (p, i[length:]) for p, i in zip(prompts, ids, strict=True)
        ]
    return correct / max(1, len(generated)), generated
