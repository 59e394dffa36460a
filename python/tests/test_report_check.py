"""The browser check of report.html, on pages made to pass and to fail."""

import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report_check  # noqa: E402

CHROMIUM = report_check.find_chromium()

FIGURE = (
    '<figure id="f"><svg width="400" height="200" xmlns="http://www.w3.org/2000/svg">'
    '<rect width="400" height="200" fill="#1f77b4"/></svg><figcaption>a figure</figcaption></figure>'
)


def page(body):
    return "<!doctype html><html><head><meta charset='utf-8'></head><body>%s</body></html>" % body


class ReportCheck(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="orrery-report-check-test-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w", encoding="utf-8") as f:
            f.write(text)

    def test_links_to_missing_files_are_named_and_anchors_and_other_sites_are_not(self):
        self.write("a.svg", "<svg/>")
        found = report_check.missing_files(
            self.dir, page('<a href="a.svg">a</a> <a href="b.png">b</a> <a href="#x">x</a> <a href="https://e.org/">e</a>')
        )
        self.assertEqual(found, ["missing file: b.png"])

    @unittest.skipUnless(CHROMIUM, "no Chromium on this machine (apt-get install chromium)")
    def test_a_good_page_passes_and_its_screenshot_is_written(self):
        self.write("report.html", page("<h1>t</h1>" + FIGURE))
        shot = os.path.join(self.dir, "shot.png")
        problems, facts = report_check.check(self.dir, CHROMIUM, screenshot=shot)
        self.assertEqual(problems, [])
        self.assertEqual(facts["figures"], 1)
        self.assertLess(facts["first_figure_top"], 200)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # The injected copy is gone; only what the test wrote is left.
        self.assertEqual(sorted(os.listdir(self.dir)), ["report.html", "shot.png"])

    @unittest.skipUnless(CHROMIUM, "no Chromium on this machine (apt-get install chromium)")
    def test_a_wide_table_a_broken_image_and_a_buried_figure_are_each_found(self):
        body = (
            '<div style="width:3000px">a table too wide</div>'
            '<img src="nothere.png" alt="x">'
            '<div style="height:5000px"></div>' + FIGURE
        )
        self.write("report.html", page(body))
        problems, _ = report_check.check(self.dir, CHROMIUM, width=1280, height=900)
        text = "\n".join(problems)
        self.assertIn("missing file: nothere.png", text)
        self.assertIn("image does not load: nothere.png", text)
        self.assertIn("the page is 3008 px wide in a 1280 px window", text)
        self.assertRegex(text, r"the first figure starts 5\d\d\d px down")
        self.assertEqual(len(problems), 4, text)

    def test_the_command_says_what_to_do_without_a_report(self):
        self.assertEqual(report_check.main([self.dir]), 2)


if __name__ == "__main__":
    unittest.main()
