"""keras_attention.visualize imports without its optional dependencies."""

import pytest

from tests import subprocesses

pytestmark = pytest.mark.backend_independent


@pytest.mark.heavy
def test_package_imports_without_matplotlib_networkx_or_tfds():
    # Keras itself imports matplotlib when it can, so "not in sys.modules"
    # proves nothing; blocking them makes any import of them by our
    # modules fail instead.
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "sys.modules['tensorflow_datasets'] = None\n"
        "sys.modules['networkx'] = None\n"
        "import keras_attention, keras_attention.data\n"
        "import keras_attention.visualize\n"
        "print('imported')"
    )
    result = subprocesses.run_python(["-c", code])
    assert result.stdout.strip().splitlines()[-1] == "imported"
