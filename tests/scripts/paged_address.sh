#!/bin/sh
# The paged KV address (block * block_stride + row-in-block * token_stride + head * head_stride) is
# written once, in kernels/common/paged.h (PagedKv: row, slot_row, block, blocks_extent). This check
# fails when any other kernel file multiplies by a block stride; whole-block copies and sizes use
# PagedKv::block and blocks_extent too, so no file is exempt.
pattern='(\*[[:space:]]*[A-Za-z_0-9.>()-]*\bblock_stride\b)|\bblock_stride\b\)?[[:space:]]*\*'
passed=0 failed=0

# The pattern itself: it must catch both orders and member access, and leave plain reads alone.
for line in 'off = id * p.kv.block_stride;' 'n = c.block_stride * es;' 'x = int64_t(b) * c->block_stride + t;' \
            'n = size_t(c.block_stride) * e;'; do
  if printf '%s\n' "$line" | grep -qE "$pattern"; then passed=$((passed + 1)); else
    echo "FAIL paged_address: the pattern misses: $line"; failed=$((failed + 1)); fi
done
for line in 'p.kv.block_stride = c.block_stride;' 'if (s.block_stride == s.block_elems()) {'; do
  if printf '%s\n' "$line" | grep -qE "$pattern"; then
    echo "FAIL paged_address: the pattern flags a plain read: $line"; failed=$((failed + 1)); else passed=$((passed + 1)); fi
done

found=$(grep -rnE "$pattern" kernels | grep -vE '^[^:]*:[0-9]+:[[:space:]]*//' | grep -v '^kernels/common/paged.h:')
if [ -z "$found" ]; then
  passed=$((passed + 1))
else
  echo "FAIL paged_address: kernel code multiplies by a block stride outside kernels/common/paged.h (use PagedKv):"
  printf '%s\n' "$found" | sed 's/^/    /'
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
