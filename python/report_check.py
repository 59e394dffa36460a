#!/usr/bin/env python3
"""Checks an orrery report in a real browser (headless Chromium).

    python3 python/report_check.py OUT_DIR [--screenshot PNG] [--width 1280]

OUT_DIR holds `report.html` (from `orrery run FILE --out OUT_DIR`). The page is
rendered in headless Chromium with a check injected into a copy of it; the
check fails, naming what it found, when:

- an image does not load, or a link to a file beside the report is missing;
- the page is wider than the window (a table or figure pushes it sideways),
  or a figure runs past the right edge;
- an inline figure has no size;
- the first figure starts more than two screens down (the report must lead
  with its key figures, not its tables).

With --screenshot it also saves the top of the page as a PNG. Exits 0 when
the page passes, 1 when it does not, 2 when it cannot run (no Chromium, no
report). Standard library only.
"""

import argparse
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

# Where the check writes its findings for --dump-dom to carry out.
RESULT_ID = "orrery-report-check"

# Runs in the page once it has loaded; writes JSON into a <pre>.
CHECK_JS = """
<script>
window.addEventListener('load', function () {
  var problems = [];
  var width = document.documentElement.clientWidth;
  Array.prototype.forEach.call(document.images, function (img) {
    if (!img.complete || img.naturalWidth === 0) {
      problems.push('image does not load: ' + img.getAttribute('src'));
    }
  });
  if (document.documentElement.scrollWidth > width + 1) {
    problems.push('the page is ' + document.documentElement.scrollWidth +
                  ' px wide in a ' + width + ' px window');
  }
  var figures = document.querySelectorAll('figure');
  Array.prototype.forEach.call(figures, function (f) {
    var r = f.getBoundingClientRect();
    if (r.right > width + 1) {
      problems.push('figure ' + f.id + ' runs to ' + Math.round(r.right) + ' px, past the ' + width + ' px window');
    }
    var svg = f.querySelector('svg');
    if (svg) {
      var s = svg.getBoundingClientRect();
      if (s.width < 10 || s.height < 10) {
        problems.push('figure ' + f.id + ' is drawn ' + Math.round(s.width) + ' x ' + Math.round(s.height) + ' px');
      }
    }
  });
  var first = figures.length ? Math.round(figures[0].getBoundingClientRect().top + window.scrollY) : null;
  var out = document.createElement('pre');
  out.id = '%s';
  out.textContent = JSON.stringify({
    problems: problems,
    figures: figures.length,
    first_figure_top: first,
    page_height: document.documentElement.scrollHeight,
    window: [width, window.innerHeight]
  });
  document.body.appendChild(out);
});
</script>
""" % RESULT_ID


def find_chromium():
    """The Chromium binary: $CHROMIUM, else the first of the usual names on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_args(chromium, profile, width, height):
    """Headless flags that work as root on a machine without a network."""
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--user-data-dir=" + profile,
        "--window-size=%d,%d" % (width, height),
    ]


class Links(html.parser.HTMLParser):
    """Collects href and src attributes of a page."""

    def __init__(self):
        super().__init__()
        self.targets = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def missing_files(report_dir, page):
    """Links to files beside the report that are not there."""
    parser = Links()
    parser.feed(page)
    out = []
    for target in parser.targets:
        url = urllib.parse.urlparse(target)
        if url.scheme or url.netloc or not url.path:
            continue  # an anchor (#id), or another site
        if not os.path.exists(os.path.join(report_dir, urllib.parse.unquote(url.path))):
            out.append("missing file: " + target)
    return out


def check(report_dir, chromium, width=1280, height=900, screenshot=None, timeout=120):
    """Renders report_dir/report.html; returns (problems, facts)."""
    report = os.path.join(report_dir, "report.html")
    with open(report, encoding="utf-8") as f:
        page = f.read()
    problems = missing_files(report_dir, page)
    # The copy sits beside the report so that its relative links resolve.
    fd, probe = tempfile.mkstemp(prefix=".report-check-", suffix=".html", dir=report_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(page.replace("</body>", CHECK_JS + "</body>", 1) if "</body>" in page else page + CHECK_JS)
    profile = tempfile.mkdtemp(prefix="orrery-chromium-")
    try:
        args = chromium_args(chromium, profile, width, height)
        url = "file://" + os.path.abspath(probe)
        done = subprocess.run(
            args + ["--virtual-time-budget=10000", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        facts = None
        marker = '<pre id="%s">' % RESULT_ID
        at = done.stdout.find(marker)
        if at >= 0:
            body = done.stdout[at + len(marker):]
            facts = json.loads(html.unescape(body[: body.index("</pre>")]))
        if facts is None:
            tail = (done.stderr or "").strip().splitlines()[-5:]
            raise RuntimeError("Chromium did not run the check (exit %d): %s" % (done.returncode, " | ".join(tail)))
        problems += facts["problems"]
        top = facts.get("first_figure_top")
        if top is None:
            problems.append("the report has no figure")
        elif top > 2 * height:
            problems.append("the first figure starts %d px down, more than two %d px screens" % (top, height))
        if screenshot:
            shot = subprocess.run(
                chromium_args(chromium, profile, width, 2 * height)
                + ["--screenshot=" + os.path.abspath(screenshot), "file://" + os.path.abspath(report)],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if not os.path.exists(screenshot):
                problems.append("no screenshot was written: " + (shot.stderr or "").strip()[-300:])
        return problems, facts
    finally:
        os.unlink(probe)
        shutil.rmtree(profile, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check an orrery report.html in headless Chromium.")
    ap.add_argument("dir", help="the folder holding report.html (orrery run FILE --out DIR)")
    ap.add_argument("--screenshot", help="also save the top of the page as this PNG")
    ap.add_argument("--width", type=int, default=1280, help="window width, px (default 1280)")
    ap.add_argument("--height", type=int, default=900, help="window height, px (default 900)")
    a = ap.parse_args(argv)
    if not os.path.exists(os.path.join(a.dir, "report.html")):
        print("report_check: %s has no report.html (make one with `orrery run FILE --out %s`)" % (a.dir, a.dir))
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("report_check: no Chromium found (apt-get install chromium, or set $CHROMIUM)")
        return 2
    try:
        problems, facts = check(a.dir, chromium, a.width, a.height, a.screenshot)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        print("report_check: %s" % e)
        return 2
    page = os.path.join(a.dir, "report.html")
    if problems:
        print("%s: %d problem(s) in a %d px window:" % (page, len(problems), a.width))
        for p in problems:
            print("  " + p)
        return 1
    print(
        "%s: %d figures, the first %d px down a %d px page; nothing broken or too wide at %d px"
        % (page, facts["figures"], facts["first_figure_top"], facts["page_height"], a.width)
    )
    if a.screenshot:
        print("screenshot: " + a.screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
