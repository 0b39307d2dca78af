#!/bin/bash
# device_trace.sh BINARY_XZ CACHE_DIR SUMMARY [SHAPE:PROMPT ...]: on a GPU machine (a device call), block traces of kiln's
# decode with the KILN_TRACE=1 kernels (CACHE_DIR built by scripts/device_cache.sh BINARY CACHE_DIR KILN_TRACE=1, or with
# DEFINES=KILN_TRACE=1,... and the same in the environment here), each through scripts/trace_summary.py, appended to
# $OUT/SUMMARY (its JSON beside it as $OUT/SHAPE-PROMPT.json). SHAPE:PROMPT defaults to qwen2.5-0.5b:128; a shape's
# synthetic model is written under target/synth once. Prints the summary. As sessions 59-60's trace calls ran:
#   bash scripts/device_trace.sh .device/bin/kiln-s60q.xz .device/kc60q s60-probe2-summary.txt qwen2.5-0.5b:128
set -u
BIN=$1 KC=$2 S=$OUT/$3
shift 3
source scripts/device_prep.sh "$BIN" "$KC" "${DEFINES:-KILN_TRACE=1}" > /tmp/prep.txt
B=$PWD/target/kiln
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } >> $S
for SP in "${@:-qwen2.5-0.5b:128}"; do
  M=${SP%%:*} P=${SP##*:} D=target/synth/${SP%%:*}-seed1
  [ -f $D/config.json ] || timeout 90 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
  $B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1  # every call: a warm machine keeps /tmp
  KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 $P) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M prompt $P rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/$M-$P.json >> $S 2>&1
done
cat $S
