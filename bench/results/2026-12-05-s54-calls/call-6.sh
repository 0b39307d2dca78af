#!/bin/bash
# Written in session 54 for the next session (not run: the device time was spent). On 8c63b20 (the default entry
# kiln_fused_linear_res_* for the decode o / down projections, +5.1% / +2.3% on the 0.5B / 1B in session 54's H100
# A/B, and the GEMV-only entries of linear / linear_argmax / gated_linear behind KILN_GEMV_ONLY_ENTRY=1, built, not
# measured: 1696 / 1136 instructions against 13552 / 6008 for the 0.5B's logits and gate/up kernels):
#   1. greedy ids of the 0.5B and 1B: defaults, KILN_GEMV_ONLY_ENTRY=1, KILN_FUSED_RES_ENTRY=0 (must all match);
#   2. A/B base / gemv (KILN_GEMV_ONLY_ENTRY=1) / nores (KILN_FUSED_RES_ENTRY=0) on the 0.5B and 1B, pads
#      0 / 32 / 64 / 1024, ROUNDS (default 1): the H200's measure of both entries;
#   3. kiln gate --checks 1,2,5 with KILN_GEMV_ONLY_ENTRY=1, if time is left.
# All arms run one cubin (the knobs pick symbols at run time), so one kernel cache serves them.
# Carry: [".device/bin/kiln-s54g.xz", ".device/kc54g"]. Then the official command on the defaults (with
# KILN_GEMV_ONLY_ENTRY's default flipped first if it wins): BIN=.device/bin/kiln-s54g.xz KC=.device/kc54g
# GATE_BEFORE=450 bash bench/results/2026-12-05-s52-calls/call-official.sh (~380 s plus the gate if time is left).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s54g.xz .device/kc54g > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s54-6-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
  for V in base gemv nores; do
    ( [ $V = gemv ] && export KILN_GEMV_ONLY_ENTRY=1; [ $V = nores ] && export KILN_FUSED_RES_ENTRY=0
      timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 \
        --device cuda > /tmp/ids.txt 2>&1
      echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S )
  done
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-420} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm gemv=$B:KILN_GEMV_ONLY_ENTRY=1 \
  --arm nores=$B:KILN_FUSED_RES_ENTRY=0 --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-1} --timeout 30 --out /tmp/ab6 -- \
  --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt ${GATE_BEFORE:-480} ]; then
  KILN_GEMV_ONLY_ENTRY=1 timeout $((590 - $(el))) $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-gemv.log 2>&1
  echo "gate 1,2,5 (KILN_GEMV_ONLY_ENTRY=1) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-gemv.log | cut -c1-220 | tail -6 >> $S
fi
cat $S
