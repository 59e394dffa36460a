"""The README and the guide: every relative link names a file that exists,
every #anchor a heading of its page (GitHub's slugs), and the README stays
short (issue 42: at most 250 lines, the rest in docs/guide/)."""

import glob
import os
import re
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LINK = re.compile(r"\]\(([^)\s]*)\)")


def slug(title):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    t = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return t.replace(" ", "-")


def headings(path):
    """Slugs of a Markdown file's headings, outside code fences."""
    out, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence:
                m = re.match(r"^#{1,6} (.*)", line)
                if m:
                    out.add(slug(m.group(1)))
    return out


def pages():
    return [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "ARCHITECTURE.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    )


class Docs(unittest.TestCase):
    def test_links_and_anchors_resolve(self):
        bad = []
        for page in pages():
            with open(page, encoding="utf-8") as f:
                text = f.read()
            for target in LINK.findall(text):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = os.path.relpath(page, ROOT)
                if not os.path.exists(resolved):
                    bad.append(f"{where}: {target}: no such file")
                elif anchor and resolved.endswith(".md") and anchor not in headings(resolved):
                    bad.append(f"{where}: {target}: no such heading")
        self.assertEqual(bad, [])

    def test_the_readme_is_short_and_starts_with_the_two_commands(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.assertLessEqual(len(lines), 250)
        block = lines[lines.index("```sh") + 1 :]
        self.assertTrue(block[0].startswith("cargo run --release -p orrery -- run"), block[0])
        tests = block[1].partition("#")[0].strip()
        self.assertEqual(tests, "cargo nextest run --workspace --release")
        # .ci/run calls the README's test command (with variables set, or not).
        with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
            ci = f.read()
        self.assertRegex(ci, r"(?m)^(\w+=\S+ )*" + re.escape(tests) + "$")

    def test_the_guide_links_every_page(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        for page in sorted(glob.glob(os.path.join(ROOT, "docs", "guide", "*.md"))):
            name = os.path.relpath(page, ROOT)
            self.assertIn(f"]({name})", readme, f"README does not link {name}")


if __name__ == "__main__":
    unittest.main()
