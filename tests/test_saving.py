"""`keras_attention.load_model`: broken `.keras` files get a clear error.

Every case starts from a real `.keras` file of a small numeric model built
from keras_attention layers (so it runs on every backend), then breaks it
the way files break: cut short, replaced by random bytes, a zip without
or with a broken `config.json`, a config naming a class that does not
exist or an invalid argument, missing or damaged weights. The error must be
a `ValueError` (`FileNotFoundError` for a missing path) whose message names
the file and the reason.
"""

import json
import os
import zipfile

import keras
import numpy as np
import pytest

import keras_attention


def _model():
    inputs = keras.Input((5, 4))
    x = keras_attention.SelfAttention(num_heads=2)(inputs)
    x = keras_attention.StructuredSelfAttention(
        units=3, num_hops=2, penalty_coefficient=0.0
    )(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x))


@pytest.fixture
def saved(tmp_path):
    """`(path, model, x)`: a saved model and an input to compare on."""
    model = _model()
    path = str(tmp_path / "model.keras")
    model.save(path)
    x = np.random.default_rng(0).random((3, 5, 4)).astype("float32")
    return path, model, x


def _members(path):
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def _rezip(path, members, name="broken.keras"):
    target = os.path.join(os.path.dirname(path), name)
    with zipfile.ZipFile(target, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return target


def _write(path, data, name="broken.keras"):
    target = os.path.join(os.path.dirname(path), name)
    with open(target, "wb") as f:
        f.write(data)
    return target


def _load_error(path, **kwargs):
    with pytest.raises(ValueError) as info:
        keras_attention.load_model(path, **kwargs)
    message = str(info.value)
    assert message.startswith(f"{path} is not a valid .keras file: "), message
    return info.value, message


def test_valid_file_loads_with_the_same_predictions(saved):
    path, model, x = saved
    loaded = keras_attention.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(model(x)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_path_like_is_accepted(saved, tmp_path):
    path, model, x = saved
    loaded = keras_attention.load_model(tmp_path / "model.keras")
    assert len(loaded.weights) == len(model.weights)


def test_missing_file_raises_file_not_found_naming_it(tmp_path):
    path = str(tmp_path / "nowhere" / "model.keras")
    with pytest.raises(FileNotFoundError, match="No such model file: "):
        keras_attention.load_model(path)
    with pytest.raises(FileNotFoundError) as info:
        keras_attention.load_model(path)
    assert path in str(info.value)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, "all but 1 byte"])
def test_truncated_file_is_reported_as_truncated(saved, keep):
    path, _, _ = saved
    with open(path, "rb") as f:
        data = f.read()
    size = len(data) - 1 if keep == "all but 1 byte" else int(len(data) * keep)
    broken = _write(path, data[:size])
    _, message = _load_error(broken)
    assert "probably truncated" in message
    assert f"({size} bytes)" in message


def test_random_bytes_are_not_a_zip_archive(saved):
    path, _, _ = saved
    data = np.random.default_rng(1).integers(0, 256, 2000, dtype=np.uint8)
    broken = _write(path, data.tobytes())
    _, message = _load_error(broken)
    assert "it is not a zip archive (2000 bytes" in message


def test_empty_file(saved):
    path, _, _ = saved
    _, message = _load_error(_write(path, b""))
    assert message.endswith("the file is empty (0 bytes)")


def test_directory(tmp_path):
    path = str(tmp_path / "folder.keras")
    os.mkdir(path)
    _, message = _load_error(path)
    assert message.endswith("it is a directory")


def test_zip_without_config(saved):
    path, _, _ = saved
    members = _members(path)
    del members["config.json"]
    _, message = _load_error(_rezip(path, members))
    assert "the archive has no config.json" in message
    assert "model.weights.h5" in message


@pytest.mark.parametrize(
    "text, reason",
    [
        (b'{"class_name": "Functional", ', "config.json is not valid JSON"),
        (b"\xff\xfe garbage", "config.json is not valid JSON"),
        (b"[1, 2, 3]", "config.json holds a list, not a serialized model"),
    ],
)
def test_broken_config_json(saved, text, reason):
    path, _, _ = saved
    members = _members(path)
    members["config.json"] = text
    error, message = _load_error(_rezip(path, members))
    assert reason in message


def _with_config(path, edit):
    members = _members(path)
    config = json.loads(members["config.json"])
    members["config.json"] = json.dumps(edit(config)).encode()
    return _rezip(path, members)


def _rename_class(config, old, new):
    text = json.dumps(config).replace(f">{old}", f">{new}")
    return json.loads(text)


