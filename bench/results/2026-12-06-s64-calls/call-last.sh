#!/bin/bash
# Session 64's last device call, with ~320 s of device time left: too little for the acceptance row of all three
# shapes. The 0.5B alone at batch 1, context 128, torch.compile in the same run (~100-150 s of run time), on
# whatever GPU comes: on an H200 it measures the one shape whose target is in doubt there (not the acceptance, which
# is one run of the three); on an H100 it is main's new default beside session 63's cc632ab run.
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c"] (6533db6).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s64c.xz .device/kc64c > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b
[ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
echo "synth ready at $(el) s" >> $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
R=$(date -u +%F)-$G-decode-0.5b-$C
timeout $((220 - $(el))) $B bench --shapes $M --synth-root target/synth --prompt 128 --new-tokens 256 --batches 1 \
  --contexts 128 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/bench.txt 2>&1
echo "bench rc $? at $(el) s" >> $S
grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|syncs|launches|rror' $OUT/bench.txt | head -10 >> $S
cat $S
