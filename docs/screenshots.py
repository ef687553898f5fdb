"""Screenshots of TensorBoard showing a tensorweave run, for docs/tools.md.

    python docs/screenshots.py            # writes docs/images/tensorboard_*.png

Trains the digits CNN for a few epochs with summaries (``examples/digits.py``'s ``logdir``),
serves the run with the real ``tensorboard`` on 127.0.0.1 and takes each page with headless
Chromium (Debian's ``chromium`` package: ``apt-get install chromium``). Nothing leaves the
machine: Chromium runs with its background networking off and only loads the local server.

Needs ``pip install 'tensorweave[tensorboard]'``. Not run by the tests (it needs Chromium).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import digits  # noqa: E402  (the example this page shows)

PAGES = {  # file name -> TensorBoard route
    "tensorboard_scalars": "#timeseries",
    "tensorboard_histograms": "#histograms",
    "tensorboard_graph": "#graphs&run=cnn",
}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars", "--window-size=1400,900"]


def serve(logdir: str, deadline: float):
    """Start ``tensorboard --logdir`` on a free port; returns (process, base URL)."""
    exe = shutil.which("tensorboard") or os.path.join(os.path.dirname(sys.executable), "tensorboard")
    proc = subprocess.Popen([exe, "--logdir", logdir, "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []

    def read():
        for line in proc.stderr:
            m = re.search(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/", line)
            if m and not found:
                found.append(m.group(1))
    threading.Thread(target=read, daemon=True).start()
    while not found:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("tensorboard did not start")
        time.sleep(0.1)
    url = found[0]
    while True:   # the app answers once its first load of the logdir is done
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=2) as r:
                if b"cnn" in r.read():
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("tensorboard did not load the run")
        time.sleep(0.2)


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found: apt-get install chromium", file=sys.stderr)
        return 1
    out_dir = os.path.join(HERE, "images")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tw-screens-") as tmp:
        logdir = os.path.join(tmp, "logs")
        digits.train("cnn", epochs=8, logdir=logdir, quiet=True)
        proc, url = serve(logdir, time.monotonic() + 60)
        try:
            for name, route in PAGES.items():
                path = os.path.join(out_dir, f"{name}.png")
                subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={os.path.join(tmp, 'chromium')}",
                                "--virtual-time-budget=15000", f"--screenshot={path}", f"{url}/{route}"],
                               check=True, capture_output=True, timeout=120)
                print(f"wrote {os.path.relpath(path)}")
        finally:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
