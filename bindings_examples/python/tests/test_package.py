"""The package as installed: `python -m kvblock --version`, import from any directory, choice of library
(bundled by default, $KVBLOCK_LIB / $KVBLOCK_USE_SYSTEM / load(path) when asked)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kvblock
from conftest import EXAMPLES

PKG_PARENT = str(Path(kvblock.__file__).resolve().parent.parent)


def run_python(code, env_extra=None, cwd="/"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVBLOCK_")}
    env["PYTHONPATH"] = PKG_PARENT  # the same kvblock as this test run, whether installed or in-tree
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *code], capture_output=True, text=True, env=env, cwd=cwd)


def test_version_command():
    r = run_python(["-m", "kvblock", "--version"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"kvblock {kvblock.__version__} (libkvblock {kvblock.library_version()} at ")


def test_import_runs_no_process():
    """Importing the package (installed, or a checkout with its build tree) reads a prebuilt cdef: it starts
    no compiler, nor any other process (the checkout once ran `cc -E` on the header at every import)."""
    code = ("import subprocess\n"
            "def refuse(*a, **k):\n"
            "    raise AssertionError(f'a process started at import: {a}')\n"
            "subprocess.Popen = refuse\n"
            "import kvblock, kvblock.engine\n"
            "print(kvblock._lib.CDEF_SOURCE)\n")
    r = run_python(["-c", code])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("kvblock_cdef.h"), r.stdout


def test_version_is_the_library_header_one():
    """One version: the package's is libkvblock's (abi/kvblock.h), which the bundled library reports too."""
    assert kvblock.__version__ == kvblock.library_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvblock.__version__)
    header = Path(__file__).resolve().parents[3] / "abi" / "kvblock.h"
    if header.exists():  # the tests of a checkout (the sdist's have csrc/abi/kvblock.h instead)
        text = header.read_text()
        parts = [re.search(rf"^#define KVB_VERSION_{p} (\d+)$", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
        assert all(parts) and ".".join(m.group(1) for m in parts if m) == kvblock.__version__


def test_py_typed_ships():
    assert (Path(kvblock.__file__).parent / "py.typed").exists()


def test_import_from_another_directory_without_env():
    r = run_python(["-c", "import kvblock; m = kvblock.Manager(4); "
                          "print(m.allocate(1, [1, 2]), kvblock.library_path())"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("0 ")


def test_library_chosen_by_env_and_argument(tmp_path):
    lib = kvblock.library_path()
    r = run_python(["-c", "import kvblock; print(kvblock.library_path())"], {"KVBLOCK_LIB": lib})
    assert r.stdout.strip() == lib
    r = run_python(["-c", "import kvblock"], {"KVBLOCK_LIB": str(tmp_path / "nope.so")})
    assert r.returncode != 0 and "cannot load" in r.stderr and "nope.so" in r.stderr
    r = run_python(["-c", "import kvblock"], {"KVBLOCK_USE_SYSTEM": "1", "LD_LIBRARY_PATH": str(tmp_path)})
    assert r.returncode == 0 or "cannot load" in r.stderr  # a system libkvblock may or may not be installed
    with pytest.raises(ImportError, match="cannot load"):
        kvblock.load(str(tmp_path / "missing.so"))
    kvblock.load(lib)
    assert kvblock.library_path() == lib
    with kvblock.Manager(4) as m:
        assert m.allocate(1, [1]) == 0


def test_library_newer_than_the_declarations_is_refused(tmp_path):
    """Declarations whose kvb_stats lacks the library's last field (as a package older than its system
    library would have): kvb_stats_init would write past every kvb_stats cffi allocates, so the import
    fails and names the struct; with the full declarations the same library loads."""
    lib = kvblock.library_path()
    full = kvblock._lib.DECLARATIONS
    last = "  uint64_t cached_host_blocks;\n"
    assert full.count(last) == 1, "the test removes kvb_stats' last field: update it with the header"
    (tmp_path / "old_cdef.h").write_text(full.replace(last, ""))
    r = run_python(["-c", "import kvblock"], {"KVBLOCK_LIB": lib, "KVBLOCK_CDEF": str(tmp_path / "old_cdef.h")})
    assert r.returncode != 0
    size = kvblock.ffi.sizeof("kvb_stats")
    assert f"has a kvb_stats of {size} bytes, the declarations in use" in r.stderr, r.stderr
    assert f"one of {size - 8}: the library is newer" in r.stderr
    (tmp_path / "cdef.h").write_text(full)
    r = run_python(["-c", "import kvblock; print(kvblock.Manager(4).stats()['cached_host_blocks'])"],
                   {"KVBLOCK_LIB": lib, "KVBLOCK_CDEF": str(tmp_path / "cdef.h")})
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr


def test_bench_runs_small():
    import bench  # examples/bench.py
    r = bench.run(n=8, length=40, bs=16, reps=5)
    assert set(r) == {"per_sequence_us", "batched_us", "batched_list_us", "batched_list_array_ids_us", "raw_cffi_us",
                      "append_commit_us", "token_list_ns"}
    assert all(med >= low > 0 for med, low in r.values())


def test_bench_prints_each_case_with_its_own_repetitions():
    """The per-sequence case runs a tenth of the repetitions: the output says so on its own line (issue 27.4)."""
    r = run_python([str(EXAMPLES / "bench.py"), "--seqs", "4", "--tokens", "40", "--reps", "30", "--cpu-time"])
    assert r.returncode == 0, r.stderr
    lines = {line.split(":")[0].strip(): line for line in r.stdout.splitlines() if "repetitions)" in line}
    assert lines["per-sequence calls"].endswith("(20 repetitions)"), r.stdout
    assert lines["batched, numpy tokens"].endswith("(30 repetitions)"), r.stdout
    assert lines["per-seq append+commit loop"].endswith("(30 repetitions)"), r.stdout
    assert lines["raw cffi floor, same calls"].endswith("(30 repetitions)"), r.stdout
    assert lines["replay, list tokens"].endswith("(10 repetitions)"), r.stdout
    assert len(lines) == 12 and "(30 repetitions;" not in r.stdout, r.stdout
    assert "thread CPU time" in r.stdout, r.stdout


def test_bench_per_sequence_loop_and_replay_rows():
    """The per-sequence loop and the replay each come with their raw cffi floor, measured in the same run; the
    replay does the trace's work (the README's cached-token count for the sample trace, traces/README.md)."""
    import bench  # examples/bench.py
    loop = bench.per_sequence_loop(n=4, length=40, bs=16, reps=6)
    assert set(loop) == {"per_seq_loop_us", "per_seq_loop_raw_us"}
    assert all(med >= low > 0 for med, low in loop.values())
    r = bench.replay(bench.builtin_requests(8), reps=3)
    num, total, cached, spent = r.pop("replay_set")
    assert num == 8 and total > cached > 0 and set(spent) == set(r)
    assert set(r) == {"replay_ns", "replay_raw_ns", "replay_convert_ns"}
    assert all(med >= low > 0 for med, low in r.values())
    sample = EXAMPLES.parent.parent.parent / "traces" / "sample_mooncake.jsonl"
    if sample.exists():  # a source checkout
        num, total, cached, _ = bench.replay(bench.trace_requests(str(sample)), reps=1)["replay_set"]
        assert (num, total, cached) == (300, 3_853_165, 187_920)  # as `kvblock replay` finds


def test_system_library_through_pkg_config(tmp_path):
    """KVBLOCK_USE_SYSTEM=1 loads libkvblock.so.0 from pkg-config's libdir (a stand-in pkg-config here)."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libkvblock.so.0").symlink_to(Path(kvblock.library_path()).resolve())
    fake = tmp_path / "bin" / "pkg-config"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n[ \"$2\" = kvblock ] && echo {libdir} && exit 0\nexit 1\n")
    fake.chmod(0o755)
    r = run_python(["-c", "import kvblock; print(kvblock.library_path())"],
                   {"KVBLOCK_USE_SYSTEM": "1", "PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(libdir / "libkvblock.so.0")


def test_cpu_isa_names_the_forced_path():
    # A fresh process per value: the path is chosen once per process, from KVB_CPU_ISA.
    for isa in ("baseline", "avx2"):
        out = subprocess.run([sys.executable, "-c", "import kvblock; print(kvblock.cpu_isa())"],
                             env={**os.environ, "KVB_CPU_ISA": isa}, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == isa, out
