"""Builds libkvblock with the repository's Makefile and bundles it in the wheel, with the cffi declarations
generated from abi/kvblock.h (`cc -E -P -DKVB_CDEF`), so that the installed package needs no compiler.

Environment:
  KVBLOCK_CUDA=1        build the CUDA kernels too (default: CUDA=0, a short CPU-only build)
  KVBLOCK_BUILD_DIR=DIR reuse a build tree (e.g. the repository's build/): make is incremental there
  KVBLOCK_SRC=DIR       the repository root, if this directory was copied away from it
  CC, MAKE, MAKEFLAGS   as usual (default -j2)
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def repo_root() -> Path:
    for cand in [os.environ.get("KVBLOCK_SRC"), HERE.parent.parent]:
        if cand and (Path(cand) / "abi" / "kvblock.h").exists() and (Path(cand) / "Makefile").exists():
            return Path(cand).resolve()
    raise RuntimeError("kvblock: cannot find the libkvblock repository (abi/kvblock.h); set KVBLOCK_SRC")


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


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
