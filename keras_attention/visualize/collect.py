"""Every attention layer's weights from one forward pass of a model.

How the weights are reached, with public Keras API only: the model's
layers are called again, on new `keras.Input`s, by
`keras.models.clone_model(model, clone_function=lambda layer: layer,
call_function=...)`. The clone function returns each layer itself (no
copy: the weights are the model's), and the call function calls every
layer whose `call` takes `return_attention_scores` with
`return_attention_scores=True`, keeping the weights aside and passing the
output on as before. A probe `keras.Model` from the new inputs to those
weights then runs once, eagerly (`predict_on_batch` for text models). A
nested functional or Sequential model gets a probe of its own, called in
its place, whose outputs are the nested model's outputs followed by its
weights; a Sequential model's layers are called in order the same way.
A model's `attention_scores_layers()`, where it has one, names layers
called in the place of some of its own: a keras-hub backbone swapped by
`keras_attention.hub.swap_attention` names, for each decoder, a block
that calls the decoder and returns its attention weights too (this
module never imports `hub`, nor keras-hub).

Keras offers no other public way: a layer's `output` is its first output
only, and reading the nodes of the graph (`_inbound_nodes`) is private.
The layers are only called, as Keras's layer sharing does: the model's
config, weights and outputs stay what they were, nothing is retrained.

Example:

>>> x = keras.Input((5, 8))
>>> h = keras_attention.SelfAttention(num_heads=2, name="encoder")(x)
>>> model = keras.Model(x, keras.layers.GlobalAveragePooling1D()(h))
>>> maps = keras_attention.visualize.collect_attention(
...     model, np.ones((3, 5, 8), "float32")
... )
>>> {path: w.shape for path, w in maps.items()}
{'encoder': (3, 2, 5, 5)}
"""

import inspect

import keras
import numpy as np

from keras_attention import text as text_lib
from keras_attention.layers.structured import StructuredSelfAttention
from keras_attention.seq2seq.text_translator import TextTranslator

_SCORES = "return_attention_scores"


class AttentionMaps(dict):
    """`{layer path: weights (batch, heads, query_time, key_time)}`.

    A plain `dict` of float32 NumPy arrays, first layer first (in the order the
    layers are called), with the tokens when the model takes text.

    Attributes:
        tokens: One list of key-side tokens per example (the source words
            of a `Translator`), without padding; `None` when the model does
            not take text. The weights' key axis is the batch's padded
            length: `weights[..., :len(tokens[i])]` are the real ones.
        query_tokens: One list of query-side tokens per example where they
            differ from `tokens` (a `Translator`'s decoded words); `None`
            when the queries are the tokens themselves.

    Example:

    >>> maps = keras_attention.visualize.AttentionMaps(
    ...     {"layer": np.full((1, 1, 2, 2), 0.5)}, tokens=[["not", "bad"]]
    ... )
    >>> list(maps), maps.tokens
    (['layer'], [['not', 'bad']])
    """

    def __init__(self, weights, tokens=None, query_tokens=None):
        super().__init__(weights)
        self.tokens = tokens
        self.query_tokens = query_tokens


