"""TFDS loads that fail within seconds when the data cannot be downloaded.

Offline, `tensorflow_datasets.load` retries its downloads for minutes
with nothing printed. `load` reads prepared data first (`download=False`,
no network needed); only when the data is not there does it probe the
network, for `PROBE_SECONDS` at most, and then either lets TFDS download
or raises a one-line `ValueError` that says what to pass instead.
"""

import os
import socket

#: TFDS fetches prepared data from this host first (its GCS bucket).
PROBE_HOST = ("storage.googleapis.com", 443)
#: How long the network probe may wait for a connection.
PROBE_SECONDS = 3.0


def check_network(name: str, data_dir, instead: str) -> None:
    """A `ValueError` naming `instead` when the download host is unreachable.

    Args:
        name: The TFDS name, for the message.
        data_dir: The TFDS data directory that lacks it (`None`: TFDS's
            default).
        instead: What to pass instead, for the message.
    """
    try:
        with socket.create_connection(PROBE_HOST, timeout=PROBE_SECONDS):
            return
    except OSError as error:
        folder = os.fspath(data_dir) if data_dir else "TFDS's default"
        raise ValueError(
            f"{name!r} is not prepared in the TFDS data directory "
            f"({folder}) and cannot be downloaded: {PROBE_HOST[0]} is "
            f"unreachable ({error or type(error).__name__}). {instead}"
        ) from None


def load(name: str, instead: str, split, data_dir=None):
    """`tfds.load(name, split=split, data_dir=data_dir)`, failing fast offline.

    Args:
        name: The TFDS name with its config.
        instead: What the user can pass instead, for the error.
        split: The TFDS split.
        data_dir: The TFDS data directory. Defaults to TFDS's own.

    Returns:
        The `tf.data.Dataset` of the split.
    """
    import tensorflow_datasets as tfds

    try:
        return tfds.load(name, split=split, data_dir=data_dir, download=False)
    except AssertionError:
        # TFDS's "could not find data in ...": the data is not prepared.
        pass
    check_network(name, data_dir, instead)
    return tfds.load(name, split=split, data_dir=data_dir)