def test_unknown_keras_attention_class_is_named(saved):
    path, _, _ = saved
    broken = _with_config(
        path,
        lambda c: _rename_class(c, "StructuredSelfAttention", "NoSuchLayer"),
    )
    error, message = _load_error(broken)
    assert "names the class 'keras_attention>NoSuchLayer'" in message
    assert "this version of keras_attention does not define it" in message
    # Keras's own error is kept as the cause.
    assert isinstance(error.__cause__, Exception)


def test_class_of_another_package_suggests_importing_it(saved):
    path, _, _ = saved
    broken = _with_config(
        path,
        lambda c: json.loads(
            json.dumps(c).replace(
                "keras_attention>StructuredSelfAttention", "my_package>Pool"
            )
        ),
    )
    _, message = _load_error(broken)
    assert "names the class 'my_package>Pool'" in message
    assert "import the module that registers it ('my_package')" in message


def test_custom_objects_are_passed_to_keras(saved):
    path, model, x = saved
    broken = _with_config(
        path,
        lambda c: json.loads(
            json.dumps(c).replace(
                "keras_attention>StructuredSelfAttention", "my_package>Pool"
            )
        ),
    )
    loaded = keras_attention.load_model(
        broken,
        custom_objects={
            "my_package>Pool": keras_attention.StructuredSelfAttention
        },
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(model(x)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_invalid_layer_argument_in_config_is_the_reason(saved):
    path, _, _ = saved

    def edit(config):
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "StructuredSelfAttention":
                layer["config"]["num_hops"] = 0
        return config

    _, message = _load_error(_with_config(path, edit))
    assert "Received an invalid value for argument `num_hops`" in message
    assert "Received: num_hops=0" in message


def test_missing_weights(saved):
    path, _, _ = saved
    members = _members(path)
    del members["model.weights.h5"]
    _, message = _load_error(_rezip(path, members))
    assert "model.weights.h5" in message


def test_weights_that_are_not_hdf5(saved):
    path, _, _ = saved
    members = _members(path)
    members["model.weights.h5"] = b"not an HDF5 file"
    error, message = _load_error(_rezip(path, members))
    assert error.__cause__ is not None
    assert "OSError" in message or "signature" in message


def test_damaged_member_fails_its_checksum(saved):
    """A flipped byte inside the stored weights breaks the zip's CRC."""
    path, _, _ = saved
    with open(path, "rb") as f:
        data = bytearray(f.read())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.weights.h5")
    # Past the member's local header (30 bytes + name + extra field).
    start = info.header_offset + 30 + len(info.filename) + 64
    data[start + info.compress_size // 2] ^= 0xFF
    _, message = _load_error(_write(path, bytes(data)))
    assert "CRC" in message or "corrupt" in message.lower(), message


def test_safe_mode_error_names_the_file(tmp_path):
    inputs = keras.Input((3,))
    outputs = keras.layers.Lambda(lambda t: t * 2.0)(inputs)
    path = str(tmp_path / "lambda.keras")
    keras.Model(inputs, outputs).save(path)
    _, message = _load_error(path)
    assert "safe_mode" in message
    loaded = keras_attention.load_model(path, safe_mode=False)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(np.ones((1, 3), "float32"))),
        2.0 * np.ones((1, 3)),
    )


def test_only_a_plain_text_model_with_our_layers_comes_back_a_text_model(
    saved, tmp_path
):
    # The older sentiment model comes back as a TextModel
    # (tests/test_saved_models.py); a numeric model stays as saved.
    path, _, _ = saved
    assert type(keras_attention.load_model(path)) is type(_model())
    vectorizer = keras.layers.TextVectorization(output_sequence_length=3)
    vectorizer.adapt(["a good film", "a bad film"])
    text = keras.Input((1,), dtype="string")
    ids = vectorizer(text)
    pooled = keras_attention.AttentionPooling()(
        keras.layers.Embedding(8, 4)(ids)
    )
    plain = keras.layers.GlobalAveragePooling1D()(
        keras.layers.Embedding(8, 4)(ids)
    )
    for name, outputs, compiled, becomes_text_model in (
        ("ours.keras", pooled, False, True),
        ("compiled.keras", pooled, True, False),
        ("keras_only.keras", plain, False, False),
    ):
        model = keras.Model(text, outputs)
        if compiled:
            model.compile(optimizer="adam", loss="mse")
        model.save(str(tmp_path / name))
        loaded = keras_attention.load_model(str(tmp_path / name))
        is_text = isinstance(loaded, keras_attention.text.TextModel)
        assert is_text == becomes_text_model, name
