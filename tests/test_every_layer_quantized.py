"""Every layer survives `model.quantize("int8")` and a `.keras` round trip.

The whole every-layer model of `tests/test_every_layer.py`, in a module
of its own so that pytest-xdist can run it beside the training checks.
It runs in the TensorFlow lane only (`tensorflow_lane`): the layers
quantize the same way on every backend, and the other lanes check it on
the multi-head layers in `tests/layers/test_sublayers.py`.
"""

import warnings

import keras
import numpy as np
import pytest

from tests.layer_basics import quick_collections
from tests.test_every_layer import LAYERS
from tests.test_every_layer import _data
from tests.test_every_layer import _input_names
from tests.test_every_layer import _predict

pytestmark = [pytest.mark.tensorflow_lane, pytest.mark.heavy]


def test_every_layer_survives_int8_quantization_and_saving(tmp_path):
    """`model.quantize("int8")` then a `.keras` round trip, whole model.

    Layers without dense sublayers are left as they are (Keras warns that
    they have no `quantize`); the Dense layers in front of them, the
    multi-head projections and the decoders' dense layers are quantized.
    Soft attention moves by about the quantization error; a hard choice may
    flip, so only its finiteness is checked. The loaded model reproduces
    the quantized one exactly.
    """
    keras.config.set_dtype_policy("float32")
    data = _data()
    inputs = {k: keras.Input(v.shape[1:], name=k) for k, v in data.items()}
    names = sorted(LAYERS)
    branches = {name: LAYERS[name](inputs, data) for name in names}
    model = keras.Model(
        [inputs[k] for k in _input_names(branches)],
        [branches[n].output for n in names],
    )
    before = _predict(model, data, branches)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Layer .* does not have a `quantize`")
        with quick_collections():
            model.quantize("int8")
    after = _predict(model, data, branches)
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    # The single-query branch slices with a Lambda layer of this file.
    loaded = keras.saving.load_model(path, safe_mode=False)
    reloaded = _predict(loaded, data, branches)
    for name, b, a, r in zip(names, before, after, reloaded, strict=True):
        assert np.all(np.isfinite(a)), name
        if not name.startswith("hard_"):
            change = np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)
            assert change < 0.1, f"{name}: relative change {change:.3g}"
        np.testing.assert_allclose(r, a, atol=1e-5, err_msg=name)
