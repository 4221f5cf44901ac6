"""The loaded libkvblock: `ffi` (the declarations) and `lib` (the shared library), through cffi in ABI mode.

Which library: `load(path)` / `load(system=True)` when called, else $KVBLOCK_LIB=/path/to/libkvblock.so,
else $KVBLOCK_USE_SYSTEM=1 (pkg-config's libdir, else the loader path), else the copy bundled in the
installed package, else the repository's build tree (running from a source checkout).
Which declarations: $KVBLOCK_CDEF, else the cdef bundled with the package (generated at build time by
`cc -E -P -DKVB_CDEF abi/kvblock.h`), else the one of the build tree the library comes from
(BUILD/kvblock_cdef.h beside BUILD/lib/libkvblock.so), else the repository's build/kvblock_cdef.h (`make`
and `make cdef` write both). Nothing runs a compiler at import, in a checkout either.
"""
from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any, Optional, Tuple

import cffi

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent.parent.parent  # bindings_examples/python/kvblock -> repository (source checkout)
BUNDLED_LIBRARY = _HERE / "libkvblock.so"
BUNDLED_CDEF = _HERE / "kvblock_cdef.h"


def _system_library() -> str:
    """An installed libkvblock: pkg-config's libdir when it knows kvblock, else the loader path."""
    pc = shutil.which("pkg-config")
    if pc:
        r = subprocess.run([pc, "--variable=libdir", "kvblock"], capture_output=True, text=True)
        so = Path(r.stdout.strip()) / "libkvblock.so.0"
        if r.returncode == 0 and so.exists():
            return str(so)
    return ctypes.util.find_library("kvblock") or "libkvblock.so.0"


def _default_library() -> str:
    if os.environ.get("KVBLOCK_LIB"):
        return os.environ["KVBLOCK_LIB"]
    if os.environ.get("KVBLOCK_USE_SYSTEM", "") not in ("", "0"):
        return _system_library()
    if BUNDLED_LIBRARY.exists():
        return str(BUNDLED_LIBRARY)
    built = _REPO / "build" / "lib" / "libkvblock.so"
    if built.exists():
        return str(built)
    return _system_library()


def _cdef_source() -> Tuple[str, str]:
    """Returns (declarations, where they came from)."""
    env = os.environ.get("KVBLOCK_CDEF")
    if env:
        return Path(env).read_text(), env
    if BUNDLED_CDEF.exists():
        return BUNDLED_CDEF.read_text(), str(BUNDLED_CDEF)
    # A source checkout: the build tree's cdef, `make cdef`'s output (BUILD/lib/libkvblock.so -> BUILD/).
    candidates = [Path(_default_library()).parent.parent / "kvblock_cdef.h", _REPO / "build" / "kvblock_cdef.h"]
    for built in candidates:
        if built.exists():
            header = _REPO / "abi" / "kvblock.h"
            if header.exists() and header.stat().st_mtime > built.stat().st_mtime:
                warnings.warn(f"kvblock: {built} is older than {header}; run `make cdef` if the header changed",
                              stacklevel=2)
            return built.read_text(), str(built)
    raise ImportError("kvblock: no cffi declarations: none bundled (install the package with pip), no "
                      f"{' or '.join(map(str, candidates))} (run `make` or `make cdef` in the repository); "
                      "or set KVBLOCK_CDEF to the output of `cc -E -P -DKVB_CDEF abi/kvblock.h`")


DECLARATIONS, CDEF_SOURCE = _cdef_source()
ffi = cffi.FFI()
ffi.cdef(DECLARATIONS)
lib: Any = None
LIBRARY_PATH = ""


# Every versioned struct with its kvb_xxx_init (abi/ABI.md): (struct, init function).
_VERSIONED = re.findall(r"\bvoid (kvb_\w+_init)\((kvb_\w+)\s*\*\s*\w*\)", DECLARATIONS)


def _check_struct_sizes(loaded: Any, where: str) -> None:
    """Refuses a library whose versioned structs are larger than these declarations say: cffi binds the
    newest kvb_xxx_init (dlsym has no symbol versions to pick the one of our header), which would write
    the library's sizeof into a struct allocated at ours (abi/ABI.md, "Symbol versions"). A smaller one
    (an older library) is fine: it writes and reads only its own fields."""
    for init, struct in _VERSIONED:
        try:
            fn = getattr(loaded, init)
        except AttributeError:  # an older library without this struct
            continue
        ours = ffi.sizeof(struct)
        buf = ffi.new("char[]", ours + 4096)  # room for what a much newer library writes, to read its size
        fn(ffi.cast(struct + "*", buf))
        theirs = ffi.cast("uint32_t*", buf)[0]
        if theirs > ours:
            raise ImportError(f"kvblock: {where} has a {struct} of {theirs} bytes, the declarations in use "
                              f"({CDEF_SOURCE}) one of {ours}: the library is newer than them, and {init} would "
                              "write past every struct this package allocates; set KVBLOCK_CDEF to the "
                              "output of `cc -E -P -DKVB_CDEF kvblock.h` for that library's header")


def load(path: Optional[str] = None, *, system: bool = False) -> None:
    """(Re)binds `lib` to a libkvblock: `path`, the system one (`system=True`), or the default above.
    Call it before creating managers or caches: objects made earlier keep the library they were made with."""
    global lib, LIBRARY_PATH
    where = path if path else (_system_library() if system else _default_library())
    try:
        loaded = ffi.dlopen(where)
    except OSError as e:
        raise ImportError(f"kvblock: cannot load {where} ({e}); reinstall the package, set KVBLOCK_LIB, "
                          "or install libkvblock") from None
    _check_struct_sizes(loaded, where)
    lib, LIBRARY_PATH = loaded, where


load()
