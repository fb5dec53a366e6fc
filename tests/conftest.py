import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts with float32, a fixed seed and no leftover names."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


def pytest_collection_modifyitems(config, items):
    """Skips `tensorflow_only` tests, with the reason, on other backends."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return
    skip = pytest.mark.skip(
        reason=f"needs the TensorFlow backend; this lane runs {backend}"
    )
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)
