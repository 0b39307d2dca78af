#!/bin/bash
# Written in session 55 for the next session (not run: the device was paused after call 1). On b8e2256 (ba4c0e9's kernels)
# (.device/bin/kiln-s55k.xz: the GEMV-only entries on by default since 49107f3) and two knobs built, not measured:
#   ropeg: KILN_QKV_ROPE_GEMV_ENTRY=1 (run time), the 1B's / 8B's decode QKV-RoPE through kiln_qkv_rope_gemv_*
#          (2792 / 2856 SASS instructions against 7528 / 6768);
#   k2:    KILN_GEMV_K2=1 (plan time), the 0.5B's down through kiln_fused_linear_res_k2_* (112 blocks of 256
#          threads in clusters of two, 96 registers, instead of 56 of 512: room beside gate/up and the attention).
# Both keep the bits: the greedy ids must match the defaults'.
#   1. greedy ids: 0.5B base / k2, 1B base / ropeg; kernel_check.py --only entries (res, k2 and gated GEMV-only
#      entries against the general kernels, bitwise);
#   2. A/B base / ropeg / k2 on the 0.5B and 1B, pads 0 / 32 / 64 / 1024, ROUNDS (default 2);
#   3. kiln gate --checks 1,2,5 with both knobs, if time is left;
#   4. block traces of the 0.5B, defaults and k2 (kernels built with KILN_TRACE=1), if time is left.
# ~500 s on a fresh machine. Carry: [".device/bin/kiln-s55k.xz", ".device/kc55k", ".device/kc55kt", ".device/kcc55.tar.xz"].
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s55k.xz .device/kc55k > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s55-2-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
done
for MV in qwen2.5-0.5b:base qwen2.5-0.5b:k2 llama3.2-1b:base llama3.2-1b:ropeg; do
  M=${MV%%:*} V=${MV##*:}
  ( [ $V = ropeg ] && export KILN_QKV_ROPE_GEMV_ENTRY=1; [ $V = k2 ] && export KILN_GEMV_K2=1
    timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 \
      --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
# The entry points against the kernels they stand for, bitwise (kernel_check.py `entries`; its CUBIN prebuilt on the
# CPU machine: KILN_CHECK_CACHE).
mkdir -p /tmp/kcc55 && tar -C /tmp/kcc55 -xJf .device/kcc55.tar.xz
KILN_CHECK_CACHE=/tmp/kcc55 timeout 120 python3 scripts/kernel_check.py --only entries --dtypes f16,bf16 > $OUT/check-entries.txt 2>&1
echo "kernel_check entries rc $? at $(el) s: $(tail -1 $OUT/check-entries.txt)" >> $S
grep -a -E 'FAIL' $OUT/check-entries.txt | head -8 >> $S
timeout $((${AB_BY:-260} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm ropeg=$B:KILN_QKV_ROPE_GEMV_ENTRY=1 \
  --arm k2=$B:KILN_GEMV_K2=1 --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab2 -- \
  --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt ${GATE_BEFORE:-330} ]; then
  KILN_QKV_ROPE_GEMV_ENTRY=1 KILN_GEMV_K2=1 timeout $((${GATE_BY:-480} - $(el))) $B gate --checks 1,2,5 --synth-dir target/synth \
    > $OUT/gate125-knobs.log 2>&1
  echo "gate 1,2,5 (both knobs) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-knobs.log | cut -c1-220 | tail -6 >> $S
fi
if [ $(el) -lt ${TRACE_BEFORE:-500} ]; then
  source scripts/device_prep.sh .device/bin/kiln-s55k.xz .device/kc55kt KILN_TRACE=1 >> $S
  N=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
  for K in 0 1; do
    KILN_GEMV_K2=$K $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N-k2$K.plan > /dev/null 2>&1
    KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan $OUT/$N-k2$K.plan --prompt-ids $(seq -s, 1 128) \
      --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "trace $N KILN_GEMV_K2=$K rc $? at $(el) s" >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N-k2$K.plan.txt --csv $OUT/launches-$N-k2$K.csv >> $S 2>&1
    rm -f /tmp/trace.bin $OUT/$N-k2$K.plan; gzip -f $OUT/launches-$N-k2$K.csv
    [ $(el) -lt 540 ] || break
  done
fi
cat $S
