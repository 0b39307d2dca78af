#!/bin/bash
# (KILN_GEMV_WALK_WAVES was added in 60d55e4 for this call and removed after it: every walking arm lost.)
# Session 54, third call, on 60d55e4 (fde97e2's kernels + the plan-time knob KILN_GEMV_WALK_WAVES): the 0.5B's
# logits GEMV walked. Its 9496 one-tile blocks (28 KiB each) read at ~0.85 of the bandwidth on the H200 (71.1 us
# for 60.3 us of bytes, session 54 call 1's trace) where the 1B's 64 KiB blocks reach ~0.97. KILN_GEMV_WALK=linear
# makes the logits walk (one ring across a block's tiles: the next tile's weights in flight during a tile's sum and
# argmax); KILN_GEMV_WALK_WAVES=k gives them k waves of 396 blocks (k = 1: 24 tiles each; 4: 6; 8: 3). Same bits
# per tile, so the greedy ids must not move.
#   1. greedy ids of each arm; 2. A/B base / w1 / w4 / w8 on the 0.5B, pads 0 / 32 / 64 / 1024: one round
#      on the 0.5B and the 1B (its logits walk too), then one more on the 0.5B alone if time is left.
# Carry: [".device/bin/kiln-s54w.xz", ".device/kc54w"] (kc54w: the defaults' and KILN_GEMV_WALK=linear's modules)
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s54w.xz .device/kc54w > /tmp/prep.txt
KILN_GEMV_WALK=linear timeout 20 target/kiln kernels --modules both >> /tmp/prep.txt 2>&1
B=$PWD/target/kiln M=qwen2.5-0.5b
S=$OUT/s54-3-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for X in $M llama3.2-1b; do
  [ -f target/synth/$X-seed1/config.json ] || timeout 120 $B synth --shape $X --seed 1 --out target/synth/$X-seed1 > /dev/null 2>&1
done
for V in base 1 4 8; do
  ( [ $V != base ] && export KILN_GEMV_WALK=linear KILN_GEMV_WALK_WAVES=$V
    timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 \
      --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids walk=$V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((560 - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm w1=$B:KILN_GEMV_WALK=linear \
  --arm w4=$B:KILN_GEMV_WALK=linear:KILN_GEMV_WALK_WAVES=4 --arm w8=$B:KILN_GEMV_WALK=linear:KILN_GEMV_WALK_WAVES=8 \
  --pads ${PADS:-0,32,64,1024} --rounds 1 --timeout 30 --out /tmp/ab3 -- \
  --shapes $M${SHAPES2:-,llama3.2-1b} --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
# a second round on the 0.5B alone, if time is left
[ $(el) -lt 440 ] && timeout $((570 - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm w1=$B:KILN_GEMV_WALK=linear \
  --arm w4=$B:KILN_GEMV_WALK=linear:KILN_GEMV_WALK_WAVES=4 --arm w8=$B:KILN_GEMV_WALK=linear:KILN_GEMV_WALK_WAVES=8 \
  --pads ${PADS:-0,32,64,1024} --rounds 1 --timeout 30 --out /tmp/ab3b -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1 && echo "ab2 at $(el) s" >> $S
cat $S
