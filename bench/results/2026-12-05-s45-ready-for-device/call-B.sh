#!/bin/bash
# Written in session 45 (no device lent; never run): session 43's call A (updated in session 44) on session 45's
# binary, the second call of the next session (after call-A.sh): (1) which region's placement moves the 1B
# (a 64 MiB pad after each region, two allocation orders, the one-allocation layout KILN_ALLOC_SINGLE=1 in two
# orders, the 1024 MiB control; 1B alone, two rounds), (2) the device loop's copies per pass (KILN_LOOP_UNROLL
# 2 = default, 4, 8) A/B'd over pads with scripts/ab_placement.py, (3) `kiln gate` with the defaults (its new
# large-vocabulary model runs the argmax key of the fused loop on the GPU for the first time), if time is left.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc50"].
# (Session 49: the carried files are now session 49's, .device/bin/kiln-s49.xz of a81a15e and .device/kc50, which keep
# every knob this call sets; session 45's were removed. Lowest priority of the ready calls: after the s49 calls.)
# 2 id checks (~10 s each) + 20 + 12 runs of ~6-9 s + the gate (~60 s): ~420 s plus the start.
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s49.xz > target/kiln && chmod +x target/kiln; (cd .device/kc50 && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc50
S=$OUT/a-summary.txt; date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in llama3.2-1b qwen2.5-0.5b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 100 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
# The run path (session 44: planned within the GPU's free memory) and the one-allocation layout give the
# reference tokens (1B greedy ids md5 7b77fd2899f5, sessions 35-42).
for E in KILN_NONE=1 KILN_ALLOC_SINGLE=1; do
  env $E timeout 60 target/kiln run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $(seq -s, 1 128) \
    --max-tokens 128 --temperature 0 --device cuda 2> $OUT/log-ids-$E.txt | md5sum | cut -c1-12 > /tmp/ids.txt
  echo "ids $E: $(cat /tmp/ids.txt) (reference 7b77fd2899f5) at $(el) s; $(grep -a -m1 'region bases' $OUT/log-ids-$E.txt | cut -c1-160)" >> $S
done
M=llama3.2-1b
i=0
# after:<region> pads 64 MiB right after it (moves the regions allocated later: weights, state, step, output,
# arena in that order); order:<list> allocates those first; before:1024 is session 42's fast setting.
for C in after:none after:weights after:state after:step after:output order:step,output,arena,state,weights \
         order:weights,step,output,arena,state before:1024 single:1 single:step,output,arena,state,weights \
         after:none after:state after:output after:step after:weights \
         order:step,output,arena,state,weights order:weights,step,output,arena,state before:1024 \
         single:step,output,arena,state,weights single:1; do
  i=$((i+1))
  K=${C%%:*}; V=${C#*:}
  case $K in after) E="KILN_ALLOC_PAD_AFTER=$V:64";; order) E="KILN_ALLOC_ORDER=$V";; before) E="KILN_ALLOC_PAD_MB=$V";;
    single) E="KILN_ALLOC_SINGLE=1"; [ "$V" = 1 ] || E="KILN_ALLOC_SINGLE=1 KILN_ALLOC_ORDER=$V";; esac
  [ "$V" = none ] && E="KILN_NONE=1"
  env $E timeout 40 target/kiln bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b43a-$i > $OUT/bench-$i.txt 2>&1
  echo "$C rc $? at $(el) s: $(grep -a -E "^$M +1 " $OUT/bench-$i.txt | cut -c1-90) $(grep -a -m1 'region bases' $OUT/bench-$i.txt | cut -c1-200)" >> $S
done
echo "placement probe end $(el) s" >> $S
timeout $(( 500 - $(el) )) python3 scripts/ab_placement.py --arm u2=target/kiln --arm u4=target/kiln:KILN_LOOP_UNROLL=4 \
  --arm u8=target/kiln:KILN_LOOP_UNROLL=8 --pads 0,32,64,1024 --rounds 1 --timeout 60 --out /tmp/ab43a -- \
  --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab end $(el) s" >> $S
if [ $(el) -lt 500 ]; then
  timeout $(( 590 - $(el) )) target/kiln gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate (defaults) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
echo "end $(el) s" >> $S
cp /tmp/ab43a/*.log $OUT/ 2>/dev/null
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt run*.log 2>/dev/null; rm -f log-*.txt bench-*.txt run*.log
cat $S
