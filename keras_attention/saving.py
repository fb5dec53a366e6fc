"""Loading `.keras` files with clear errors, and exporting for serving.

`load_model` is `keras.saving.load_model` with two differences. A file that
cannot be loaded raises a `ValueError` that names the file and says what is
wrong with it (not a zip archive, truncated, no `config.json`, a
`config.json` that is not JSON, a class that is not registered, an invalid
layer argument, unreadable weights), with Keras's own exception chained as
`__cause__`. A path that does not exist raises `FileNotFoundError`. Keras
itself reports a truncated file as "File not found" and an unknown class as
a `TypeError` that prints the whole model config. And a plain functional
model on raw text with a layer of this package (a sentiment classifier
saved before `keras_attention.text.TextModel` existed) comes back as a
`TextModel`, whose `predict` takes text as the newer files' does and
refuses what `text.check_words` refuses, where Keras's own `predict`
failed inside Keras.

`export_for_serving` writes a TensorFlow SavedModel for TF Serving: a
functional model through `model.export`, a
`keras_attention.seq2seq.Translator` through `keras.export.ExportArchive`
with a `serve` signature (source ids → greedy tokens, scores and
alignments) and a `translate` signature (raw strings → translations).
Exporting a `Translator` (its `translate` signature runs TensorFlow string
ops) or a model that takes strings needs the TensorFlow backend; a
numeric functional model exports on JAX too, through `model.export`.
"""

import json
import os
import zipfile

import keras

from keras_attention import text

_CONFIG = "config.json"
_ZIP_MAGIC = b"PK\x03\x04"
# Longest cause message quoted in a load error.
_MAX_REASON = 500


def _invalid_file(path, reason):
    return ValueError(f"{path} is not a valid .keras file: {reason}")