def collect_attention(model, inputs) -> AttentionMaps:
    """Every attention layer's weights from one forward pass of `model`.

    Works on a functional or `Sequential` Keras model (nested ones too),
    on a keras-hub `CausalLM` or `Backbone` swapped by
    `keras_attention.hub.swap_attention` (one entry per decoder on our
    attention, its padding mask honoured; Qwen3.5's Gated DeltaNet
    decoders have no weights), and on a
    `keras_attention.seq2seq.Translator` or `TransformerTranslator`, on
    every backend. An
    attention layer is one whose `call` takes `return_attention_scores`:
    this package's layers and Keras's `MultiHeadAttention`,
    `GroupQueryAttention`, `Attention` and `AdditiveAttention`. The model is
    not changed and not trained (see the module docstring for how).

    Each layer's weights come back as `(batch, heads, query_time,
    key_time)`: multi-head weights as they are; single-head ones `(batch,
    query_time, key_time)` get a heads axis of 1; one query vector's
    `(batch, key_time)` becomes `(batch, 1, 1, key_time)`;
    `StructuredSelfAttention`'s hops `(batch, hops, time)` are its heads,
    `(batch, hops, 1, time)`, each hop one query over the tokens. A
    `Translator` gives its decoder's alignments `(batch, 1,
    max_output_length, source_time)`, decoded as `model.decode` does; a
    `TransformerTranslator` gives them last, after each encoder block's
    self-attention per head `(batch, heads, source_time, source_time)`
    (`model.encoder_attention`), whose queries are the source tokens.

    Args:
        model: A functional or `Sequential` model, a swapped keras-hub
            `CausalLM` or `Backbone`, or a `Translator` or
            `TransformerTranslator`.
        inputs: What `model.predict_on_batch` takes: arrays, a dict of
            them, or text for a model with a string input (a
            `keras_attention.text.TextModel`) or a `Translator` (a string,
            a list of strings, or source ids `(batch, source_time)`). A
            keras-hub model takes its dict `{"token_ids",
            "padding_mask"}` or bare token ids `(batch, time)` (a padding
            mask of ones).

    Returns:
        An `AttentionMaps`: `{layer path: weights}`, the path being the
        layer's name, prefixed by the names of the models that nest it
        (`"inner_model/self_attention"`); a layer called more than once
        gets `"path:1"`, `"path:2"`, ... for its later calls. Its
        `tokens` (and `query_tokens`) hold the words for text models.

    Raises:
        ValueError: If `model` is a subclassed model (its layer graph
            cannot be read), a `Sequential` model that was never built, a
            keras-hub model still on keras-hub's attention, or has no
            attention layer; if a keras-hub model's `inputs` are neither
            its dict nor token ids `(batch, time)`.

    Example:

    >>> ids = keras.Input((4,), dtype="int32")
    >>> x = keras.layers.Embedding(10, 8)(ids)
    >>> x = keras_attention.SelfAttention(num_heads=2, name="first")(x)
    >>> model = keras.Model(ids, x)
    >>> maps = keras_attention.visualize.collect_attention(
    ...     model, np.array([[1, 2, 3, 4]])
    ... )

    >>> {path: weights.shape for path, weights in maps.items()}
    {'first': (1, 2, 4, 4)}
    """
    if isinstance(model, TextTranslator):
        return _translator_attention(model, inputs)
    inputs = _keras_hub_inputs(model, inputs)
    found = []
    probe_inputs = _new_inputs(model)
    _run_layers(model, probe_inputs, found, "")
    if not found:
        raise ValueError(
            "`model` has no attention layer (a layer whose `call` takes "
            "`return_attention_scores`). Received: model with layers "
            f"{[layer.name for layer in model.layers]}"
        )
    probe_class = keras.Model
    if any(_is_text(t) for t in keras.tree.flatten(probe_inputs)):
        probe_class = text_lib.TextModel
    probe = probe_class(probe_inputs, [weights for _, weights, _ in found])
    if probe_class is text_lib.TextModel:
        values = probe.predict_on_batch(inputs)
    else:
        # One eager call: `predict_on_batch` would compile the probe first
        # (XLA on JAX), which costs more than the pass itself.
        values = probe(inputs, training=False)
    if not isinstance(values, (list, tuple)):
        values = [values]
    values = [keras.ops.convert_to_numpy(v) for v in values]
    maps = {
        path: _as_heads(np.asarray(value, dtype="float32"), layer)
        for (path, _, layer), value in zip(found, values, strict=True)
    }
    tokens = None
    if probe_class is text_lib.TextModel:
        tokens = _text_tokens(model, inputs)
    return AttentionMaps(maps, tokens=tokens)


def _is_text(tensor) -> bool:
    return keras.backend.standardize_dtype(tensor.dtype) == "string"


