#!/bin/bash
# device_ab_define.sh NAME DEFINES BINARY_XZ CACHE_DIR: on a GPU machine (a device call), the A/B of a kernel define
# against the same binary's default kernels, as sessions 59-60 ran them: the 0.5B's greedy ids under both (an md5 of
# the printed ids; a same-bits define must give the same), scripts/ab_placement.py over the placements (PADS, ROUNDS,
# CTXS, SHAPE; AB_BY bounds it in seconds from the start), then `kiln gate --checks 1,2,5` with the define.
# CACHE_DIR must hold both kernel caches: scripts/device_cache.sh BINARY CACHE_DIR, then again with DEFINES.
# Writes $OUT/NAME-summary.txt and $OUT/gate125-NAME.log, and prints the summary.
#   bash scripts/device_ab_define.sh u1 KILN_QKV_ATTN_UNROLL=1 .device/bin/kiln-s60u.xz .device/kc60u
set -u
NAME=$1 DEF=$2 BIN=$3 KC=$4
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh "$BIN" "$KC" > /tmp/prep.txt
echo "kernel cache $KC [$DEF]: $(KILN_NVRTC_DEFINES=$DEF timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/$NAME-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=${SHAPE:-qwen2.5-0.5b} D=target/synth/${SHAPE:-qwen2.5-0.5b}-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base $NAME; do
  ( [ $V = $NAME ] && export KILN_NVRTC_DEFINES=$DEF
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm $NAME=$B:KILN_NVRTC_DEFINES=$DEF \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab-$NAME -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts ${CTXS:-128} --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$DEF timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-$NAME.log 2>&1
echo "gate 1,2,5 ($NAME) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-$NAME.log | cut -c1-220 | tail -6 >> $S
cat $S
