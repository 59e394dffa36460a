#!/usr/bin/env python3
"""Checks `orrery serve`'s live dashboard in a real browser (headless Chromium).

    python3 python/dashboard_check.py URL --token-file DATA/user.token \\
        --submit JOB.json [--screenshot PNG] [--width 1280 --height 800]

Drives Chromium over the DevTools protocol (`--remote-debugging-pipe`) and
fails, naming what it found, when:

- the page does not ask for a token, or the API answers without one, or a
  wrong token is not refused on the page;
- after signing in, the page logs an error or throws (console, exceptions,
  failed loads);
- a job submitted (the JSON spec in JOB.json, POSTed by this script) while
  the page is open does not appear in its jobs table within 2 s;
- the first screen scrolls: the page is taller or wider than the window, or
  one of its panels (nodes, jobs, decisions, links, circles) lies outside it.

Prints a JSON summary (the measured appearance time among it). With
--screenshot it saves the first screen as a PNG. Exits 0 when the page
passes, 1 when it does not, 2 when it cannot run (no Chromium). Standard
library only.
"""

import argparse
import base64
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_check import chromium_args, find_chromium  # noqa: E402

# The longest a submitted job may take to appear on the open page (issue 42).
APPEAR_LIMIT_S = 2.0
PANELS = ["nodes", "jobs", "timeline", "links", "circles"]


