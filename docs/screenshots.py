"""Screenshots of TensorBoard showing tensorweave runs, for docs/tools.md.

    tox -e screenshots                   # installs Debian's chromium if missing, then:
    python docs/screenshots.py           # writes docs/images/tensorboard_*.png

Trains the digits CNN for a few epochs with summaries (``examples/digits.py``'s ``logdir``)
and a small two-device MLP (its hidden layer on the OpenCL device when there is one, else on a
second CPU device), serves both runs with the real ``tensorboard`` on 127.0.0.1 and takes each
page with Playwright driving Debian's ``chromium`` headless (Playwright's own browser downloads
are not used). Nothing leaves the machine: Chromium runs with its background networking off
and only loads the local server. The graph page is clicked to "Color: Device", which a plain
``chromium --screenshot`` cannot do.

Needs ``pip install 'tensorweave[tensorboard]' playwright scikit-learn`` (the ``screenshots``
tox environment). Not run by the tests (it needs Chromium).
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

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import digits  # noqa: E402  (the example these pages show)

import tensorweave as tw  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--hide-scrollbars"]
VIEWPORT = {"width": 1400, "height": 900}


def two_device_run(logdir: str, steps: int = 200) -> str:
    """Train a 64-32-10 MLP on digits with its hidden layer on a second device and write the
    graph with each node's device (and a traced step) to ``logdir/devices``; returns the
    device the hidden layer ran on."""
    devices = [d.name for d in tw.list_devices()]
    second = next((d for d in devices if "OPENCL" in d), None)
    config = tw.ConfigProto(allow_soft_placement=True)
    if second is None:
        config = tw.ConfigProto(allow_soft_placement=True, device_count={"CPU": 2})
        second = "/device:CPU:1"
    x_train, _, y_train, _ = digits.load_data(0)
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(0)
        with tw.device("/device:CPU:0"):
            x = tw.placeholder(tw.float32, [None, 64], name="x")
            y = tw.placeholder(tw.int32, [None], name="y")
        with tw.device(second), tw.variable_scope("hidden"):
            w1 = tw.get_variable("w", [64, 32], initializer=tw.glorot_uniform_initializer())
            b1 = tw.get_variable("b", [32], initializer=tw.zeros_initializer())
            h = tw.nn.relu(tw.matmul(x, w1) + b1)
        with tw.device("/device:CPU:0"):
            with tw.variable_scope("logits"):
                w2 = tw.get_variable("w", [32, 10], initializer=tw.glorot_uniform_initializer())
                b2 = tw.get_variable("b", [10], initializer=tw.zeros_initializer())
                logits = tw.matmul(h, w2) + b2
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
            summary = tw.summary.scalar("loss", loss)
    writer = tw.summary.FileWriter(os.path.join(logdir, "devices"))
    rng = np.random.default_rng(0)
    with tw.Session(graph=g, config=config) as sess:
        sess.run(tw.variables_initializer(g.get_collection(tw.GraphKeys.GLOBAL_VARIABLES)))
        feeds = {x: x_train[:1], y: y_train[:1]}
        writer.add_graph(g, placement=sess.placement([train, loss, summary], feeds))
        for step in range(steps):
            idx = rng.integers(0, len(x_train), 64)
            md = tw.RunMetadata() if step == steps - 1 else None
            opts = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE) if md is not None else None
            _, s = sess.run([train, summary], {x: x_train[idx], y: y_train[idx]}, options=opts, run_metadata=md)
            writer.add_summary(s, step)
        writer.add_run_metadata(md, f"step{steps - 1}", steps - 1)
    writer.close()
    return second


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
                runs = r.read()
                if b"cnn" in runs and b"devices" in runs:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("tensorboard did not load the run")
        time.sleep(0.2)


def shoot(page, url: str, path: str, *, run: str | None = None, color_by_device: bool = False) -> None:
    page.goto(url)
    # TensorBoard renders asynchronously: wait for its network to go quiet, then for charts.
    page.wait_for_load_state("networkidle")
    if run is not None:  # the graph page's run menu (its URL does not select one)
        page.locator("paper-dropdown-menu").first.click()
        page.locator("paper-item", has_text=run).first.click()
        page.wait_for_load_state("networkidle")
    if color_by_device:
        page.locator("paper-radio-button", has_text="Device").first.click()
    page.wait_for_timeout(3000)
    page.screenshot(path=path)
    print(f"wrote {os.path.relpath(path)}")


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found: apt-get install chromium (tox -e screenshots installs it)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    out_dir = os.path.join(HERE, "images")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tw-screens-") as tmp:
        logdir = os.path.join(tmp, "logs")
        digits.train("cnn", epochs=8, logdir=logdir, quiet=True)
        second = two_device_run(logdir)
        print(f"two-device run: hidden layer on {second}")
        proc, url = serve(logdir, time.monotonic() + 60)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=VIEWPORT)
                shoot(page, f"{url}/#timeseries", os.path.join(out_dir, "tensorboard_scalars.png"))
                shoot(page, f"{url}/#histograms", os.path.join(out_dir, "tensorboard_histograms.png"))
                shoot(page, f"{url}/#graphs", os.path.join(out_dir, "tensorboard_graph.png"), run="cnn")
                shoot(page, f"{url}/#graphs", os.path.join(out_dir, "tensorboard_graph_devices.png"),
                      run="devices", color_by_device=True)
                browser.close()
        finally:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
