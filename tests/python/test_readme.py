# SPDX-License-Identifier: LGPL-2.1-or-later
"""README.md's Python snippet (the first ```python block after the
"### Python" heading) runs as written from the source tree, with the
build tree's package and library, and prints one row per frame pushed
(rows + drained rows = frames).

Usage: test_readme.py README.md"""

import re
import subprocess
import sys
import os
import unittest

README = None


def snippet():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    head = text.find("\n### Python\n")
    if head < 0:
        raise AssertionError("README.md has no '### Python' section")
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, head)
    if not m:
        raise AssertionError("no ```python block after '### Python'")
    return m.group(1)


class TestReadme(unittest.TestCase):
    def test_snippet_runs(self):
        code = snippet()
        lines = [l for l in code.splitlines() if l.strip()]
        self.assertLessEqual(len(lines), 12, "the snippet should stay short")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                           text=True,
                           cwd=os.path.dirname(os.path.abspath(README)))
        print(code)
        print(r.stdout, r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        # "(rows, d) (tail rows, d) windows": every frame has its row
        nums = [int(v) for v in re.findall(r"\d+", r.stdout)]
        frames = re.search(r"standard_normal\(\((\d+),", code)
        self.assertIsNotNone(frames, "snippet makes no (n, d) frames")
        self.assertEqual(nums[0] + nums[2], int(frames.group(1)), r.stdout)


if __name__ == "__main__":
    README = sys.argv.pop(1)
    unittest.main(verbosity=2)