class Browser:
    """Chromium with the DevTools protocol on a pipe (fds 3 and 4 in the child)."""

    def __init__(self, chromium, width, height):
        self.profile = tempfile.mkdtemp(prefix="orrery-dash-")
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        args = chromium_args(chromium, self.profile, width, height) + ["--remote-debugging-pipe", "about:blank"]
        # The shell puts the pipe's ends at the fds Chromium expects.
        cmd = 'exec "$@" 3<&%d 4>&%d' % (to_r, from_w)
        self.proc = subprocess.Popen(
            ["sh", "-c", cmd, "sh"] + args,
            pass_fds=(to_r, from_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self._next = 0
        self._answers = {}
        self._cond = threading.Condition()
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        with os.fdopen(self._from_r, "rb", buffering=0) as f:
            while True:
                chunk = f.read(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    msg = json.loads(raw)
                    if "id" in msg:
                        with self._cond:
                            self._answers[msg["id"]] = msg
                            self._cond.notify_all()
                    else:
                        self.events.put(msg)
        with self._cond:
            self._answers[None] = {"error": {"message": "Chromium closed the pipe"}}
            self._cond.notify_all()

    def send(self, method, params=None, session=None, timeout=30):
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._next not in self._answers and None not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no answer to " + method)
                self._cond.wait(left)
            answer = self._answers.pop(self._next, None) or self._answers[None]
        if "error" in answer:
            raise RuntimeError("%s: %s" % (method, answer["error"].get("message")))
        return answer.get("result", {})

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["rm", "-rf", self.profile], check=False)


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, browser, width, height):
        self.b = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.s = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(domain + ".enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.errors = []

    def send(self, method, params=None, timeout=30):
        return self.b.send(method, params, self.s, timeout)

    def drain(self):
        """Collects the errors among the events so far."""
        while True:
            try:
                ev = self.b.events.get_nowait()
            except queue.Empty:
                return
            if ev.get("sessionId") != self.s:
                continue
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                self.errors.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                self.errors.append("console.%s: %s" % (p["type"], args))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                e = p["entry"]
                self.errors.append("log (%s): %s %s" % (e.get("source"), e.get("text"), e.get("url", "")))

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % r["exceptionDetails"].get("text"))
        return r.get("result", {}).get("value")

    def wait_for(self, expr, limit_s, step_s=0.05):
        """Seconds until `expr` is truthy, or None after `limit_s`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if self.eval(expr):
                return time.monotonic() - t0
            time.sleep(step_s)
        return None


def sign_in(page, token):
    page.eval("document.getElementById('token').value = %s;"
              "document.getElementById('form').requestSubmit(); true" % json.dumps(token))


def submit(base, token, spec):
    req = urllib.request.Request(base.rstrip("/") + "/v1/jobs", data=json.dumps(spec).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def check(url, token, spec, chromium, width=1280, height=800, screenshot=None):
    problems, facts = [], {}
    browser = Browser(chromium, width, height)
    try:
        page = Page(browser, width, height)
        page.send("Page.navigate", {"url": url})
        if page.wait_for("document.readyState === 'complete' && !!document.getElementById('form')", 20) is None:
            return ["the page did not load from " + url], facts
        # Without a token: the page asks for one and the API refuses.
        if not page.eval("!document.getElementById('login').hidden && document.getElementById('main').hidden"):
            problems.append("the page shows the cluster before a token was given")
        status = page.eval("fetch('/v1/dashboard').then(r => r.status)")
        facts["status_without_token"] = status
        if status != 401:
            problems.append("GET /v1/dashboard without a token answered %s, not 401" % status)
        sign_in(page, "not-the-token")
        if page.wait_for("document.getElementById('err').textContent.includes('refused')", 5) is None:
            problems.append("a wrong token was not refused on the page")
        elif not page.eval("document.getElementById('main').hidden"):
            problems.append("the page shows the cluster after a wrong token")
        # The refusals above logged their 401s; only what follows counts.
        time.sleep(0.2)
        page.drain()
        page.errors.clear()
        sign_in(page, token)
        shown = page.wait_for("document.getElementById('live').className === 'on'", 10)
        if shown is None:
            problems.append("the page did not show a snapshot within 10 s of signing in")
            return problems, facts
        if page.eval("!!window.location.search"):
            problems.append("the URL has a query: " + page.eval("window.location.href"))
        facts["signed_in_s"] = round(shown, 3)
        # A job submitted while the page is open appears within 2 s.
        t0 = time.monotonic()
        submitted = submit(url, token, spec)
        selector = "tr[data-job=%s]" % json.dumps(spec["id"])
        seen = page.wait_for("!!document.querySelector(%s)" % json.dumps(selector), APPEAR_LIMIT_S + 3, 0.02)
        if seen is not None:
            seen = time.monotonic() - t0
        facts["submitted"] = submitted
        facts["appeared_s"] = None if seen is None else round(seen, 3)
        if seen is None or seen > APPEAR_LIMIT_S:
            problems.append("job %r appeared after %s s (limit %s s)" % (spec["id"], facts["appeared_s"], APPEAR_LIMIT_S))
        # Let a few more updates arrive, then check the first screen.
        time.sleep(1.5)
        layout = page.eval(
            "(() => { const d = document.documentElement; const out = {w: d.scrollWidth, h: d.scrollHeight,"
            " vw: innerWidth, vh: innerHeight, panels: {}};"
            " for (const id of %s) { const r = document.getElementById(id).closest('section').getBoundingClientRect();"
            " out.panels[id] = [Math.round(r.left), Math.round(r.top), Math.round(r.right), Math.round(r.bottom)]; }"
            " return out; })()" % json.dumps(PANELS))
        facts["layout"] = layout
        if layout["h"] > layout["vh"] + 1 or layout["w"] > layout["vw"] + 1:
            problems.append("the page is %d x %d px in a %d x %d window" % (layout["w"], layout["h"], layout["vw"], layout["vh"]))
        for name, (left, top, right, bottom) in layout["panels"].items():
            if left < 0 or top < 0 or right > layout["vw"] + 1 or bottom > layout["vh"] + 1:
                problems.append("panel %s lies at %s, outside the first screen" % (name, [left, top, right, bottom]))
        if screenshot:
            shot = page.send("Page.captureScreenshot", {"format": "png"})
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        page.drain()
        problems.extend(page.errors)
        facts["errors"] = page.errors
    finally:
        browser.close()
    return problems, facts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url", help="the service's base URL, e.g. http://127.0.0.1:8080/")
    ap.add_argument("--token-file", required=True, help="the user token (DATA/user.token)")
    ap.add_argument("--submit", required=True, help="a job spec (JSON) to submit while the page is open")
    ap.add_argument("--screenshot", help="save the first screen here (PNG)")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=800)
    a = ap.parse_args(argv)
    chromium = find_chromium()
    if not chromium:
        print("dashboard check skipped: no Chromium on PATH (install Debian's chromium, or set $CHROMIUM)")
        return 2
    with open(a.token_file) as f:
        token = f.read().strip()
    with open(a.submit) as f:
        spec = json.load(f)
    try:
        problems, facts = check(a.url, token, spec, chromium, a.width, a.height, a.screenshot)
    except (RuntimeError, TimeoutError, OSError, urllib.error.URLError) as e:
        problems, facts = ["the check could not drive the page: %s" % e], {}
    print(json.dumps({"ok": not problems, "problems": problems, **facts}, indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
