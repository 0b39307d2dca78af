#!/bin/bash
# Session 50: one call instead of A + B, because starts failed four times this session and ate 630 s of the
# 1800 s. The decisive numbers first, each step bounded so that the whole ends inside 590 s:
#   1. part 1 of call-A.sh, rounds 1 (as built) and 4 (--no-mlp): kiln / noattn / fold / fold+o per layer;
#   2. call-B.sh's A/B in kiln's own decode (0.5B, batch 1, ctx 128 / 4096), KILN_FUSE_QKV_ATTN off / on, pads 0, 64;
#   3. call-B.sh's correctness steps with the knob, as time allows: kernel_check qkv_attention, greedy ids off/on,
#      `kiln gate --checks 2,3,5`.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc49", ".device/kcc49.tar.xz"] (as call-B.sh).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
mkdir -p target
xz -d -c .device/bin/kiln-s49.xz > target/kiln && chmod +x target/kiln; (cd .device/kc49 && xz -d -f *.xz 2>/dev/null)
tar -C /tmp -xJf .device/kcc49.tar.xz
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc49 KILN_CHECK_CACHE=/tmp/kcc49
S=$OUT/e-summary.txt; { date -u; target/kiln --version; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; } > $S
M=qwen2.5-0.5b
(timeout 100 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth.txt 2>&1) &
for round in 1 4; do
  A=""; [ $round = 4 ] && A=--no-mlp
  timeout 100 python3 scripts/probe_qkv_attn_fold.py $A > $OUT/qkv-fold-$round.txt 2>&1
  echo "qkv-in-attention probe round $round ($A) rc $? at $(el) s" >> $S
  grep -v "^ptxas" $OUT/qkv-fold-$round.txt >> $S
done
wait
echo "synth done at $(el) s" >> $S
timeout $(( 400 - $(el) )) python3 scripts/ab_placement.py --arm base=target/kiln --arm qkvattn=target/kiln:KILN_FUSE_QKV_ATTN=1 \
  --pads 0,64 --rounds 1 --timeout 60 --out /tmp/ab50 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "ab end rc $? at $(el) s" >> $S
if [ $(el) -lt 470 ]; then
  timeout $(( 560 - $(el) )) python3 scripts/kernel_check.py --only qkv_attention --dtypes bf16 > $OUT/check.txt 2>&1
  echo "kernel_check qkv_attention rc $? at $(el) s" >> $S; grep -a -E "qkv_attention|FAIL|compiled" $OUT/check.txt >> $S
fi
if [ $(el) -lt 500 ]; then
  for K in 0 1; do
    KILN_FUSE_QKV_ATTN=$K timeout 40 target/kiln run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) \
      --max-tokens 128 --temperature 0 --device cuda 2> $OUT/log-ids-$K.txt | md5sum | cut -c1-12 > /tmp/ids.txt
    echo "0.5B greedy ids, KILN_FUSE_QKV_ATTN=$K: $(cat /tmp/ids.txt) at $(el) s" >> $S
  done
fi
if [ $(el) -lt 400 ]; then
  KILN_FUSE_QKV_ATTN=1 timeout $(( 585 - $(el) )) target/kiln gate --checks 2,3,5 --hf-shapes $M --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate 2,3,5 with KILN_FUSE_QKV_ATTN=1 rc $? at $(el) s" >> $S; grep -a -E 'FAIL|qwen2-hd64|transformers|kiln gate:' $OUT/gate.log | cut -c1-220 >> $S
fi
(cd $OUT && tar -czf e-extra.tgz log-*.txt -C /tmp ab50 2>/dev/null; rm -f log-*.txt)
cat $S
