#!/bin/bash
# Session 54, fifth call, on cc3e323: kiln_fused_linear_res_bf16_bf16, the decode o / down projections' one path as
# its own entry point (~1/8 of kiln_fused_linear's instructions, 90 registers instead of 105). Call 4's ncu (H100,
# serialized) put 2/3 of o's and down's warp-stall samples on `no_inst` (instruction fetch). KILN_FUSED_RES_ENTRY=0
# (run time) calls kiln_fused_linear as before: the same cubin, so one kernel cache serves both arms.
#   1. greedy ids of the 0.5B and 1B with the entry on and off (the same code: they must match);
#   2. A/B res / nores on the 0.5B and 1B, pads 0 / 32 / 64 / 1024, ROUNDS (default 2);
#   3. kiln gate --checks 1,2,5 (graph == eager, GPU == CPU, device loop == one step) with the entry, if time is left.
# Carry: [".device/bin/kiln-s54r.xz", ".device/kc54r"]
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s54r.xz .device/kc54r > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s54-5-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
  for V in 1 0; do
    KILN_FUSED_RES_ENTRY=$V timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) \
      --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids res=$V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
  done
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-240} - $(el))) python3 scripts/ab_placement.py --arm res=$B --arm nores=$B:KILN_FUSED_RES_ENTRY=0 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab5 -- \
  --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt ${GATE_BEFORE:-200} ]; then
  timeout $((${LIMIT:-290} - $(el))) $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125.log 2>&1
  echo "gate 1,2,5 rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125.log | cut -c1-220 | tail -6 >> $S
fi
cat $S
