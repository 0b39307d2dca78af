#!/bin/bash
# Session 56 call 2: the k2 down (KILN_GEMV_K2=1, the 0.5B's down over 112 blocks of 256 threads in clusters of
# two) with a deeper ring. Call 1 found k2 at depth 4 a tie (+0.04%): its down was no faster (4.99 us for 8.7 MB),
# since 112 blocks x 256 threads x 4 slots x 32 bytes hold the same 3.6 MB in flight as 56 x 512 x 4. At 256
# threads the kernel may take more registers: depth 8 is 126 registers, no spills (KILN_FUSED_K2_DEPTH=8,
# KILN_FUSED_K2_MAXNREG=128), 7.2 MB in flight; depth 6 is 110. The ring's depth does not change the order of the
# sums: the greedy ids must match the defaults'.
#   1. greedy ids of the 0.5B: base / k2 / k2d8 / k2d6;
#   2. A/B of the four on the 0.5B, pads 0 / 32 / 64 / 1024, ROUNDS (default 2);
#   3. kiln gate --checks 1,2,5 with k2d8;
#   4. block traces of the 0.5B with k2d8 (kernels built with KILN_TRACE=1).
# Carry: [".device/bin/kiln-s56.xz", ".device/kc56", ".device/kc56t"] (d86b92c, b3d2666's kernels; kc56 holds the caches of the three
# define sets, kc56t the traced depth-8 one). ~200 s on a fresh machine.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s56.xz .device/kc56 > /tmp/prep.txt
D8=KILN_FUSED_K2_DEPTH=8,KILN_FUSED_K2_MAXNREG=128 D6=KILN_FUSED_K2_DEPTH=6,KILN_FUSED_K2_MAXNREG=128
for d in $D8 $D6; do echo "kernel cache .device/kc56 [$d]: $(KILN_NVRTC_DEFINES=$d timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt; done
B=$PWD/target/kiln
S=$OUT/s56-2-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base k2 k2d8 k2d6; do
  ( [ $V != base ] && export KILN_GEMV_K2=1; [ $V = k2d8 ] && export KILN_NVRTC_DEFINES=$D8; [ $V = k2d6 ] && export KILN_NVRTC_DEFINES=$D6
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm k2=$B:KILN_GEMV_K2=1 \
  --arm k2d8=$B:KILN_GEMV_K2=1:KILN_NVRTC_DEFINES=$D8 --arm k2d6=$B:KILN_GEMV_K2=1:KILN_NVRTC_DEFINES=$D6 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab2 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_GEMV_K2=1 KILN_NVRTC_DEFINES=$D8 timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-k2d8.log 2>&1
echo "gate 1,2,5 (k2d8) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-k2d8.log | cut -c1-220 | tail -6 >> $S
if [ $(el) -lt ${TRACE_BEFORE:-300} ]; then
  source scripts/device_prep.sh .device/bin/kiln-s56.xz .device/kc56t KILN_TRACE=1,$D8 >> $S
  KILN_GEMV_K2=1 $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-k2d8.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan $OUT/$M-k2d8.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M k2d8 rc $? at $(el) s" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-k2d8.plan.txt --csv $OUT/launches-$M-k2d8.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-k2d8.plan; gzip -f $OUT/launches-$M-k2d8.csv $OUT/$M-k2d8.plan.txt
fi
cat $S
