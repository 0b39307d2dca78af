#!/bin/bash
# Written in session 55 for the next session (not run: the device was paused after call 1). On the commit of
# .device/bin/kiln-s55r.xz (the GEMV-only entries on by default; kiln_qkv_rope_gemv_* behind
# KILN_QKV_ROPE_GEMV_ENTRY=1: 2792 / 2856 SASS instructions against 7528 / 6768 for the 1B's / 8B's decode QKV-RoPE):
#   1. greedy ids of the 1B: defaults and KILN_QKV_ROPE_GEMV_ENTRY=1 (must match);
#   2. A/B base / ropeg (KILN_QKV_ROPE_GEMV_ENTRY=1) on the 1B, pads 0 / 32 / 64 / 1024, ROUNDS (default 2);
#   3. kiln gate --checks 1,2,5 with KILN_QKV_ROPE_GEMV_ENTRY=1, if time is left;
#   4. a block trace of the 0.5B on the defaults (kernels built with KILN_TRACE=1), if time is left.
# Both A/B arms run one cubin (the knob picks symbols at run time). ~400 s on a fresh machine.
# Carry: [".device/bin/kiln-s55r.xz", ".device/kc55r", ".device/kc55rt"].
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s55r.xz .device/kc55r > /tmp/prep.txt
B=$PWD/target/kiln M=llama3.2-1b
S=$OUT/s55-2-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
[ -f target/synth/$M-seed1/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
for V in base ropeg; do
  ( [ $V = ropeg ] && export KILN_QKV_ROPE_GEMV_ENTRY=1
    timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 \
      --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm ropeg=$B:KILN_QKV_ROPE_GEMV_ENTRY=1 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab2 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt ${GATE_BEFORE:-300} ]; then
  KILN_QKV_ROPE_GEMV_ENTRY=1 timeout $((${GATE_BY:-480} - $(el))) $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-ropeg.log 2>&1
  echo "gate 1,2,5 (KILN_QKV_ROPE_GEMV_ENTRY=1) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-ropeg.log | cut -c1-220 | tail -6 >> $S
fi
if [ $(el) -lt ${TRACE_BEFORE:-500} ]; then
  source scripts/device_prep.sh .device/bin/kiln-s55r.xz .device/kc55rt KILN_TRACE=1 >> $S
  N=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
  [ -f $D/config.json ] || timeout 60 $B synth --shape $N --seed 1 --out $D > /dev/null 2>&1
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$N.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $N rc $? at $(el) s" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan; gzip -f $OUT/launches-$N.csv
fi
cat $S
