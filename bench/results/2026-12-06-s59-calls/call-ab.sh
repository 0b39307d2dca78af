#!/bin/bash
# Session 59: the 0.5B with the o projection's planned L2 prefetch on the next layer's QKV weight
# (KILN_L2_PREFETCH_NEXT=qkv, KILN_L2_PREFETCH=36864: 56 blocks x 36 KiB = the 2.06 MB packed QKV; 9addcb6) against
# main's default (the gate/up's first 32 KiB per block), and both traced with the phase stamps (4a6b6f2's kernels:
# when the fused QKV-attention's weights, K/V rows and x reach thread 0). Carry [".device/bin/kiln-s59v.xz",
# ".device/kc59v", ".device/kc59u"] (9addcb6's binary; scripts/device_cache.sh /tmp/kiln-s59v .device/kc59v, and
# .device/kc59u KILN_TRACE=1). ~250 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s59v.xz .device/kc59v > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s59-ab-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
PF="KILN_L2_PREFETCH_NEXT=qkv KILN_L2_PREFETCH=36864"
for V in base qkvpf; do
  ( [ $V = qkvpf ] && export $PF
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-180} - $(el))) python3 scripts/ab_placement.py --arm base=$B \
  --arm qkvpf=$B:KILN_L2_PREFETCH_NEXT=qkv:KILN_L2_PREFETCH=36864 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab2 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
env $PF timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-qkvpf.log 2>&1
echo "gate 1,2,5 (qkvpf) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-qkvpf.log | cut -c1-220 | tail -6 >> $S
source scripts/device_prep.sh .device/bin/kiln-s59v.xz .device/kc59u KILN_TRACE=1 >> $S
for V in base qkvpf; do
  ( [ $V = qkvpf ] && export $PF
    $B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M-$V.plan > /dev/null 2>&1
    KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan /tmp/$M-$V.plan --prompt-ids $(seq -s, 1 128) \
      --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "trace $M $V rc $? at $(el) s" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M-$V.plan.txt --json $OUT/trace-$V.json >> $S 2>&1 )
done
cat $S
