#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The core is compiled as intended in the builds users get: every
compile command of a core/ source (libsattn, and the element's copy of
it) ends with -O3 as its effective optimisation level, and none of them
lets the compiler assume finite math.  A compile-flags check, not a
timing (core/meson.build says why -O3).

  check-core-flags.py --meson MESON SOURCE_DIR
      configures two scratch builds of SOURCE_DIR and checks both:
        debian   as dh_auto_configure does: --buildtype=plain with
                 CFLAGS from `dpkg-buildflags --get CFLAGS` (Debian's
                 -g -O2 ..., or the same literal flags when dpkg-dev is
                 not installed);
        default  a plain `meson setup` (debugoptimized, -O2).
  check-core-flags.py --build-dir DIR [--name NAME]
      checks an existing build directory (the Debian package build's,
      obj-<triplet>, from tests/package/package-check.sh).

Prints one line per build: the compile commands checked and the flags
they end with; exits 1 when one is not compiled at -O3 or has
-ffast-math / -ffinite-math-only, 77 when meson is missing."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

# Debian 12's dpkg-buildflags --get CFLAGS for a package (without the
# -ffile-prefix-map of its build directory), when dpkg-dev is absent.
DEBIAN_CFLAGS = ("-g -O2 -fstack-protector-strong -Wformat "
                 "-Werror=format-security")
BAD = ("-ffast-math", "-ffinite-math-only", "-Ofast")


def debian_cflags():
    try:
        out = subprocess.run(["dpkg-buildflags", "--get", "CFLAGS"],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip(), "dpkg-buildflags"
    except (OSError, subprocess.CalledProcessError):
        return DEBIAN_CFLAGS, "Debian 12's defaults"


def check(build_dir, name):
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        cmds = json.load(f)

    def in_core(c):
        f = os.path.normpath(os.path.join(c.get("directory", build_dir),
                                          c["file"]))
        return "/core/" in f and "/tests/" not in f

    core = [c for c in cmds if in_core(c)]
    if not core:
        print("%s: no compile command of a core/ source in %s"
              % (name, build_dir))
        return False
    bad, levels = [], {}
    for c in core:
        args = shlex.split(c["command"])
        opts = [a for a in args if a.startswith("-O")]
        level = opts[-1] if opts else "(none)"
        levels[level] = levels.get(level, 0) + 1
        if level != "-O3" or any(a in BAD for a in args):
            bad.append("%s: %s" % (c["file"], " ".join(
                a for a in args if a.startswith(("-O", "-ffast",
                                                 "-ffinite")))))
    print("%s: %d core compile commands, effective level %s%s"
          % (name, len(core), ", ".join("%s x%d" % kv
                                         for kv in sorted(levels.items())),
             "" if not bad else "; NOT AS INTENDED: " + "; ".join(bad[:4])))
    return not bad


def configure(meson, src, tmp, name, args, env):
    d = os.path.join(tmp, name)
    r = subprocess.run([meson, "setup", d, src] + args, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("%s: meson setup failed:\n%s%s" % (name, r.stdout, r.stderr))
        return None
    return d


def main(argv):
    if "--build-dir" in argv:
        d = argv[argv.index("--build-dir") + 1]
        name = argv[argv.index("--name") + 1] if "--name" in argv else d
        return 0 if check(d, name) else 1
    meson = argv[argv.index("--meson") + 1] if "--meson" in argv \
        else shutil.which("meson")
    if meson is None:
        print("meson not found: skipped")
        return 77
    src = argv[-1]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        cflags, where = debian_cflags()
        env = dict(os.environ, CFLAGS=cflags)
        print("debian: CFLAGS=%s (%s), --buildtype=plain" % (cflags, where))
        d = configure(meson, src, tmp, "debian",
                      ["--buildtype=plain", "-Dtests=disabled",
                       "-Dexamples=disabled"], env)
        ok = d is not None and check(d, "debian") and ok
        env = dict(os.environ)
        env.pop("CFLAGS", None)
        d = configure(meson, src, tmp, "default",
                      ["-Dtests=disabled", "-Dexamples=disabled"], env)
        ok = d is not None and check(d, "default") and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
