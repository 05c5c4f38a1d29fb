"""summary.html as a person sees it: laid out by headless Chromium (Debian's
``chromium-headless-shell``, which ``.ci/run`` installs) at a given width.

``page_metrics`` loads a copy of the page with a probe script that, once the page has loaded,
writes the measures into the document's title; ``--dump-dom`` prints the document after that.
``screenshot`` takes the top of the page as a PNG.
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