def _new_inputs(model):
    """New `keras.Input`s in the structure of `model.input`."""
    try:
        if isinstance(model, keras.Sequential):
            # A Sequential model has one input; `input` is unset until the
            # model is called, `inputs` is set once it is built.
            structure = model.inputs[0]
        else:
            structure = model.input
    except (AttributeError, ValueError, TypeError, IndexError) as error:
        raise ValueError(
            "`collect_attention` reads the layer graph of a functional or "
            "Sequential model (or a Translator): give a model built on "
            "`keras.Input`. Received: model of type "
            f"{type(model).__name__} without defined inputs"
        ) from error
    # The inputs' names too: Keras warns when a dict's keys are not them.
    return keras.tree.map_structure(
        lambda t: keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name),
        structure,
    )


def _keras_hub_inputs(model, inputs):
    """`inputs` of a keras-hub `CausalLM` or `Backbone` as its dict (bare
    token ids get a padding mask of ones); refused if its attention is
    keras-hub's. Other models' inputs as they are."""
    keras_hub_classes = {
        cls.__name__
        for cls in type(model).__mro__
        if cls.__module__.startswith("keras_hub.")
    }
    if not keras_hub_classes & {"CausalLM", "Backbone"}:
        return inputs
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "attention_scores_layers"):
        raise ValueError(
            "`collect_attention` reads a keras-hub model's attention "
            "weights from this package's layers: call "
            "`keras_attention.hub.swap_attention(model)` first. Received: "
            f"a {type(model).__name__} on keras-hub's attention"
        )
    if isinstance(inputs, dict):
        return inputs
    ids = np.asarray(keras.ops.convert_to_numpy(inputs))
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise ValueError(
            "`inputs` of a keras-hub model are its dict `{'token_ids', "
            "'padding_mask'}` or integer token ids `(batch, time)`. "
            f"Received: inputs of shape {ids.shape} and dtype {ids.dtype}"
        )
    return {"token_ids": ids, "padding_mask": np.ones(ids.shape, "int32")}


def _run_layers(model, inputs, found, prefix):
    """`model`'s outputs on `inputs`, its attention weights in `found`.

    A model with `attention_scores_layers()` (a backbone swapped by
    `keras_attention.hub.swap_attention`) names layers called in the place
    of some of its own, with their arguments, to report the weights that
    its own layers keep inside (a keras-hub decoder's attention)."""
    counts = {}
    reporting = getattr(model, "attention_scores_layers", dict)()

    def call_function(layer, *args, **kwargs):
        layer = reporting.get(layer.name, layer)
        return _call_layer(layer, args, kwargs, found, prefix, counts)

    if isinstance(model, keras.Sequential):
        x = inputs
        for layer in model.layers:
            x = call_function(layer, x)
        return x
    clone = keras.models.clone_model(
        model,
        input_tensors=inputs,
        clone_function=lambda layer: layer,
        call_function=call_function,
    )
    return keras.tree.pack_sequence_as(model.output, clone.outputs)


def _call_layer(layer, args, kwargs, found, prefix, counts):
    """Calls `layer` as the model does, keeping its attention weights."""
    name = prefix + layer.name
    if isinstance(layer, (keras.Sequential, keras.Model)):
        return _call_nested(layer, args, kwargs, found, name + "/")
    if _SCORES not in inspect.signature(layer.call).parameters:
        return layer(*args, **kwargs)
    wanted = bool(kwargs.get(_SCORES, False))
    args, kwargs = keras.tree.map_structure(_dense, (args, kwargs))
    result = _WithScores(layer)(*args, **kwargs)
    count = counts.get(name, 0)
    counts[name] = count + 1
    path = name if count == 0 else f"{name}:{count}"
    found.append((path, result[1], layer))
    if wanted:
        return result
    if len(result) > 2:
        # (output, scores, cache): the caller asked for (output, cache).
        return (result[0], *result[2:])
    return result[0]


def _dense(value):
    """`value`, a symbolic tensor marked sparse as dense: `ops.multiply`
    marks a product with a constant sparse (Gemma's scaled embeddings), a
    mark the model's layer can ignore (keras-hub's decoder gives its own
    output spec) but the wrapper's traced call cannot (a sparse
    placeholder). The values are dense, as attention takes them."""
    if getattr(value, "sparse", False) and keras.backend.is_keras_tensor(value):
        return keras.ops.convert_to_tensor(value, sparse=False)
    return value


