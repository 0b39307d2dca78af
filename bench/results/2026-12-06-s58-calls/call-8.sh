#!/bin/bash
# Session 58 call 8 (the last ~250 s of device time): on an H200, call 7 first (the 0.5B alone through kiln bench
# on e2f3541's binary); then, on any GPU, block traces of the 0.5B and the 1B with 9d71c81's end stamps (the
# block's last thread leaving the kernel, where cfff1f3 stamped thread 0's exit): whether the 1B's 1.54 us
# gate/up -> down handoff of calls 3-5 is thread 0 leaving early or a real handoff.
# Not run in session 58: with 249 s left the device refused to start a machine. Left for the next session's first
# traced call (rebuild the binaries and caches if .device is gone).
# Carry: [".device/bin/kiln-s58.xz", ".device/kc58", ".device/bin/kiln-s58u.xz", ".device/kc58u"]
# (kc58u: scripts/device_cache.sh /tmp/kiln-s58u .device/kc58u KILN_TRACE=1).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && bash bench/results/2026-12-06-s58-calls/call-7.sh
source scripts/device_prep.sh .device/bin/kiln-s58u.xz .device/kc58u KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s58-8-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
  $B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt >> $S 2>&1
done
cat $S
