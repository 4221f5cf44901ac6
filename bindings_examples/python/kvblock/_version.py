"""The package's version: libkvblock's, `KVB_VERSION_MAJOR/MINOR/PATCH` in abi/kvblock.h, the one place it is
written (the package bundles that library and is released with it). setup.py reads the header, of the
repository or of the sdist, and writes the number into the built copy of this file; a source checkout reads
the header here, at import (a file read, no compiler)."""
from __future__ import annotations

import re
from pathlib import Path

CHECKOUT_HEADER = Path(__file__).resolve().parent.parent.parent.parent / "abi" / "kvblock.h"


def version_from_header(header: Path) -> str:
    """"MAJOR.MINOR.PATCH" from the header's three #defines; an error names what is missing."""
    text = header.read_text()
    parts = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define KVB_VERSION_{name} (\d+)\s*$", text, re.M)
        if m is None:
            raise RuntimeError(f"kvblock: {header} has no '#define KVB_VERSION_{name} N' line")
        parts.append(m.group(1))
    return ".".join(parts)


# "0+unknown" only where neither setup.py nor a checkout gave the number (this file copied on its own).
__version__ = version_from_header(CHECKOUT_HEADER) if CHECKOUT_HEADER.exists() else "0+unknown"
