#!/bin/bash
# Session 60: the fused QKV-attention's split merged after one block barrier (KILN_QKV_ATTN_MERGE1=1, 644e8fb; a
# compile-time define, the same bits) against main's 6-barrier tree: greedy ids (KCHECK=1: kernel_check's
# qkv_attention too, bitwise against the default), the 0.5B A/B over four placements, kiln gate 1,2,5 with the define. Carry
# [".device/bin/kiln-s60.xz", ".device/kc60"] (scripts/device_cache.sh /tmp/kiln-s60 .device/kc60, then again with
# KILN_QKV_ATTN_MERGE1=1). ~150 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
MG=KILN_QKV_ATTN_MERGE1=1
source scripts/device_prep.sh .device/bin/kiln-s60.xz .device/kc60 > /tmp/prep.txt
echo "kernel cache .device/kc60 [$MG]: $(KILN_NVRTC_DEFINES=$MG timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s60-merge-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
if [ -n "${KCHECK:-}" ]; then  # two NVRTC compiles on the device (~60 s): off by default
  timeout 150 python3 scripts/kernel_check.py --only qkv_attention > $OUT/kernel-check-qkv.txt 2>&1
  echo "kernel_check qkv_attention rc $? at $(el) s" >> $S; grep -a -E 'FAIL|MERGE1|passed|failed' $OUT/kernel-check-qkv.txt | tail -8 >> $S
fi
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base mg; do
  ( [ $V = mg ] && export KILN_NVRTC_DEFINES=$MG
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm mg=$B:KILN_NVRTC_DEFINES=$MG \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/abm -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$MG timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-mg.log 2>&1
echo "gate 1,2,5 (mg) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-mg.log | cut -c1-220 | tail -6 >> $S
cat $S
