#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The export tool from the source tree, without installing anything.

The tool is python/sattn/export.py, installed as the command
`sattn-export` (and the module sattn.export); this script runs the same
code under its old name:

    /usr/bin/python3 examples/export-torch-mha.py --help

Imported (importlib) it offers the module's functions (export_mha(),
export_attention(), save_safetensors(), main(), ...).  The module is
loaded by its path, so the source tree's sattn package (and libsattn)
need not be importable; the file check after a whole model or a layer
runs when they are.
"""

import importlib.util
import os
import sys

# The source tree's package (sattn.nn, sattn.whole: a whole model is
# recognised and verified with them) and, in a build tree's tests, its
# library, when none is installed.
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                    "python")
try:
    import sattn  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.normpath(_SRC))
    _b = os.environ.get("SATTN_BUILD_ROOT")
    if _b and "SATTN_LIBRARY" not in os.environ:
        os.environ["SATTN_LIBRARY"] = os.path.join(_b, "core",
                                                   "libsattn.so")

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     "python", "sattn", "export.py")
_spec = importlib.util.spec_from_file_location("sattn_export_source",
                                               os.path.normpath(_PATH))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
globals().update({k: v for k, v in vars(_module).items()
                  if not k.startswith("__")})


def main(argv=None):
    """The command line, named after this script in --help and messages."""
    return _module.main(argv, prog="export-torch-mha.py")


if __name__ == "__main__":
    sys.exit(main())
