#!/bin/bash
# Session 59: the fused QKV-attention reading x once per block into shared memory (KILN_QKV_ATTN_X_SHARED=1,
# ee16d01; a compile-time define) against main's every-warp L2 reads: greedy ids, the 0.5B A/B over four placements,
# kiln gate 1,2,5 with the define, and both traced with the phase stamps. Carry [".device/bin/kiln-s59x.xz",
# ".device/kc59x", ".device/kc59xt"] (scripts/device_cache.sh /tmp/kiln-s59x .device/kc59x [KILN_QKV_ATTN_X_SHARED=1];
# .device/kc59xt with KILN_TRACE=1[,KILN_QKV_ATTN_X_SHARED=1]). ~130 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
XS=KILN_QKV_ATTN_X_SHARED=1
source scripts/device_prep.sh .device/bin/kiln-s59x.xz .device/kc59x > /tmp/prep.txt
echo "kernel cache .device/kc59x [$XS]: $(KILN_NVRTC_DEFINES=$XS timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s59-x-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base xs; do
  ( [ $V = xs ] && export KILN_NVRTC_DEFINES=$XS
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-160} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm xs=$B:KILN_NVRTC_DEFINES=$XS \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/abx -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$XS timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-xs.log 2>&1
echo "gate 1,2,5 (xs) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-xs.log | cut -c1-220 | tail -6 >> $S
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
for V in base xs; do
  DEF=KILN_TRACE=1; [ $V = xs ] && DEF=KILN_TRACE=1,$XS
  [ -d .device/kc59xt ] || break
  ( source scripts/device_prep.sh .device/bin/kiln-s59x.xz .device/kc59xt $DEF >> $S
    KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
      --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "trace $M $V rc $? at $(el) s" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/trace-x-$V.json >> $S 2>&1 )
done
cat $S
