#!/bin/bash
# Session 37 call E. What the 37.5 MiB persisting L2 set-aside (no window) does to each decode kernel: Nsight Compute
# with the L2 left alone between kernels (--cache-control none), per-kernel time, DRAM bytes read and L2 read sectors,
# without (P0) and with (X) the set-aside, 1B then 8B (kiln-s37a: main 1083d57 + the KILN_L2_PERSIST knob).
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s37a
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc37
(cd .device/kc37 && xz -d -k -f *.xz)
S=$OUT/e-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; } > $S
el() { echo $(( $(date +%s) - T0 )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
IDS=$(seq -s, 1 128)
for M in llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
  for V in P0 X; do
    [ $(el) -gt 230 ] && { echo "skip $M $V at $(el) s" >> $S; continue; }
    E="KILN_L2_PERSIST=0"; [ $V = X ] && E="KILN_L2_PERSIST=max KILN_L2_PERSIST_OPS=no_such_launch"
    echo "== $M $V at $(el) s" >> $S
    env $E timeout 150 $NCU --clock-control none --cache-control none --csv --page details \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum \
      $B run --model $D --fuse --prompt-ids $IDS --max-tokens 4 --temperature 0 --burst 0 --prefill-buckets 128 \
      --max-context 512 --device cuda > $OUT/ncu-$M-$V.csv 2> $OUT/ncu-$M-$V.err
    echo "rc $? end $(el) s" >> $S
    grep -a 'L2 pers' $OUT/ncu-$M-$V.err | head -1 | cut -c1-160 >> $S
    python3 scripts/ncu_summary.py $OUT/ncu-$M-$V.csv --decode 4500 >> $S 2>&1
  done
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz ncu-*.csv ncu-*.err log-*.txt 2>/dev/null; rm -f ncu-*.csv ncu-*.err log-*.txt
cat $S
