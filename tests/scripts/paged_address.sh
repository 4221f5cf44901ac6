#!/bin/sh
# The paged KV address (block * block_stride + row-in-block * token_stride + head * head_stride) is
# written once, in kernels/common/paged.h. This check fails when a kernel file multiplies by a block
# stride (block_stride, or copy.cu's s_block / d_block) anywhere else, beyond the places listed below
# with their count: whole-block copies, sizes and alignment checks, and the hand-written addresses
# still to move onto the paged type (cascade.cu's kv_row, prefill_hopper.cu's producer). A count that
# drops below its allowance fails too, so that the list shrinks with the code.
allowed="
kernels/cascade/cascade.cu 1
kernels/common/cache_capi.cpp 1
kernels/common/cuda.cuh 1
kernels/copy/copy.cu 5
kernels/copy/copy_cpu.cpp 5
kernels/prefill/prefill_hopper.cu 1
kernels/tree/copy_slots.cu 1
kernels/tree/copy_slots_cpu.cpp 1
kernels/write_kv/write_kv.cu 1
"
pattern='(\*[[:space:]]*[A-Za-z_0-9.>()-]*\b(block_stride|s_block|d_block)\b)|\b(block_stride|s_block|d_block)\b\)?[[:space:]]*\*'
passed=0 failed=0
found=$(grep -rnE "$pattern" kernels | grep -vE '^[^:]*:[0-9]+:[[:space:]]*//' | grep -v '^kernels/common/paged.h:' |
        cut -d: -f1 | sort | uniq -c | awk '{print $2" "$1}')
for f in $(printf '%s\n%s\n' "$found" "$allowed" | awk 'NF {print $1}' | sort -u); do
  n=$(printf '%s\n' "$found" | awk -v f="$f" '$1 == f {print $2}')
  a=$(printf '%s\n' "$allowed" | awk -v f="$f" '$1 == f {print $2}')
  if [ "${n:-0}" = "${a:-0}" ]; then
    passed=$((passed + 1))
  else
    echo "FAIL paged_address: $f multiplies by a block stride ${n:-0} times, ${a:-0} allowed (use kernels/common/paged.h)"
    grep -nE "$pattern" "$f" 2>/dev/null | grep -vE '^[0-9]+:[[:space:]]*//' | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
