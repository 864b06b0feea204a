#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What the built binaries export, from `nm -D --defined-only`.

  check-exports.py --nm NM --plugin libgstsattn.so
  check-exports.py --nm NM --library libsattn.so HEADER...

--plugin: the element exports exactly gst_plugin_sattn_register and
gst_plugin_sattn_get_desc (what GST_PLUGIN_DEFINE marks), nothing of the
core it links.
--library: libsattn.so exports exactly the functions (and variables) the
given public headers declare: nothing undocumented leaks out, and nothing
declared is missing.  Prints both sets' sizes and every difference; exits
1 on any difference.
"""
import argparse
import re
import subprocess
import sys

PLUGIN_SYMBOLS = {"gst_plugin_sattn_register", "gst_plugin_sattn_get_desc"}


def dynamic_symbols(nm, path):
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            names.add(fields[-1].split("@")[0])
    return names


def strip_c(text):
    """The header without comments, preprocessor lines and string bodies."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)          # continued lines
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # the C++ linkage block (its closing brace is dropped by clamping the
    # depth) and the export macros around the declarations
    text = re.sub(r'extern\s*""\s*\{', " ", text)
    return re.sub(r"\bSATTN_API_(BEGIN|END)\b", " ", text)


def declared_symbols(headers):
    """Names of the functions and extern variables declared at file scope
    (typedefs, struct/enum definitions and macros are not symbols)."""
    names = set()
    for h in headers:
        with open(h, encoding="utf-8") as f:
            text = strip_c(f.read())
        depth = 0
        stmt = []
        for ch in text:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(depth - 1, 0)
            if ch == ";" and depth == 0:
                s = " ".join("".join(stmt).split())
                stmt = []
                if not s or re.match(r"typedef\b", s):
                    continue
                if re.match(r"(struct|union|enum)\b[^(]*\{", s):
                    continue
                m = re.search(r"([A-Za-z_]\w*)\s*\(", s)
                if m:
                    names.add(m.group(1))
                elif re.match(r"extern\b", s):
                    m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*$", s)
                    if m:
                        names.add(m.group(1))
            else:
                stmt.append(ch)
    return names


def compare(what, exported, expected):
    extra = sorted(exported - expected)
    missing = sorted(expected - exported)
    print(f"{what}: {len(exported)} exported, {len(expected)} expected")
    for n in extra:
        print(f"  exported but not declared: {n}")
    for n in missing:
        print(f"  declared but not exported: {n}")
    return not extra and not missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--plugin")
    g.add_argument("--library")
    ap.add_argument("headers", nargs="*")
    a = ap.parse_args()
    if a.plugin:
        ok = compare(a.plugin, dynamic_symbols(a.nm, a.plugin), PLUGIN_SYMBOLS)
    else:
        if not a.headers:
            ap.error("--library needs the public headers")
        expected = declared_symbols(a.headers)
        if not expected:
            print("no declarations found in the headers: parser broken?")
            return 1
        ok = compare(a.library, dynamic_symbols(a.nm, a.library), expected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
