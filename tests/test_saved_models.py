"""Every committed `saved_models/*.keras` loads and reproduces its goldens.

Loading uses `safe_mode=True` and no `custom_objects`: importing
`keras_attention` must be enough. `NAME.golden.npz` holds the input `x` and
the outputs `y0`, `y1`, ... of `model.predict(x)` in `keras.tree.flatten`
order. String inputs are stored as fixed-width unicode (no pickle) and
given to the model as an object array.
"""

import glob
import os

import keras
import numpy as np
import pytest

import keras_attention  # noqa: F401

SAVED_MODELS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, "saved_models"
)
PATHS = sorted(glob.glob(os.path.join(SAVED_MODELS, "*.keras")))


def _golden(path):
    golden_path = path[: -len(".keras")] + ".golden.npz"
    assert os.path.exists(golden_path), f"{golden_path} is missing"
    with np.load(golden_path, allow_pickle=False) as golden:
        x = golden["x"]
        outputs = []
        while f"y{len(outputs)}" in golden:
            outputs.append(golden[f"y{len(outputs)}"])
    if x.dtype.kind in "US":
        x = x.astype(object)
    return x, outputs


def test_there_are_saved_models():
    assert PATHS, f"no .keras files in {SAVED_MODELS}"


@pytest.mark.parametrize("path", PATHS, ids=os.path.basename)
def test_saved_model_loads_safely_and_matches_golden(path):
    x, expected = _golden(path)
    model = keras.saving.load_model(path, safe_mode=True)
    got = keras.tree.flatten(model.predict(x, verbose=0))
    assert len(got) == len(expected), (
        f"{len(got)} outputs, golden file has {len(expected)}"
    )
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = keras.ops.convert_to_numpy(g)
        assert g.shape == e.shape, f"y{i}: shape {g.shape} vs {e.shape}"
        np.testing.assert_allclose(
            g, e, rtol=1e-5, atol=1e-5, err_msg=f"y{i} of {path}"
        )
