#!/bin/bash
# Session 60: the fused QKV-attention's loop over keys not unrolled (KILN_QKV_ATTN_UNROLL=1, 787a598; a compile-time
# define: half the loop's code, 4 keys a warp per pass, the first pass's K/V loaded before the wait) against main's 2:
# does the last-ending block's slow loop (call-probe2.sh) come from instruction fetch? Greedy ids, the 0.5B A/B over
# four placements at contexts 128 and 1024, kiln gate 1,2,5 with the define. Carry [".device/bin/kiln-s60u.xz",
# ".device/kc60u"] (scripts/device_cache.sh /tmp/kiln-s60u .device/kc60u, then again with KILN_QKV_ATTN_UNROLL=1). ~130 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
U1=KILN_QKV_ATTN_UNROLL=1
source scripts/device_prep.sh .device/bin/kiln-s60u.xz .device/kc60u > /tmp/prep.txt
echo "kernel cache .device/kc60u [$U1]: $(KILN_NVRTC_DEFINES=$U1 timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s60-unroll-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base u1; do
  ( [ $V = u1 ] && export KILN_NVRTC_DEFINES=$U1
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-230} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm u1=$B:KILN_NVRTC_DEFINES=$U1 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/abu -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts ${CTXS:-128,1024} --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$U1 timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-u1.log 2>&1
echo "gate 1,2,5 (u1) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-u1.log | cut -c1-220 | tail -6 >> $S
cat $S