def _root_message(error):
    """The message of the innermost exception of `error`'s chain."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        cause = error.__cause__ or error.__context__
        if cause is None:
            break
        error = cause
    message = str(error).strip() or type(error).__name__
    if isinstance(error, KeyError) and error.args:
        message = str(error.args[0])
    if len(message) > _MAX_REASON:
        message = message[:_MAX_REASON] + " ..."
    return f"{type(error).__name__}: {message}"


def _registered_names(config):
    """Every `registered_name` of a serialized object in `config`."""
    if isinstance(config, dict):
        name = config.get("registered_name")
        if isinstance(name, str) and "class_name" in config:
            yield name
        for value in config.values():
            yield from _registered_names(value)
    elif isinstance(config, list):
        for value in config:
            yield from _registered_names(value)


def _unknown_class(config):
    """The first custom class in `config` that Keras cannot find, or None."""
    for name in _registered_names(config):
        if ">" not in name:
            continue
        if keras.saving.get_registered_object(name) is None:
            return name
    return None


def _check_archive(path):
    """Raises a clear error for a local file that is no `.keras` archive."""
    if os.path.isdir(path):
        raise _invalid_file(path, "it is a directory")
    size = os.path.getsize(path)
    if size == 0:
        raise _invalid_file(path, "the file is empty (0 bytes)")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(len(_ZIP_MAGIC))
        if head == _ZIP_MAGIC:
            raise _invalid_file(
                path,
                f"it starts as a zip archive but its end is missing; the "
                f"file is probably truncated ({size} bytes)",
            )
        raise _invalid_file(
            path,
            f"it is not a zip archive ({size} bytes starting with "
            f"{head!r}); a .keras file is a zip of config.json, "
            "metadata.json and model.weights.h5",
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if _CONFIG not in names:
                raise _invalid_file(
                    path, f"the archive has no {_CONFIG} (it holds {names})"
                )
            text = archive.read(_CONFIG)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise _invalid_file(
            path, f"the zip archive is corrupted ({_root_message(error)})"
        ) from error
    try:
        config = json.loads(text)
    except ValueError as error:
        raise _invalid_file(
            path, f"{_CONFIG} is not valid JSON ({error})"
        ) from error
    if not isinstance(config, dict):
        raise _invalid_file(
            path,
            f"{_CONFIG} holds a {type(config).__name__}, not a serialized "
            "model (a JSON object)",
        )
    return config


def load_model(filepath, **kwargs):
    """`keras.saving.load_model` with an error that names the file.

    Args:
        filepath: Path of a `.keras` file (a `str` or `os.PathLike`). Other
            formats that Keras reads (legacy `.h5`) are passed to Keras
            as they are.
        **kwargs: Passed to `keras.saving.load_model` (`custom_objects`,
            `compile`, `safe_mode`).

    Returns:
        The loaded model. An uncompiled functional model with one string
        input and a `keras_attention` layer, such as the older
        `saved_models/sentiment_synthetic.keras`, is returned as a
        `keras_attention.text.TextModel` over the same layers and
        weights: its `predict` takes a string, a list of strings or a
        NumPy string array and refuses a text without a word, no texts
        and `None` with a `ValueError`, as a `TextModel` saved as one does.

    Raises:
        FileNotFoundError: `filepath` does not exist.
        ValueError: The file is not a loadable `.keras` file; the message
            names the file and the reason, the original error is chained.

    Example:

    >>> try:
    ...     keras_attention.load_model("no/such/model.keras")
    ... except FileNotFoundError as error:
    ...     print(str(error).split(" (")[0])
    No such model file: no/such/model.keras
    """
    path = os.fspath(filepath)
    is_keras_file = str(path).endswith(".keras")
    is_local = "://" not in str(path)
    if is_local and not os.path.exists(path):
        raise FileNotFoundError(
            f"No such model file: {path} (working directory {os.getcwd()})"
        )
    config = None
    if is_keras_file and is_local:
        config = _check_archive(path)
    try:
        model = keras.saving.load_model(filepath, **kwargs)
    except MemoryError:
        raise
    except Exception as error:
        if not is_keras_file:
            raise
        unknown = _unknown_class(config) if config is not None else None
        custom_objects = kwargs.get("custom_objects") or {}
        if unknown is not None and not (
            {unknown, unknown.split(">")[-1]} & set(custom_objects)
        ):
            package = unknown.split(">")[0]
            hint = (
                "this version of keras_attention does not define it"
                if package == "keras_attention"
                else f"import the module that registers it ({package!r}) "
                "or pass it in `custom_objects`"
            )
            reason = f"{_CONFIG} names the class {unknown!r}; {hint}"
        else:
            reason = _root_message(error)
        raise _invalid_file(path, reason) from error
    return _as_text_model(model, config)


def _as_text_model(model, config):
    """A functional model on raw text with our layers, as a `TextModel`.

    Keras's `predict` of such a model wants an object array and fails
    inside Keras (an RNN over zero steps, an empty data adapter) on the
    inputs `TextModel.predict` refuses with a `ValueError`.
    """
    plain = config is not None and config.get("class_name") == "Functional"
    ours = any(
        name.startswith("keras_attention>")
        for name in _registered_names(config)
    )
    if not (plain and ours) or model.compiled or len(model.inputs) != 1:
        return model
    if keras.backend.standardize_dtype(model.inputs[0].dtype) != "string":
        return model
    return text.TextModel(model.input, model.output, name=model.name)


def _translator_archive(model, beam_width):
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(model)
    start_id = model.start_id
    end_id = model.end_id
    target_table = tf.constant(model.target_vocabulary)
    vectorizer = text.make_vectorizer(model.source_vocabulary)
    vectorizer.build((None,))
    archive.track(vectorizer)

    def decode(source_ids):
        result = model.decode(source_ids, beam_width=beam_width)
        return {
            "tokens": result.tokens,
            "scores": result.scores,
            "alignments": result.alignments,
        }

    def detokenize(tokens):
        tokens = tf.cast(tokens, "int32")
        ended = tf.cumsum(tf.cast(tokens == end_id, "int32"), axis=1) > 0
        keep = (tokens != 0) & (tokens != start_id) & ~ended
        words = tf.ragged.boolean_mask(tf.gather(target_table, tokens), keep)
        return text.tf_detokenize(
            tf.strings.reduce_join(words, axis=1, separator=" ")
        )

    def translate(texts):
        outputs = decode(vectorizer(text.tf_tokenize(texts)))
        outputs["translations"] = detokenize(outputs["tokens"])
        return outputs

    archive.add_endpoint(
        "serve",
        decode,
        input_signature=[tf.TensorSpec((None, None), "int32", "source_ids")],
    )
    archive.add_endpoint(
        "translate",
        translate,
        input_signature=[tf.TensorSpec((None,), tf.string, "texts")],
    )
    return archive


def export_for_serving(model, filepath, beam_width=1, verbose=False):
    """Writes `model` as a TensorFlow SavedModel for TF Serving.

    A `keras_attention.seq2seq.Translator` gets two signatures: `serve`
    (also `serving_default`), `source_ids (batch, time) int32` → `tokens`,
    `scores`, `alignments` as `model.decode` returns them, and
    `translate`, raw `texts (batch,) string` → the same plus
    `translations` (detokenized strings, what `model.translate` returns).
    Any other model is exported with `model.export(filepath)`: one
    `serve` signature with the model's inputs and outputs.

    Args:
        model: A built Keras model.
        filepath: Directory to write the SavedModel to.
        beam_width: Beam width of a translator's decoding. Defaults to `1`
            (greedy).
        verbose: Whether Keras prints the exported signatures. Defaults to
            `False`.

    Returns:
        `filepath`.

    Raises:
        ValueError: `model` is a `Translator` and the backend is not
            TensorFlow, or `beam_width` is not a positive integer.

    Example:

    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "dense", "1")
    >>> keras_attention.export_for_serving(model, path) == path
    True
    >>> os.path.exists(os.path.join(path, "saved_model.pb"))
    True
    """
    from keras_attention import _validation
    from keras_attention.seq2seq.translator import Translator

    beam_width = _validation.positive_int("beam_width", beam_width)
    filepath = os.fspath(filepath)
    if isinstance(model, Translator):
        if keras.backend.backend() != "tensorflow":
            # The `translate` signature runs TensorFlow string ops.
            raise ValueError(
                "Exporting a Translator needs the TensorFlow backend "
                "(KERAS_BACKEND=tensorflow). Received: "
                f"backend={keras.backend.backend()!r}"
            )
        _translator_archive(model, beam_width).write_out(
            filepath, verbose=verbose
        )
    else:
        model.export(filepath, format="tf_saved_model", verbose=verbose)
    return filepath
