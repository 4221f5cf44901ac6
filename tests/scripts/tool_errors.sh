#!/bin/sh
# kvblock replay on bad input: malformed lines (error with line and column, exit 1), a truncated last
# line (reported, not fatal), strict value checks, usage errors.
. tests/scripts/tool_common.inc
GOOD='{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}'

# expect_error NAME LINE_CONTENT EXPECTED_STDERR_REGEX: the line is line 2 of a trace; exit 1 with
# "FILE:2:COL: error: ..." matching the regex.
expect_error() {
  printf '%s\n%s\n%s\n' "$GOOD" "$2" "$GOOD" >"$TMP/bad.jsonl"
  "$KVB" replay "$TMP/bad.jsonl" >"$TMP/bad.out" 2>"$TMP/bad.err"
  rc=$?
  if [ $rc -eq 1 ] && grep -Eq "bad\.jsonl:2:[0-9]+: error: .*$3" "$TMP/bad.err" && [ ! -s "$TMP/bad.out" ]; then
    ok "$1"
  else
    fail "$1 (exit $rc: $(cat "$TMP/bad.err"))"
  fi
}
expect_error "missing comma" '{"timestamp": 1, "input_length": 5 "output_length": 1, "hash_ids": [3]}' "expected ',' or '\}'"
expect_error "not an object" '[1, 2]' "expected '\{'"
expect_error "garbage after object" "$GOOD x" "unexpected 'x' after the object"
expect_error "unterminated string" '{"timestamp": 1, "inp' "unterminated string"
expect_error "duplicate key" '{"output_length": 1, "output_length": 2, "input_length": 1, "hash_ids": [1]}' 'duplicate key "output_length"'
expect_error "negative hash id" '{"input_length": 1, "output_length": 1, "hash_ids": [-1]}' '"hash_ids"\[0\] must be an integer'
expect_error "hash id too big" '{"input_length": 1, "output_length": 1, "hash_ids": [2147483648]}' '"hash_ids"\[0\] must be'
expect_error "fractional length" '{"input_length": 1.5, "output_length": 1, "hash_ids": [1]}' '"input_length" must be an integer'
expect_error "huge integer" '{"input_length": 99999999999999999999999, "output_length": 1, "hash_ids": [1]}' '"input_length" must be an integer'
expect_error "output too long" '{"input_length": 1, "output_length": 1048577, "hash_ids": [1]}' '"output_length" must be an integer'
expect_error "too few hash ids" '{"input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}' 'needs 3 hash_ids'
expect_error "missing output_length" '{"input_length": 1, "hash_ids": [1]}' 'missing "output_length"'
expect_error "missing input_length" '{"output_length": 1, "hash_ids": [1]}' 'missing "input_length"'
expect_error "neither format" '{"timestamp": 1, "output_length": 1}' 'neither "hash_ids"'
expect_error "both formats" '{"prompt": [1], "hash_ids": [1], "output_length": 1}' 'both "hash_ids" and "prompt"'
expect_error "prompt length mismatch" '{"prompt": [1, 2], "input_length": 3, "output_length": 1}' 'differs from the 2 tokens'
expect_error "empty prompt" '{"prompt": [], "output_length": 1}' 'empty prompt'
expect_error "negative timestamp" '{"timestamp": -5, "input_length": 1, "output_length": 1, "hash_ids": [1]}' '"timestamp" must be'
expect_error "bad literal" '{"x": nul, "input_length": 1, "output_length": 1, "hash_ids": [1]}' "unexpected 'n'"
expect_error "bad escape" '{"x": "\q", "input_length": 1, "output_length": 1, "hash_ids": [1]}' 'bad escape'
expect_error "trailing comma" '{"input_length": 1, "output_length": 1, "hash_ids": [1,]}' 'expected a number'
expect_error "leading zero" '{"input_length": 01, "output_length": 1, "hash_ids": [1]}' "expected ',' or '\}'"
printf '%s\n{"a": %s}\n' "$GOOD" "$(printf '[%.0s' $(seq 1 70))" >"$TMP/deep.jsonl"
"$KVB" replay "$TMP/deep.jsonl" >/dev/null 2>"$TMP/deep.err"
check "deep nesting refused" grep -q 'deep.jsonl:2:.*nesting deeper than' "$TMP/deep.err"
printf '%s\n{"x": "a\000b", "input_length": 1, "output_length": 1, "hash_ids": [1]}\n' "$GOOD" >"$TMP/nul.jsonl"
"$KVB" replay "$TMP/nul.jsonl" >/dev/null 2>"$TMP/nul.err"
check "NUL byte refused" grep -q 'nul.jsonl:2:.*control character 0x00' "$TMP/nul.err"

# Truncated last line: reported, the rest replayed, exit 0.
printf '%s\n%s\n{"timestamp": 3, "input_len' "$GOOD" "$GOOD" >"$TMP/trunc.jsonl"
"$KVB" replay "$TMP/trunc.jsonl" --json >"$TMP/trunc.json" 2>"$TMP/trunc.err"
check "truncated last line: exit 0" [ $? -eq 0 ]
check "truncated last line: reported" grep -q 'trunc.jsonl:3: warning: truncated last line ignored' "$TMP/trunc.err"
check "truncated last line: 2 requests" [ "$(json_field "$TMP/trunc.json" requests)" = 2 ]
# A complete last line without its newline is fine.
printf '%s\n%s' "$GOOD" "$GOOD" >"$TMP/nonl.jsonl"
"$KVB" replay "$TMP/nonl.jsonl" --json >"$TMP/nonl.json" 2>"$TMP/nonl.err"
check "last line without newline: 2 requests" [ "$(json_field "$TMP/nonl.json" requests)" = 2 ]
check "last line without newline: no warning" [ ! -s "$TMP/nonl.err" ]
# A malformed line in the middle that ends with a newline is an error, even if it is the last one.
printf '%s\n{"timestamp": 3, "input_len\n' "$GOOD" >"$TMP/cut.jsonl"
"$KVB" replay "$TMP/cut.jsonl" >/dev/null 2>"$TMP/cut.err"
check "cut line with newline: error" [ $? -eq 1 ]
check "cut line with newline: line 2" grep -q 'cut.jsonl:2:' "$TMP/cut.err"

# Files and usage.
"$KVB" replay "$TMP/does-not-exist.jsonl" 2>"$TMP/ne.err"
check "missing file: exit 1" [ $? -eq 1 ]
check "missing file: message" grep -q 'cannot open' "$TMP/ne.err"
: >"$TMP/empty.jsonl"
"$KVB" replay "$TMP/empty.jsonl" --json >"$TMP/empty.json"
check "empty trace: 0 requests" [ "$(json_field "$TMP/empty.json" requests)" = 0 ]
"$KVB" replay 2>/dev/null
check "no trace: usage error" [ $? -eq 2 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --num-blocks 0 2>/dev/null
check "--num-blocks 0 refused" [ $? -eq 2 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --num-blocks abc 2>/dev/null
check "--num-blocks abc refused" [ $? -eq 2 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --block-size 2>/dev/null
check "--block-size without value" [ $? -eq 2 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --bogus 2>"$TMP/u.err"
check "unknown option" [ $? -eq 2 ]
check "unknown option named" grep -q "unknown option '--bogus'" "$TMP/u.err"
"$KVB" frobnicate 2>/dev/null
check "unknown command" [ $? -eq 2 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --block-size=32 --json >"$TMP/eq.json"
check "--opt=value form" [ "$(json_field "$TMP/eq.json" block_size)" = 32 ]
finish
