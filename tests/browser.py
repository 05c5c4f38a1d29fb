"""Pages as a person sees them: laid out by headless Chromium (Debian's
``chromium-headless-shell``, which ``.ci/run`` installs) at a given width.

``page_metrics`` loads a copy of the page with a probe script that, once the page has loaded,
writes the measures into the document's title; ``--dump-dom`` prints the document after that.
``screenshot`` takes the top of the page as a PNG. ``DevTools`` drives a page that a person
uses (the results site's filters): real clicks, the page's own script, screenshots.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

from unavailable import unavailable

PROBE = """<script>window.addEventListener('load', function () {
  var tables = Array.from(document.querySelectorAll('table'));
  var widest = Math.max(0, ...tables.map(function (t) { return t.getBoundingClientRect().right; }));
  var heads = Array.from(document.querySelectorAll('h2')).map(function (h) { return h.textContent; });
  var shown = Array.from(document.querySelectorAll('img')).filter(function (i) {
    return !i.closest('details:not([open])'); }).map(function (i) { return i.alt; });
  var folded = Array.from(document.querySelectorAll('details:not([open]) img')).length;
  document.title = 'PROBE' + JSON.stringify({height: document.documentElement.scrollHeight,
    viewport: window.innerWidth, widest_table_right: widest, h2: heads, shown_images: shown,
    folded_images: folded});
});</script>"""


def chromium() -> str:
    """The headless Chromium binary; the test is skipped without one, and fails under CI
    (``$CI``), which must provide it."""
    found = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if found:
        return found
    unavailable("no headless Chromium here (apt-get install chromium-headless-shell; .ci/run "
                "installs it)")


def _run(args: list[str]) -> str:
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def page_metrics(page: Path, scratch: Path, width: int = 1400) -> dict:
    """``{height, viewport, widest_table_right, h2: [titles], shown_images: [alts],
    folded_images}`` of ``page`` laid out ``width`` px wide (px)."""
    probed = scratch / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _run([f"--window-size={width},900", "--dump-dom", probed.as_uri()])
    found = re.search(r"<title>PROBE(.*?)</title>", dom, re.S)
    assert found, dom[:2000]
    return json.loads(html.unescape(found.group(1)))


def screenshot(page: Path, target: Path, width: int = 1400, height: int = 2600) -> Path:
    """The top ``height`` px of ``page``, ``width`` px wide, as a PNG at ``target``."""
    _run([f"--window-size={width},{height}", f"--screenshot={target}", page.as_uri()])
    assert target.stat().st_size > 0
    return target


class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: JSON messages ended by a NUL byte, read by the browser on
    fd 3 and written on fd 4): real clicks, the page's script run, screenshots; no driver to
    install, no port to open. Use as a context manager; one page.

    Args:
        width, height: the window, in px.
        profile: an empty folder for the browser's profile.
    """

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        import os

        to_browser, self._browser_in = os.pipe()
        self._browser_out, from_browser = os.pipe()

        def wire() -> None:                     # in the child: its fds 3 and 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self._process = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=wire, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self._session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self._session = self.call("Target.attachToTarget", targetId=page,
                                  flatten=True)["sessionId"]
        self.call("Page.enable")

    def __enter__(self) -> "DevTools":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _read(self) -> dict:
        import os

        while b"\0" not in self._buffer:
            chunk = os.read(self._browser_out, 1 << 16)
            assert chunk, "the browser closed its DevTools pipe"
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, **params) -> dict:
        """Send one command (to the page once attached) and return its result; events that
        arrive meanwhile are kept in ``events``."""
        import os

        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self._session and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._browser_in, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})
            self.events.append(reply)

    def open(self, url: str) -> None:
        """Load ``url`` and wait until its load event has fired (its scripts have run)."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        self._loaded()

    def _loaded(self) -> None:
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read())

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def click(self, selector: str, navigates: bool = False) -> None:
        """A real mouse click (press and release) at the centre of the first element that
        matches ``selector``, scrolled into view first; with ``navigates``, then wait until
        the page it opens has loaded."""
        box = self.evaluate(
            f"(function () {{ var e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); var r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        self.events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)
        if navigates:
            self._loaded()

    def screenshot(self, target: Path, full_page: bool = False) -> Path:
        """The window (or the whole page) as a PNG at ``target``."""
        import base64

        params = {"format": "png"}
        if full_page:
            width, height = self.evaluate("[document.documentElement.scrollWidth, "
                                          "document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        target.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return target

    def close(self) -> None:
        import os

        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._browser_in, self._browser_out):
            try:
                os.close(fd)
            except OSError:
                pass
