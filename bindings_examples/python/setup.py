"""Builds libkvblock with the repository's Makefile and bundles it in the wheel, with the cffi declarations
generated from abi/kvblock.h (`cc -E -P -DKVB_CDEF`), so that the installed package needs no compiler.
The C sources come from the repository this folder sits in, or from csrc/ in an sdist (the sdist command
below copies them there), so that `pip install kvblock-X.tar.gz` builds anywhere with a C++17 compiler,
make and libxxhash. The package's version is the library's (kvblock/_version.py).

Environment:
  KVBLOCK_CUDA=1        build the CUDA kernels too (default: CUDA=0, a short CPU-only build)
  KVBLOCK_BUILD_DIR=DIR reuse a build tree (e.g. the repository's build/): make is incremental there
  KVBLOCK_SRC=DIR       the repository root, if this directory was copied away from it
  CC, MAKE, MAKEFLAGS   as usual (default -j2)
"""
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, List

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# What `make lib cdef` reads, copied into an sdist's csrc/ (paths relative to the repository root).
C_SOURCES = ["Makefile", "abi", "libkvblock", "kernels"]


def repo_root() -> Path:
    for cand in [os.environ.get("KVBLOCK_SRC"), HERE / "csrc", HERE.parent.parent]:
        if cand and (Path(cand) / "abi" / "kvblock.h").exists() and (Path(cand) / "Makefile").exists():
            return Path(cand).resolve()
    raise RuntimeError("kvblock: cannot find the libkvblock sources (abi/kvblock.h and the Makefile) in "
                       f"$KVBLOCK_SRC, {HERE / 'csrc'} (an sdist) or {HERE.parent.parent} (the repository)")


def header_version(root: Path) -> str:
    """The library's version, read by kvblock/_version.py's own reader (loaded as a file: importing the
    package would load cffi and the library)."""
    spec = importlib.util.spec_from_file_location("_kvblock_version", HERE / "kvblock" / "_version.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reader: Callable[[Path], str] = mod.version_from_header
    return reader(root / "abi" / "kvblock.h")


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        root = repo_root()
        build = Path(os.environ.get("KVBLOCK_BUILD_DIR") or Path(self.build_lib).resolve().parent / "libkvblock")
        cuda = os.environ.get("KVBLOCK_CUDA", "0")
        make = os.environ.get("MAKE", "make")
        jobs = [] if "-j" in os.environ.get("MAKEFLAGS", "") else ["-j2"]
        cmd = [make, "-C", str(root), *jobs, f"BUILD={build.resolve()}", "lib", "cdef"]
        if cuda in ("", "0"):
            cmd.append("CUDA=0")
        self.announce(" ".join(cmd), level=2)
        subprocess.run(cmd, check=True)
        pkg = Path(self.build_lib) / "kvblock"
        pkg.mkdir(parents=True, exist_ok=True)
        version = (build / "lib" / "libkvblock.so").resolve()  # the real file behind the soname links
        shutil.copyfile(version, pkg / "libkvblock.so")
        os.chmod(pkg / "libkvblock.so", 0o755)
        shutil.copyfile(build / "kvblock_cdef.h", pkg / "kvblock_cdef.h")
        # The installed package carries its version as a literal: it has no header to read.
        (pkg / "_version.py").write_text(f'"""libkvblock\'s version (abi/kvblock.h), written by setup.py."""\n'
                                         f'__version__ = "{header_version(root)}"\n')


class SdistWithCSources(sdist):
    """The sdist carries the library's sources in csrc/ (Makefile, abi/, libkvblock/, kernels/): a wheel
    built from it (pip install kvblock-X.tar.gz) compiles them, with no repository around."""

    def make_release_tree(self, base_dir: str, files: List[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = repo_root()
        dest = Path(base_dir) / "csrc"
        for name in C_SOURCES:
            src = root / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.d"))
            else:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self) -> bool:
        return True


setup(version=header_version(repo_root()), cmdclass={"build_py": BuildWithLibrary, "sdist": SdistWithCSources},
      distclass=BinaryDistribution)
