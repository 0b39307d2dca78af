#!/bin/bash
# Session 64's last device call, with ~500 s of device time left (too little for the full official command on an
# H200, ~480 s of run time plus the start). On an H200: the acceptance row alone (batch 1, context 128, the
# three shapes, torch.compile in the same run; eager and the batch / context tables left out), then the full gate if
# time is left. On an H100: the full official command on main's new default (a data point, not the acceptance).
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c"] (6533db6; scripts/device_cache.sh /tmp/kiln-s64c .device/kc64c).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if ! grep -q H200 $OUT/gpu.txt; then
  BIN=.device/bin/kiln-s64c.xz KC=.device/kc64c GATE_BEFORE=${GATE_BEFORE:-330} bash bench/results/2026-12-05-s52-calls/call-official.sh
  exit
fi
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s64c.xz .device/kc64c > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
R=$(date -u +%F)-h200-decode-row-$C
timeout $((420 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth \
  --prompt 128 --new-tokens 256 --batches 1 --contexts 128 --repeats 5 --fuse --torch --torch-rows first \
  --torch-modes compile --torch-repeats 3 --out $OUT/$R > $OUT/official.txt 2>&1
echo "bench rc $? at $(el) s" >> $S
grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -10 >> $S
if [ $(el) -lt ${ROW_GATE_BEFORE:-340} ]; then  # (ROW_GATE_BEFORE=0: no gate; session 65's call-repeat.sh)
  timeout $((415 - $(el))) $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate (all checks) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
cat $S
