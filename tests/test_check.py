"""`python -m keras_attention.check`, the quick install check."""

import pytest

from keras_attention import check
from keras_attention import ops


@pytest.mark.heavy
def test_every_check_passes_on_this_install(capsys):
    assert check.main() == 0
    printed = capsys.readouterr().out
    assert printed.count("\nok   ") == len(check.CHECKS)
    assert "all checks passed" in printed


def test_a_broken_softmax_is_reported_and_fails(monkeypatch, capsys):
    real = ops.masked_softmax

    def ignores_the_mask(logits, mask=None, axis=-1):
        return real(logits, None, axis)

    monkeypatch.setattr(ops, "masked_softmax", ignores_the_mask)
    # The training check is left out: the test above runs it, and the
    # report does not depend on which check fails.
    fast = {name: c for name, c in check.CHECKS.items() if "NumPy" in name}
    monkeypatch.setattr(check, "CHECKS", fast)
    assert check.main() == 1
    printed = capsys.readouterr().out
    assert "FAIL masked_softmax agrees with NumPy" in printed
    assert "1 checks failed" in printed


def test_tensorflow_is_imported_quietly_first(monkeypatch, capsys):
    """Keras imports TensorFlow whenever it is installed (to seed it, to
    save a model), on every backend: on PyTorch the check printed its C++
    log lines. The check imports it first, quietly."""
    calls = []
    monkeypatch.setattr(check.cli, "import_tensorflow", lambda: calls.append(1))
    monkeypatch.setattr(check, "CHECKS", {})
    assert check.main() == 0
    assert calls == [1]