class _WithScores(keras.layers.Layer):
    """Calls `layer` with `return_attention_scores=True`.

    A graph node of its own: Keras reads how many outputs a layer has from
    its first call, so calling the model's layer itself with another
    number of outputs leaves the weights unconnected in a new model.
    `layer` is called, never bypassed, on the tensors (and their masks)
    that the model gives it.
    """

    def __init__(self, layer):
        super().__init__(
            # Keras's own unique name: a shared layer gets one per call.
            dtype=layer.dtype_policy,
            autocast=False,
        )
        self.layer = layer
        self.supports_masking = True
        self.built = True

    def call(self, *args, **kwargs):
        return self.layer(*args, **{**kwargs, _SCORES: True})


def _call_nested(model, args, kwargs, found, prefix):
    """A nested model's outputs, through a probe that also returns its
    weights (so they are tensors of the outer graph)."""
    inner_found = []
    inner_inputs = _new_inputs(model)
    outputs = _run_layers(model, inner_inputs, inner_found, prefix)
    flat = keras.tree.flatten(outputs)
    probe = keras.Model(
        inner_inputs, flat + [weights for _, weights, _ in inner_found]
    )
    # The inputs may come by keyword too (keras-hub's Gemma 3 CausalLM
    # calls `backbone(inputs=inputs)`).
    kwargs = {k: v for k, v in kwargs.items() if k in ("inputs", "training")}
    values = probe(*args, **kwargs)
    found.extend(
        (path, value, layer)
        for (path, _, layer), value in zip(
            inner_found, values[len(flat) :], strict=True
        )
    )
    return keras.tree.pack_sequence_as(outputs, values[: len(flat)])


def _as_heads(weights: np.ndarray, layer) -> np.ndarray:
    """Weights as `(batch, heads, query_time, key_time)`."""
    if weights.ndim == 2:
        return weights[:, None, None, :]
    if weights.ndim == 3 and isinstance(layer, StructuredSelfAttention):
        return weights[:, :, None, :]
    if weights.ndim == 3:
        return weights[:, None]
    return weights


def _vectorizers(model):
    for layer in model.layers:
        if isinstance(layer, keras.layers.TextVectorization):
            yield layer
        elif isinstance(layer, keras.Model):
            yield from _vectorizers(layer)


def _text_tokens(model, inputs):
    """The tokens of each text, from the model's `TextVectorization`."""
    vectorizer = next(_vectorizers(model), None)
    if vectorizer is None:
        return None
    texts = text_lib.as_text_list(inputs, "inputs")
    vocabulary = vectorizer.get_vocabulary()
    ids = keras.ops.convert_to_numpy(vectorizer(np.array(texts, dtype=object)))
    return [[vocabulary[i] for i in row if i != 0] for row in ids]


def _translator_attention(model, inputs) -> AttentionMaps:
    """A translator's encoder attention and decoder alignments."""
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "iu":
        ids = inputs
        vocabulary = model.source_vocabulary
        tokens = [[vocabulary[i] for i in row if i != 0] for row in ids]
    else:
        texts = text_lib.as_text_list(inputs, "inputs")
        ids = model.vectorize_sources(texts)
        tokens = [text_lib.tokenize(t).split() for t in texts]
    maps = {
        path: np.asarray(keras.ops.convert_to_numpy(w), dtype="float32")
        for path, w in model.encoder_attention(ids).items()
    }
    result = model.decode(ids)
    decoded = keras.ops.convert_to_numpy(result.tokens)
    weights = keras.ops.convert_to_numpy(result.alignments)
    decoder = getattr(model, "decoder", None)
    path = f"{model.name}/{getattr(decoder, 'name', 'decoder')}"
    maps[path] = weights[:, None].astype("float32")
    return AttentionMaps(
        maps,
        tokens=tokens,
        query_tokens=[model.tokens_to_words(row) for row in decoded],
    )
