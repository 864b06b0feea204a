#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The core's folders depend one way, as core/meson.build states:

    base <- cpu <- nn <- model <- stream,   io -> model

A file of a folder may include the private headers of its own folder and
of the folders below it, the public headers (sattn/*.h) and system
headers; nothing else (no folder above it, no other branch: stream and io
do not see each other, nothing below them sees either).  cpu/ sees plain
arrays and descriptors: no file of base/ or cpu/ names SattnModel or
SattnNet.  There is no catch-all private header (internal.h).

  check-layering.py CORE_DIR

Prints every include of a core file with its verdict summarised per
folder, and each violation; exits 1 on any."""

import os
import re
import sys

ORDER = {"base": 0, "cpu": 1, "nn": 2, "model": 3, "stream": 4, "io": 4}
# what each folder may include besides itself
ALLOWED = {
    "base": set(),
    "cpu": {"base"},
    "nn": {"base", "cpu"},
    "model": {"base", "cpu", "nn"},
    "stream": {"base", "cpu", "nn", "model"},
    "io": {"base", "cpu", "nn", "model"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main(argv):
    core = argv[1]
    bad, counts = [], {}
    if os.path.exists(os.path.join(core, "internal.h")):
        bad.append("core/internal.h exists: each folder has a header of "
                   "its own")
    for folder in sorted(ALLOWED):
        d = os.path.join(core, folder)
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(d, name)
            text = open(path, encoding="utf-8").read()
            for inc in INCLUDE.findall(text):
                if inc.startswith("sattn/"):
                    continue                    # the public headers
                if "/" in inc:
                    target = inc.split("/")[0]
                else:
                    target = folder             # a file of its own folder
                    if not os.path.exists(os.path.join(d, inc)):
                        bad.append("%s/%s includes \"%s\", which is not in "
                                   "%s/" % (folder, name, inc, folder))
                        continue
                ok = target == folder or target in ALLOWED[folder]
                counts[(folder, target, ok)] = counts.get(
                    (folder, target, ok), 0) + 1
                if not ok:
                    bad.append("%s/%s includes \"%s\": %s may not depend on "
                               "%s" % (folder, name, inc, folder, target))
            if folder in ("base", "cpu"):
                code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
                for t in ("SattnModel", "SattnNet"):
                    if re.search(r"\b%s\b" % t, code):
                        bad.append("%s/%s names %s: %s/ sees plain arrays "
                                   "and descriptors" % (folder, name, t,
                                                        folder))
    for (folder, target, ok), n in sorted(counts.items()):
        print("%-6s -> %-6s %3d include(s)%s" % (folder, target, n,
                                                 "" if ok else "  VIOLATION"))
    for b in bad:
        print("FAIL: " + b)
    print("%d violation(s)" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
