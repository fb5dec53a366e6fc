"""data/download.py: the network probe before a TFDS download (the loads
themselves, offline, are in tests/data/test_named.py)."""

import contextlib
import socket

import pytest

from keras_attention.data import download

pytestmark = pytest.mark.backend_independent


def test_an_unreachable_host_says_what_to_pass_instead(monkeypatch):
    calls = []

    def refuse(address, timeout):
        calls.append((address, timeout))
        raise OSError("no route")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ValueError) as error:
        download.check_network("sst2", "/data/tfds", "Pass --preset sst2.")
    message = str(error.value)
    assert "'sst2' is not prepared" in message
    assert "(/data/tfds)" in message and "no route" in message
    assert message.endswith("Pass --preset sst2.")
    assert calls == [(download.PROBE_HOST, download.PROBE_SECONDS)]
    with pytest.raises(ValueError, match="TFDS's default"):
        download.check_network("sst2", None, "")


def test_a_reachable_host_passes(monkeypatch):
    monkeypatch.setattr(
        socket, "create_connection", lambda *a, **k: contextlib.nullcontext()
    )
    assert download.check_network("sst2", None, "") is None
