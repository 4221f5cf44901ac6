#!/bin/bash
# One GPU run of libkvblock, from the folder `make gpu-check` packed (carried to the GPU machine as is):
#
#   bash run.sh OUT_DIR [--quick]
#
# Steps, each with its own timeout and its log in OUT_DIR/<step>.log; a failing step is reported and the
# run goes on:
#   nvidia-smi        the card, driver and CUDA version
#   test_*            every CUDA test binary; a SKIP while a GPU is visible fails the step
#   memcheck_*        compute-sanitizer memcheck on the kernel tests  } KVB_TEST_QUICK=1, in parallel
#   racecheck_*       compute-sanitizer racecheck on prefill/attention} with the tests (not with --quick)
#   kvblock_bench     kvblock bench --only kernels --device cuda (D2D copy and cuBLAS GEMM ceilings)
#   python_bench      tools/gpu/bench_torch.py: libkvblock through the Python package vs torch SDPA,
#                     checked against an fp32 reference (needs torch with CUDA; says so otherwise)
#   test_hopper_*     the CUDA prefill and fp8 tests again with KVB_CUDA_PREFILL=hopper (the opt-in sm_90a kernel; fp8 falls back)
#   python_bench_hopper  the bench's prefill shapes again with KVB_CUDA_PREFILL=hopper
#   engine_bound      tools/gpu/engine_bound.py: the torch engine at Llama-3-8B's shape, 64 and 256
#                     sequences, CUDA graphs: decode step time against (weights + K/V) / copy rate
# At the end one table (step, result, seconds, then the bench rows) on stdout and in OUT_DIR/summary.md.
# --quick: no sanitizers, the bench's short shapes only (a faster re-run).
#
# The whole run keeps within KVB_RUN_BUDGET_S seconds (default 540: one device call may last 600): each
# step's timeout is cut to what is left, and a step with under 15 s left is not run (a test: FAIL, a
# bench: skip), so that the summary is always written.
# The environment is passed through: a variable set by the caller (a switch selecting an alternative
# prefill kernel, KVBLOCK_LIB for another library build, KVB_CUBLAS / KVB_CUDART for the tool's
# ceilings) reaches every test, sanitizer run and bench unchanged.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ]; then
  echo "usage: bash run.sh OUT_DIR [--quick]" >&2
  exit 2
fi
out=$1
quick=0
[ "${2:-}" = "--quick" ] && quick=1
mkdir -p "$out"
out=$(cd "$out" && pwd)
t_start=$(date +%s)
budget=${KVB_RUN_BUDGET_S:-540}

export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVBLOCK_LIB="${KVBLOCK_LIB:-$here/lib/libkvblock.so.0}"
export KVBLOCK_CDEF="${KVBLOCK_CDEF:-$here/lib/kvblock_cdef.h}"

# The CUDA toolkit's tools may be installed without being on PATH.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
# The CUDA runtime the tool loads for its ceilings: the machine's, else the packed one.
if [ -z "${KVB_CUDART:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.' &&
   ! ls /usr/local/cuda/lib64/libcudart.so.* >/dev/null 2>&1; then
  packed=$(ls "$here"/lib/cudart/libcudart.so.* 2>/dev/null | head -n 1)
  [ -n "$packed" ] && export KVB_CUDART="$packed"
fi
# cuBLAS for the tool's tensor-core ceiling: the loader's or the toolkit's, else torch's nvidia-cublas.
if [ -z "${KVB_CUBLAS:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.' &&
   ! ls /usr/local/cuda/lib64/libcublas.so.* >/dev/null 2>&1; then
  cublas=$(python3 -c 'import glob, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in sorted(glob.glob(d + "/nvidia/**/libcublas.so.*", recursive=True)):
        print(f); sys.exit()' 2>/dev/null)
  [ -n "$cublas" ] && export KVB_CUBLAS="$cublas"
fi

gpu=0
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then gpu=1; fi

results=()  # "step|result|seconds|note"
record() { results+=("$1|$2|$3|$4"); printf '%-28s %-6s %5ss  %s\n' "$1" "$2" "$3" "$4"; }

# run_step NAME TIMEOUT CMD...: runs CMD with its output in OUT/NAME.log; prints and records the result.
run_step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc note="" left=$(( budget - ($(date +%s) - t_start) ))
  if [ $left -lt 15 ]; then  # a test not run is a failure of the run; a bench not run is a skip
    record "$name" "$(case $name in test_*) echo FAIL ;; *) echo skip ;; esac)" 0 \
      "not run: out of the run's time (KVB_RUN_BUDGET_S=$budget)"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  finish_step "$name" "$rc" "$(( $(date +%s) - t0 ))"
}

# finish_step NAME RC SECONDS: the verdict of a step from its exit status and log.
finish_step() {
  local name=$1 rc=$2 secs=$3 log="$out/$1.log" result=pass note=""
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    result=FAIL note="timed out"
  elif [ "$rc" != 0 ]; then
    note=$(grep -E '^FAIL|ERROR SUMMARY|RACECHECK SUMMARY|kvblock:|Error|error' "$log" | head -n 1)
    [ -z "$note" ] && note=$(tail -n 1 "$log")
    result=FAIL note="exit $rc: $(echo "$note" | cut -c1-90)"
  fi
  case $name in
    test_*)
      if grep -q '^SKIP' "$log"; then
        if [ $gpu = 1 ]; then result=FAIL note="skipped with a GPU present: $(grep -m1 '^SKIP' "$log" | cut -c1-70)"
        elif [ $result = pass ]; then result=skip note="no GPU: $(grep -c '^SKIP' "$log") skipped"; fi
      fi
      # The opt-in sm_90a prefill kernel's reruns: on a GPU the library must have noted that it ran.
      case $name in
        test_hopper_cpp_kernels_prefill)
          if [ $gpu = 1 ] && [ $result = pass ] && ! grep -q 'KVB_CUDA_PREFILL=hopper: the sm_90a kernel runs' "$log"; then
            result=FAIL note="the sm_90a kernel did not run: $(grep -m1 'KVB_CUDA_PREFILL' "$log" | cut -c1-80)"
          fi ;;
      esac
      [ -z "$note" ] && note=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1) ;;
    memcheck_*) [ $result = pass ] && note=$(grep -m1 'ERROR SUMMARY' "$log" | sed 's/^=* *//') ;;
    racecheck_*) [ $result = pass ] && note=$(grep -m1 'RACECHECK SUMMARY' "$log" | sed 's/^=* *//') ;;
  esac
  record "$name" "$result" "$secs" "$note"
}

