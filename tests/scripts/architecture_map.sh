#!/bin/sh
# docs/ARCHITECTURE.md's tables name every tracked source file (C, C++, CUDA, Python, shell, Rust, Go)
# under abi/, libkvblock/, kernels/, tools/, tests/ and bindings_examples/: by its path, by its name in
# its folder's table, or by a backquoted glob or folder (`fuzz/*.h`, `python/tests/`) that holds it. A new
# file fails this check until the map says what it is. A second check: every backquoted path that looks
# like a file of the repository (`kernels/decode/decode.cu`, `libkvblock/manager.h`) exists.
# Skipped outside a git checkout (an sdist) or without python3.
if ! command -v python3 >/dev/null 2>&1 || ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP architecture_map: needs python3 and a git checkout"
  echo "0 passed, 0 failed"
  exit 0
fi
git ls-files abi libkvblock kernels tools tests bindings_examples | python3 -c '
import fnmatch, os, re, sys
doc = open("docs/ARCHITECTURE.md").read()
table = "\n".join(l for l in doc.splitlines() if l.startswith("|"))
names = set(re.findall(r"`([^`\s]+)`", table))
exts = (".c", ".h", ".cpp", ".cu", ".cuh", ".inc", ".py", ".sh", ".rs", ".go")
skip = ("tests/fuzz/corpus/", "tests/scripts/data/")
missing = []
for f in sys.stdin.read().split():
    if not f.endswith(exts) or f.startswith(skip):
        continue
    base = os.path.basename(f)
    def covers(t):
        if t == base or t == f or f.endswith("/" + t):
            return True
        if t.endswith("/"):
            return ("/" + t) in ("/" + os.path.dirname(f) + "/")
        return any(c in t for c in "*?[") and fnmatch.fnmatch(f, "*" + t)
    if not any(covers(t) for t in names):
        missing.append(f)
stale = [t for t in names
         if re.match(r"^(abi|libkvblock|kernels|tools|tests|bindings_examples|docs)/[\w./-]+\.\w+$", t)
         and not any(c in t for c in "*?[") and not os.path.exists(t.split(":")[0])]
for f in missing:
    print("FAIL architecture_map: %s is not in docs/ARCHITECTURE.md" % f)
for t in stale:
    print("FAIL architecture_map: docs/ARCHITECTURE.md names %s, which does not exist" % t)
ok = int(not missing) + int(not stale)
print("%d passed, %d failed" % (ok, 2 - ok))
sys.exit(0 if ok == 2 else 1)
'
