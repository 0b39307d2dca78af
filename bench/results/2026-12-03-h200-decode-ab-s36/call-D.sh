#!/bin/bash
# Session 36 call D. Binary kiln-s36c (e0b901d). Why the 1B's step did not shrink with a 4 us shorter step end:
# SM / memory clocks, power and throttle reasons sampled every 50 ms (nvidia-smi) during kiln-only benches of the
# 1B and 0.5B with the argmax key (A1, default) and without (A0, KILN_FUSE_ARGMAX=0), two rounds each.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s36c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc36c
(cd .device/kc36c && xz -d -k -f *.xz)
S=$OUT/d-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
for R in 1 2; do
  for V in A0 A1; do
    for M in llama3.2-1b qwen2.5-0.5b; do
      [ $(el) -gt 500 ] && break
      A=${V:1:1}
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > $OUT/smi-$M-$V-$R.csv 2>/dev/null &
      P=$!
      KILN_FUSE_ARGMAX=$A timeout 120 $B bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 5 \
        --fuse --out /tmp/b36d-$M-$V-$R > $OUT/bench-$M-$V-$R.txt 2>&1
      kill $P
      echo "$M $V round $R end $(el) s: $(grep -a -E "^$M +1 " $OUT/bench-$M-$V-$R.txt | head -1)" >> $S
      python3 - $OUT/smi-$M-$V-$R.csv >> $S <<'PY'
import sys, statistics as st
rows=[l.split(', ') for l in open(sys.argv[1]) if l.count(',')>=5]
def num(x):
    try: return float(x.split()[0])
    except: return None
# samples under load: power above 250 W
load=[r for r in rows if num(r[3]) and num(r[3])>250]
if not load: print("  no loaded samples of", len(rows)); sys.exit()
sm=[num(r[1]) for r in load]; mem=[num(r[2]) for r in load]; pw=[num(r[3]) for r in load]; t=[num(r[4]) for r in load]
reasons={}
for r in load: reasons[r[5].strip()]=reasons.get(r[5].strip(),0)+1
print(f"  {len(load)}/{len(rows)} loaded samples: sm MHz median {st.median(sm):.0f} (min {min(sm):.0f} max {max(sm):.0f}), mem MHz {st.median(mem):.0f}, power W median {st.median(pw):.0f} (max {max(pw):.0f}), temp {st.median(t):.0f} C, throttle reasons {reasons}")
PY
    done
  done
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt smi-*.csv log-*.txt 2>/dev/null; rm -f bench-*.txt smi-*.csv log-*.txt
cat $S
