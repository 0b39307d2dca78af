#!/bin/bash
# Session 58 call 7, with the session's last ~280 s of device time: on an H200 only, the 0.5B alone through
# kiln bench (no torch; not the acceptance, which is the three shapes in one run) on e2f3541's binary, main's
# default kernels; on any other GPU it stops at once. Carry: [".device/bin/kiln-s58.xz", ".device/kc58"].
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3; }
source scripts/device_prep.sh .device/bin/kiln-s58.xz .device/kc58 > $OUT/h200-05b.txt
M=qwen2.5-0.5b; timeout 120 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
timeout 150 target/kiln bench --shapes $M --synth-root target/synth --prompt 128 --new-tokens 256 --batches 1 \
  --contexts 128 --repeats 5 --fuse --out $OUT/$(date -u +%F)-h200-decode-05b-e2f35416625f >> $OUT/h200-05b.txt 2>&1
echo "bench rc $?" >> $OUT/h200-05b.txt
grep -a -E 'cached|read bandwidth|knobs|^qwen[^ ]* +1 +128 |rror|bench rc' $OUT/h200-05b.txt
