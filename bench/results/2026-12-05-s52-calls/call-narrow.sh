#!/bin/bash
# Session 52 (written after its device time ran out; never run). With the fused QKV-attention kernel at 128
# registers (4794b05), scripts/coresidency.py on the 0.5B plan says: no fused block fits beside a down GEMV block
# (512 threads x 105 registers), so of its 112 blocks only the 76 on SMs that down leaves empty are resident before
# down completes; the other 36 start their weight loads at the release. Under the plan-time knob KILN_GEMV_NARROW=256
# down runs at 256 threads and one fused block fits beside each of its blocks (all 112 resident early). For the 0.5B
# the knob changes only down (its QKV and o grids are narrow already); session 30 measured it before the fold
# (0.5B +2.6%, 1B -4.3%: a rule would narrow only a GEMV before a qkv_attention). This call: the A/B on the 0.5B,
# base vs narrow, contexts 128 and 4096, pads 0 / 32 / 64 / 1024 (PADS=...), two rounds (ROUNDS=...).
# Carry: [".device/bin/kiln-s52b.xz", ".device/kc52"] (the knob is plan-time: the same kernel cache). ~90 s + start.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s52b.xz} ${KC:-.device/kc52} > /tmp/prep.txt
S=$OUT/narrow-summary.txt; { date -u; target/kiln --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b
[ -f target/synth/$M-seed1/config.json ] || timeout 100 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth.txt 2>&1
timeout $(( ${LIMIT:-290} - $(el) )) python3 scripts/ab_placement.py --arm base=target/kiln --arm narrow=target/kiln:KILN_GEMV_NARROW=256 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 60 --out /tmp/abn -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "ab end rc $? at $(el) s" >> $S
cp /tmp/abn/*.log $OUT/ 2>/dev/null
cat $S
