#!/bin/bash
# Session 60: call-probe.sh again with eebdd53's phase 8 (every lane of warp 0 holding its first K and V rows, loaded
# before the wait; 12 stamps per block): is the last-ending block's slow loop over its keys (call-probe.sh) waiting for
# K/V loads? Carry [".device/bin/kiln-s60q.xz", ".device/kc60q"] (eebdd53's binary; scripts/device_cache.sh
# /tmp/kiln-s60q .device/kc60q KILN_TRACE=1). ~15 s on a warm machine.
set -u
source scripts/device_prep.sh .device/bin/kiln-s60q.xz .device/kc60q KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s60-probe2-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
  --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
echo "trace $M prompt 128 rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/probe2-128.json >> $S 2>&1
cat $S
