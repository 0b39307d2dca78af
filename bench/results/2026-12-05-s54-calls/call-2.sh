#!/bin/bash
# Session 54, second call, on fde97e2: a deeper register ring for the default (512 / 256-thread) fused GEMV, by
# defines only. Session 54's trace has the 0.5B's down GEMV at 4.90 us per layer for 1.93 us of bytes, 89% of its
# 56 blocks resident only at gate/up's release; its blocks hold 16 warps x DEPTH 4 x 1 KiB = 64 KiB in flight, and
# 56 x 64 KiB over its ~3.5 us of streaming is the ~2.5 TB/s it reads at. KILN_FUSED_DEPTH=6 (128 registers, no
# spills; 96 KiB in flight) and =8 (128 registers, 16 bytes of spills); KILN_GATED_DEPTH=2 pins gate/up's ring.
# On the 0.5B only o and down run that kernel (its `_o3` variants spill at these depths; the 0.5B plans none).
#   1. greedy ids of the 0.5B and 1B for each arm (the ring depth changes no sum order: they must match);
#   2. kernel_check of the fused GEMVs with DEPTH 6;
#   3. A/B base / d6 / d8 on the 0.5B and 1B over pads 0 / 32 / 64 / 1024 (ROUNDS=, default 1);
#   4. a block trace of the 0.5B with DEPTH 6, if time is left.
# Carry: [".device/bin/kiln-s53c.xz", ".device/kc54d", ".device/kcc54.tar.xz", ".device/kc54t"]
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s53c.xz .device/kc54d > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s54-2-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
D6=KILN_FUSED_DEPTH=6,KILN_GATED_DEPTH=2 D8=KILN_FUSED_DEPTH=8,KILN_GATED_DEPTH=2
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
  for V in base d6 d8; do
    DEF=$([ $V = d6 ] && echo $D6; [ $V = d8 ] && echo $D8)
    KILN_NVRTC_DEFINES=$DEF timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) \
      --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
  done
done
echo "ids done at $(el) s" >> $S
tar -C /tmp -xJf .device/kcc54.tar.xz && export KILN_CHECK_CACHE=/tmp/kcc54
timeout 100 python3 scripts/kernel_check.py --only fused,dense,tiles,out_norm,qkv,qkv_rope --dtypes bf16 \
  --define KILN_FUSED_DEPTH=6 --define KILN_GATED_DEPTH=2 > $OUT/check-d6.txt 2>&1
echo "kernel_check d6 rc $? at $(el) s: $(grep -a -c PASS $OUT/check-d6.txt) PASS, $(grep -a -c FAIL $OUT/check-d6.txt) FAIL" >> $S
grep -a FAIL $OUT/check-d6.txt | head -5 >> $S
unset KILN_CHECK_CACHE
timeout $((480 - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm d6=$B:KILN_NVRTC_DEFINES=$D6 \
  --arm d8=$B:KILN_NVRTC_DEFINES=$D8 --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-1} --timeout 40 --out /tmp/ab2 -- \
  --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt 530 ]; then
  source scripts/device_prep.sh .device/bin/kiln-s53c.xz .device/kc54t KILN_TRACE=1,$D6 >> $S
  D=target/synth/qwen2.5-0.5b-seed1 N=qwen2.5-0.5b-d6
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 50 $B run --model $D --plan $OUT/$N.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace rc $? at $(el) s" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan; gzip -f $OUT/launches-$N.csv $OUT/$N.plan.txt
fi
echo "end $(el) s" >> $S
cat $S
