#!/bin/bash
# Session 53, last call: 6a9b8af, where both cluster kernels exchange through st.async pushes by default
# (KILN_QKV_ATTN_PUSH=1, measured +5.35% on the 0.5B by call-push.sh; KILN_ATTN_CLUSTER_PUSH=1, the 1B / 8B
# attention's merge, not measured before this call). In order of what must not be lost:
#   1. kernel_check --only attention_split,qkv_attention --dtypes bf16 (the defaults);
#   2. kiln gate --checks 1,2,5 (graph == eager, GPU == CPU, device loop == one step);
#   3. the issue's official command (~320 s);
#   (SKIP_OFFICIAL=1: not step 3, for a short call; PADS= and ROUNDS= set step 4's A/B)
#   4. greedy ids of the 1B with KILN_ATTN_CLUSTER_PUSH 1 / 0 and the A/B over pads, if time is left.
# (Session 53 ran it on 6a9b8af's binary; kiln-s53c.xz and its caches were then rebuilt for fde97e2, the same
# kernels with corrected comments, for the next session's SKIP_OFFICIAL=1 run.)
# Carry: [".device/bin/kiln-s53c.xz", ".device/kc53e", ".device/kcc53e.tar.xz"] (kc53e: the defaults and
# KILN_ATTN_CLUSTER_PUSH=0; kcc53e: kernel_check's CUBIN of the defaults).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s53c.xz} ${KC:-.device/kc53e} > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/final-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
tar -C /tmp -xJf .device/kcc53e.tar.xz && export KILN_CHECK_CACHE=/tmp/kcc53e
timeout 100 python3 scripts/kernel_check.py --only attention_split,qkv_attention --dtypes bf16 > $OUT/check.txt 2>&1
echo "kernel_check rc $? at $(el) s: $(grep -a -c PASS $OUT/check.txt) PASS, $(grep -a -c FAIL $OUT/check.txt) FAIL" >> $S
grep -a FAIL $OUT/check.txt | head -5 >> $S
timeout 120 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125.log 2>&1
echo "gate 1,2,5 rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125.log | cut -c1-220 | tail -6 >> $S
for M in $([ -z "${SKIP_OFFICIAL:-}" ] && echo qwen2.5-0.5b) llama3.2-1b $([ -z "${SKIP_OFFICIAL:-}" ] && echo llama3.1-8b); do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
R=2026-12-05-$G-decode-$C
[ -z "${SKIP_OFFICIAL:-}" ] && timeout $((580 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth \
  --prompt 128 --new-tokens 256 --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first \
  --torch-modes eager,compile --torch-repeats 3 --out $OUT/$R > $OUT/official.txt 2>&1
echo "official rc $? at $(el) s${SKIP_OFFICIAL:+ (skipped: SKIP_OFFICIAL)}" >> $S
grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -5 >> $S
if [ $(el) -lt 520 ]; then
  for V in 1 0; do
    KILN_NVRTC_DEFINES=$([ $V = 0 ] && echo KILN_ATTN_CLUSTER_PUSH=0) timeout 30 $B run --model target/synth/llama3.2-1b-seed1 --fuse \
      --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids-$V.txt 2>&1
    echo "1B ids push=$V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids-$V.txt | md5sum | cut -c1-12)" >> $S
  done
  timeout $((590 - $(el))) python3 scripts/ab_placement.py --arm push=$B --arm nopush=$B:KILN_NVRTC_DEFINES=KILN_ATTN_CLUSTER_PUSH=0 \
    --pads ${PADS:-0,1024} --rounds ${ROUNDS:-1} --timeout 30 --out /tmp/abf -- --shapes llama3.2-1b --synth-root target/synth --batches 1 \
    --contexts 128 --repeats 3 --fuse >> $S 2>&1
  echo "ab rc $? at $(el) s" >> $S
fi
cat $S
