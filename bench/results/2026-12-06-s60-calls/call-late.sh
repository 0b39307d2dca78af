#!/bin/bash
# Session 60: the o projection's entry letting its dependents launch only after its wait (KILN_RES_LATE_TRIGGER=1,
# acc9132; a compile-time define) against main's trigger right after its first weight loads: greedy ids, the 0.5B
# A/B over four placements, kiln gate 1,2,5 with the define. Carry [".device/bin/kiln-s60r.xz", ".device/kc60r"]
# (scripts/device_cache.sh /tmp/kiln-s60r .device/kc60r, then again with KILN_RES_LATE_TRIGGER=1). ~100 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
LT=KILN_RES_LATE_TRIGGER=1
source scripts/device_prep.sh .device/bin/kiln-s60r.xz .device/kc60r > /tmp/prep.txt
echo "kernel cache .device/kc60r [$LT]: $(KILN_NVRTC_DEFINES=$LT timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s60-late-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base late; do
  ( [ $V = late ] && export KILN_NVRTC_DEFINES=$LT
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm late=$B:KILN_NVRTC_DEFINES=$LT \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/abl -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$LT timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-late.log 2>&1
echo "gate 1,2,5 (late) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-late.log | cut -c1-220 | tail -6 >> $S
cat $S