echo "libkvblock GPU run -> $out ($(cat "$here/BUILD_INFO.txt" 2>/dev/null | head -n 1))"
run_step nvidia-smi 30 nvidia-smi
[ -f "$out/nvidia-smi.log" ] && head -n 20 "$out/nvidia-smi.log"

# Sanitizers in the background, beside the plain tests (they are CPU-bound; the GPU is not timed here).
san_pids=()
san_names=()
san_start=$(date +%s)
if [ $quick = 0 ]; then
  if [ $gpu = 1 ] && [ -n "$sanitizer" ]; then
    for spec in memcheck:cpp_kernels_ops memcheck:cpp_kernels_prefill memcheck:cpp_kernels_attention \
                memcheck:cpp_kernels_bad_input memcheck:cpp_kernels_fp8_cuda racecheck:cpp_kernels_prefill \
                racecheck:cpp_kernels_attention memcheck:cpp_kernels_cascade_cuda racecheck:cpp_kernels_cascade_cuda \
                memcheck:cpp_kernels_cascade_prefill_cuda racecheck:cpp_kernels_cascade_prefill_cuda \
                racecheck:cpp_kernels_fp8_cuda; do
      tool=${spec%%:*} t=${spec#*:}
      name="${tool}_${t#cpp_}"
      ( KVB_TEST_QUICK=1 timeout 150 "$sanitizer" --tool "$tool" --error-exitcode 1 "$here/tests/$t" \
          >"$out/$name.log" 2>&1; echo $? >"$out/$name.rc" ) &
      san_pids+=($!)
      san_names+=("$name")
    done
  else
    record sanitizers skip 0 "$([ $gpu = 1 ] && echo 'compute-sanitizer not found' || echo 'no GPU')"
  fi
fi

for t in "$here"/tests/*; do
  run_step "test_$(basename "$t")" 120 "$t"
done
# The opt-in sm_90a prefill kernel (KVB_CUDA_PREFILL=hopper): the CUDA prefill test again (its head dim
# 128 fp16 / bf16 cases, long ones and faults included, run the kernel); on a GPU the step fails unless
# the library noted that the kernel ran (on other than sm_90 it notes the portable one). The fp8 CUDA
# test again too: the sm_90a kernel leaves fp8 caches to the portable one, which must then run (no error).
for t in cpp_kernels_prefill cpp_kernels_fp8_cuda; do
  [ -x "$here/tests/$t" ] && run_step "test_hopper_$t" 120 env KVB_CUDA_PREFILL=hopper "$here/tests/$t"
done

for i in "${!san_pids[@]}"; do
  wait "${san_pids[$i]}"
  finish_step "${san_names[$i]}" "$(cat "$out/${san_names[$i]}.rc" 2>/dev/null || echo 1)" "$(( $(date +%s) - san_start ))"
done

bench_args=(bench --only kernels --device cuda)
[ $quick = 1 ] && bench_args+=(--quick)
run_step kvblock_bench 150 "$here/bin/kvblock" "${bench_args[@]}"

# skipped_by_script NAME MARKER: when step NAME (the last recorded) logged "MARKER: why" (its script found
# nothing to measure: no torch, no CUDA device), it is recorded as skipped for that reason; else status 1.
skipped_by_script() {
  local line
  line=$(grep -m1 "^$2: " "$out/$1.log" 2>/dev/null) || return 1
  results[-1]="$1|skip|$(echo "${results[-1]}" | cut -d'|' -f3)|$(echo "${line#"$2: "}" | cut -c1-100)"
}

# Python: cffi (and pycparser) from the packed wheels when the machine has no cffi.
site=$(mktemp -d)
pyok=1
if ! python3 -c 'import cffi' 2>/dev/null; then
  # pip when the machine has it, else the wheels unzipped (a wheel of these is its files, nothing to run).
  python3 -m pip install -q --no-index --no-deps --target "$site" "$here"/wheels/*.whl >"$out/pip.log" 2>&1 ||
    python3 -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
      "$site" "$here"/wheels/*.whl >>"$out/pip.log" 2>&1 || pyok=0
  PYTHONPATH="$site" python3 -c 'import cffi' >>"$out/pip.log" 2>&1 || pyok=0
fi
export PYTHONPATH="$here/python:$here/python/gpu:$site${PYTHONPATH:+:$PYTHONPATH}"
if [ $pyok = 1 ]; then
  py_args=(--out "$out/python_bench.md")
  # The run stays under about 4 minutes: when the steps before took long, the bench's short shapes only.
  if [ $quick = 1 ] || [ $(( $(date +%s) - t_start )) -gt 150 ]; then
    py_args+=(--quick)
    [ $quick = 0 ] && echo "  (python_bench: --quick, $(( $(date +%s) - t_start )) s already spent)"
  fi
  run_step python_bench 170 python3 "$here/python/gpu/bench_torch.py" "${py_args[@]}"
  if skipped_by_script python_bench 'python GPU bench skipped'; then
    echo "  (python_bench: skipped: $(echo "${results[-1]}" | cut -d'|' -f4))"
  elif [ $gpu = 1 ]; then
    # The prefill shapes again through the opt-in sm_90a kernel, beside the portable kernel's rows above.
    hb_args=(--kind prefill --out "$out/python_bench_hopper.md")
    [ $quick = 1 ] && hb_args+=(--quick)
    run_step python_bench_hopper 120 env KVB_CUDA_PREFILL=hopper python3 "$here/python/gpu/bench_torch.py" "${hb_args[@]}"
  fi
  # The torch engine at Llama-3-8B's shape (random weights made there): decode step against its bytes.
  # Both batch sizes take about a minute; 64 sequences alone when the run is past 4 minutes already.
  eb_args=(--out "$out/engine_bound.md")
  if [ $quick = 1 ] || [ $(( $(date +%s) - t_start )) -gt 240 ]; then
    eb_args+=(--seqs 64 --steps 16)
    [ $quick = 0 ] && echo "  (engine_bound: 64 sequences only, $(( $(date +%s) - t_start )) s already spent)"
  fi
  run_step engine_bound 240 python3 "$here/python/gpu/engine_bound.py" "${eb_args[@]}"
  skipped_by_script engine_bound 'engine bound skipped'
else
  record python_bench FAIL 0 "cffi wheels did not install (pip.log)"
fi
rm -rf "$site"

# The summary: steps, then the GPU section of kvblock bench and the Python bench's table.
{
  echo "# libkvblock GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  sed 's/^/    /' "$here/BUILD_INFO.txt" 2>/dev/null
  echo "    device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "    total: $(( $(date +%s) - t_start )) s$([ $quick = 1 ] && echo ', --quick')"
  echo
  echo "| step | result | seconds | note |"
  echo "| --- | --- | ---: | --- |"
  for r in "${results[@]}"; do
    IFS='|' read -r s res secs note <<<"$r"
    echo "| $s | $res | $secs | ${note//|//} |"
  done
  echo
  echo "## kvblock bench --only kernels --device cuda"
  echo
  echo '```'
  sed -n '/^kernels on the GPU/,$p' "$out/kvblock_bench.log" 2>/dev/null | head -n 60
  grep -m3 -E 'bench:|error' "$out/kvblock_bench.log" 2>/dev/null
  echo '```'
  echo
  echo "## Python bench (libkvblock via the package vs torch SDPA)"
  echo
  if [ -s "$out/python_bench.md" ]; then cat "$out/python_bench.md"; else tail -n 15 "$out/python_bench.log" 2>/dev/null; fi
  if [ -f "$out/python_bench_hopper.log" ]; then
    echo
    echo "## Python bench, prefill shapes with KVB_CUDA_PREFILL=hopper (sm_90a kernel)"
    echo
    grep -m1 'KVB_CUDA_PREFILL' "$out/python_bench_hopper.log"
    if [ -s "$out/python_bench_hopper.md" ]; then cat "$out/python_bench_hopper.md"; else tail -n 15 "$out/python_bench_hopper.log"; fi
  fi
  if [ -f "$out/engine_bound.log" ]; then
    echo
    echo "## The torch engine at Llama-3-8B's shape: decode step against the bytes it reads"
    echo
    if [ -s "$out/engine_bound.md" ]; then cat "$out/engine_bound.md"; else tail -n 15 "$out/engine_bound.log"; fi
  fi
} >"$out/summary.md"
echo
cat "$out/summary.md"
grep -q '| FAIL |' "$out/summary.md" && exit 1
exit 0
