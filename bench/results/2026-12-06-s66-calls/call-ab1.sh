#!/bin/bash
# Session 66, call 1 (an H100 or H200): plan-time knobs of one binary (s66a: one-block grids released before
# their wait, KILN_RELEASE_EARLY; more loop copies, KILN_LOOP_UNROLL) against its defaults, the 0.5B at batch 1,
# context 128. The greedy ids of every arm (the same bits: an md5 of the printed ids), scripts/ab_placement.py
# over pads 0 / 32 / 64 / 1024 (ROUNDS, default 2), then `kiln gate --checks 1,2,5` with KILN_RELEASE_EARLY=gather,norm.
# Carry: [".device/bin/kiln-s66a.xz", ".device/kc66a"].
set -u
BIN=${BIN:-.device/bin/kiln-s66a.xz} KC=${KC:-.device/kc66a}
source scripts/device_call_start.sh $BIN $KC qwen2.5-0.5b
M=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
ARMS=${ARMS:-"rel=KILN_RELEASE_EARLY=gather,norm norm=KILN_RELEASE_EARLY=norm u8=KILN_LOOP_UNROLL=8"}
for A in base $ARMS; do
  ( name=${A%%=*}; [ $name = base ] || export "${A#*=}"
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $name rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
args=(--arm base=$B)
for A in $ARMS; do args+=(--arm "${A%%=*}=$B:${A#*=}"); done
timeout $((${AB_BY:-330} - $(el))) python3 scripts/ab_placement.py "${args[@]}" --pads ${PADS:-0,32,64,1024} \
  --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab -- --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
  --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_RELEASE_EARLY=gather,norm timeout 90 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-rel.log 2>&1
echo "gate 1,2,5 (rel) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-rel.log | cut -c1-220 | tail -6 >> $S
cat $S
