"""Opens a page from disk in headless Chromium (Debian's package).

No driver, nothing downloaded: Chromium's own command line renders the
page (`--dump-dom` prints the DOM after its scripts ran, `--screenshot`
saves a PNG) and, with `--enable-logging=stderr`, logs every console
message and uncaught error as a `CONSOLE` line.
"""

import dataclasses
import os
import shutil
import subprocess
import tempfile

import pytest

#: What to run where Chromium is missing (CI installs it in .ci/run).
INSTALL = "apt-get update && apt-get install -y chromium"
NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str:
    """Chromium's path; skips the test without it, fails under CI."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    reason = f"headless Chromium not found; install it with `{INSTALL}`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests must run)")
    pytest.skip(reason)


@dataclasses.dataclass
class Rendered:
    dom: str
    console: list
    png: bytes


def render(chromium: str, path, fragment: str = "", size=(1100, 800)):
    """The page's DOM after load, its console lines and a screenshot."""
    with tempfile.TemporaryDirectory() as scratch:
        shot = os.path.join(scratch, "page.png")
        url = "file://" + os.path.abspath(path) + fragment
        done = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
                f"--user-data-dir={os.path.join(scratch, 'profile')}",
                f"--window-size={size[0]},{size[1]}",
                f"--screenshot={shot}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        console = [
            line for line in done.stderr.splitlines() if ":CONSOLE" in line
        ]
        with open(shot, "rb") as f:
            png = f.read()
    return Rendered(done.stdout, console, png)
