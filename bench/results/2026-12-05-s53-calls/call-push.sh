#!/bin/bash
# Session 53: KILN_QKV_ATTN_PUSH=1 (a -D, kernels/attention_qkv.cu, dd7a8db): the fused QKV-attention kernel's two
# cluster exchanges as st.async pushes completing the readers' mbarriers and a relaxed last barrier, so that none of
# the three GPU-scope fences ptxas puts in front of barrier.cluster.arrive.release stays on the chain (this
# session's ncu of the kernel: 10% of its warp-stall samples on those fences' ERRBAR). Steps:
#   1. kernel_check --only qkv_attention --dtypes bf16, the default and with the define;
#   2. greedy ids of the 0.5B (128-token prompt, 128 new tokens), the default and with the define: must match;
#   3. the A/B over pads 0 / 32 / 64 / 1024 (scripts/ab_placement.py), 0.5B, batch 1, contexts 128 and 4096;
#   4. kiln gate --checks 1,2,5 with the define (graph == eager, GPU == CPU, device loop == one step), if time is left.
# Carry: [".device/bin/kiln-s53.xz", ".device/kc53p", ".device/kcc53.tar.xz"] (dd7a8db's binary, kiln's cache with
# and without the define: scripts/device_cache.sh /tmp/kiln-s53 DIR [KILN_QKV_ATTN_PUSH=1], merged; kernel_check's
# CUBINs for both, built with --compile-only). ~20 s synth + ~30 s checks + ~20 s ids + 16 x ~5 s + gate ~60 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s53.xz} ${KC:-.device/kc53p} > /tmp/prep.txt
B=target/kiln M=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
PUSH=KILN_QKV_ATTN_PUSH=1
S=$OUT/push-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
tar -C /tmp -xJf .device/kcc53.tar.xz && export KILN_CHECK_CACHE=/tmp/kcc53
for V in base push; do
  DEF=""; [ $V = push ] && DEF="--define $PUSH"
  timeout 120 python3 scripts/kernel_check.py --only qkv_attention --dtypes bf16 $DEF > $OUT/check-$V.txt 2>&1
  echo "kernel_check $V rc $? at $(el) s: $(grep -a -c PASS $OUT/check-$V.txt) PASS, $(grep -a -c FAIL $OUT/check-$V.txt) FAIL, $(grep -a -c -i 'compil' $OUT/check-$V.txt) compile lines" >> $S
done
[ -f $D/config.json ] || timeout 100 $B synth --shape $M --seed 1 --out $D > $OUT/log-synth.txt 2>&1
for V in base push; do
  DEF=""; [ $V = push ] && DEF=$PUSH
  KILN_NVRTC_DEFINES=$DEF timeout 90 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 128 --temperature 0 \
    --device cuda > /tmp/ids-$V.txt 2>&1
  echo "ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids-$V.txt | md5sum | cut -c1-12) at $(el) s" >> $S
done
grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids-push.txt | head -c 300 > $OUT/ids-push-head.txt
timeout $(( ${LIMIT:-420} - $(el) )) python3 scripts/ab_placement.py --arm base=$B --arm push=$B:KILN_NVRTC_DEFINES=$PUSH \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 60 --out /tmp/abp -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "ab end rc $? at $(el) s" >> $S
if [ $(el) -lt ${GATE_BEFORE:-480} ]; then
  KILN_NVRTC_DEFINES=$PUSH timeout $(( 590 - $(el) )) $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate-push.log 2>&1
  echo "gate 1,2,5 with $PUSH rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate-push.log | cut -c1-220 | tail -8 >> $S
fi
cd /tmp && tar czf $OUT/push-logs.tgz abp/*.log ids-*.txt 2>/dev/null
cat $S
