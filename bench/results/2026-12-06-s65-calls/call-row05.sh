#!/bin/bash
# Session 65's last device call, with 367 s of device time left (too few for call-repeat.sh's ~400 s): on an H200,
# the 0.5B's acceptance row alone with kiln only (the bandwidth probe and kiln's decode, batch 1, context 128, 5
# repeats; no torch), a repeat of request 1's 0.501 reported beside it whatever it gives. Elsewhere nothing.
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c"] (6533db6, main's kernels), or another build's with BIN / KC
# (session 66: BIN=.device/bin/kiln-s66b.xz KC=.device/kc66a). Request 13 ran it (933e001's
# version: one round, its start written out; scripts/device_call_start.sh now does the same).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || exit 0
source scripts/device_call_start.sh ${BIN:-.device/bin/kiln-s64c.xz} ${KC:-.device/kc64c} qwen2.5-0.5b
M=qwen2.5-0.5b
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
mkdir -p /tmp/rounds
# ROUNDS=3: three bench runs in the call (session 65's request 14, refused); the first's files in $OUT, the others'
# JSON in $OUT/rounds.tar (the tool brings back at most 8 files)
for r in $(seq 1 ${ROUNDS:-1}); do
  O=$([ $r = 1 ] && echo $OUT || echo /tmp/rounds)/$(date -u +%F)-h200-decode-row05-$C$([ $r = 1 ] || echo -r$r)
  timeout $((240 - $(el))) $B bench --shapes $M --synth-root target/synth --prompt 128 --new-tokens 256 --batches 1 \
    --contexts 128 --repeats 5 --fuse --out $O > $OUT/official.txt 2>&1
  echo "bench $r rc $? at $(el) s" >> $S
  grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -6 >> $S
done
[ -n "$(ls /tmp/rounds/*.json 2>/dev/null)" ] && tar -C /tmp/rounds -cf $OUT/rounds.tar $(cd /tmp/rounds && ls *.json)
cat $S
