#!/bin/bash
# Session 52: the official command on the binary with QKV-RoPE inside the attention on by default
# (lower::fuse rewrite 11; session 52's A/B of the knob on an H100: results/2026-12-05-h100-decode-ab-s52.md), so the
# report says `knobs: none`; then the full `kiln gate` if time is left.
# Carry: [".device/bin/kiln-s52b.xz", ".device/kc52"] (the binary of 14db48a: 4794b05's fused kernel at 128 registers, and
# its kernel cache: scripts/device_cache.sh /tmp/kiln-s52b .device/kc52). Session 52 ran it with kiln-s52.xz (3bece5f)
# and kc50 on an H100 (results/2026-12-05-h100-decode-3bece5ff2258.md). ~380 s for the bench (+ synth of the three shapes on a fresh
# machine: ~60 s), the gate ~150 s. GATE_ONLY=1: the synth and the gate, no bench (a short call on an H100, where the
# official numbers would not count: the acceptance is on the H200).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s52b.xz} ${KC:-.device/kc52} > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
# (GATE_ONLY: none here; the gate writes the synth directories it needs itself)
for M in $([ -z "${GATE_ONLY:-}" ] && echo qwen2.5-0.5b llama3.2-1b llama3.1-8b); do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
R=$(date -u +%F)-$G-decode-$C  # (2026-12-05 until session 55)
[ -z "${GATE_ONLY:-}" ] && timeout $((${LIMIT:-580} - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth \
  --prompt 128 --new-tokens 256 --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first \
  --torch-modes eager,compile --torch-repeats 3 --out $OUT/$R > $OUT/official.txt 2>&1
echo "official rc $? at $(el) s${GATE_ONLY:+ (skipped: GATE_ONLY)}" >> $S
grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -10 >> $S 2>/dev/null
if [ $(el) -lt ${GATE_BEFORE:-450} ]; then
  timeout $((590 - $(el))) $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate (all checks) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
cat $S
