#!/bin/bash
# Written in session 48; its carried files rebuilt in session 49 (kernels/attention_qkv.cu gained empty probe hooks:
# the same machine code, new cache keys). No device lent in either; never run. Only if call-B.sh's A/B says KILN_FUSE_QKV_ATTN=1 wins on the
# 0.5B at context 128 (and call-B's kernel_check and gate passed): the official command with the knob on,
# so that its tables, JSON and chart record `knobs: KILN_FUSE_QKV_ATTN=1` (the 1B and 8B plans do not change:
# their rows measure the defaults). Then the full gate with the knob if time is left.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc50"] (as call-B.sh; kc50 from scripts/device_cache.sh). ~380 s for the bench (+ synth of the 1B and
# 8B shapes if the machine is fresh: ~60 s).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s49.xz .device/kc50 > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/c-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
R=2026-12-05-h200-decode-$C-qkvattn
KILN_FUSE_QKV_ATTN=1 timeout $((580 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth \
  --prompt 128 --new-tokens 256 --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first \
  --torch-modes eager,compile --torch-repeats 3 --out $OUT/$R > $OUT/official.txt 2>&1
echo "official (KILN_FUSE_QKV_ATTN=1) rc $? at $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -10 >> $S
if [ $(el) -lt 450 ]; then
  KILN_FUSE_QKV_ATTN=1 timeout $((590 - $(el))) $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate (all checks, KILN_FUSE_QKV_ATTN=1) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
cat $S
