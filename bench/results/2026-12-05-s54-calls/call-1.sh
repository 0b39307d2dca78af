#!/bin/bash
# Session 54, first call, on fde97e2 (6a9b8af's kernels with corrected comments; both cluster pushes on by default):
#   1. the full `kiln gate` (38 checks; the pushes have passed only checks 1, 2, 5 so far);
#   2. the 1B's greedy ids and A/B of KILN_ATTN_CLUSTER_PUSH 1 vs 0 (the decode attention's merge), four pads x two
#      rounds (session 53 ran out of time for it); if it loses, its default goes back to 0;
#   3. a block trace of the 0.5B with the pushes (kernels built with KILN_TRACE=1), summed per launch role.
# Carry: [".device/bin/kiln-s53c.xz", ".device/kc53e", ".device/kc53t"] (~350 s on an H200 plus synth).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s53c.xz .device/kc53e > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s54-1-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
timeout 240 $B gate --synth-dir target/synth > $OUT/2026-12-05-$G-gate-$C.log 2>&1
echo "gate (all checks) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/2026-12-05-$G-gate-$C.log | tail -6 >> $S
[ -f target/synth/llama3.2-1b-seed1/config.json ] || timeout 120 $B synth --shape llama3.2-1b --seed 1 --out target/synth/llama3.2-1b-seed1 > /dev/null 2>&1
for V in 1 0; do
  KILN_NVRTC_DEFINES=$([ $V = 0 ] && echo KILN_ATTN_CLUSTER_PUSH=0) timeout 30 $B run --model target/synth/llama3.2-1b-seed1 --fuse \
    --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids-$V.txt 2>&1
  echo "1B ids push=$V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids-$V.txt | md5sum | cut -c1-12)" >> $S
done
timeout $((500 - $(el))) python3 scripts/ab_placement.py --arm push=$B --arm nopush=$B:KILN_NVRTC_DEFINES=KILN_ATTN_CLUSTER_PUSH=0 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab1 -- --shapes llama3.2-1b --synth-root target/synth \
  --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
if [ $(el) -lt 520 ]; then
  source scripts/device_prep.sh .device/bin/kiln-s53c.xz .device/kc53t KILN_TRACE=1 >> $S
  M=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1 N=qwen2.5-0.5b-push
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$N.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace rc $? ids $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/traced.txt | md5sum | cut -c1-12) at $(el) s" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan; gzip -f $OUT/launches-$N.csv $OUT/$N.plan.txt
fi
echo "end $(el) s" >> $S
cat $S
