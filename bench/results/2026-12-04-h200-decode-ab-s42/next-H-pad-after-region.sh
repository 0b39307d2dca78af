#!/bin/bash
# Written for session 42's call H (refused for lack of device time; never run): which region's move matters?
# Binary r = branch s42-pad (probe-alloc-pad.patch) with KILN_ALLOC_PAD_AFTER=<region>:<MiB>: a 64 MiB pad right
# after that region moves every region allocated after it (weights, state, step, output, arena in that order);
# KILN_ALLOC_ORDER=<regions> allocates them in another order. ~20 runs of ~6 s: ~130 s plus the start.
# Carry: the binary xz as .device/bin/kiln-s42r.xz and main's cubins (both modules) as .device/kc42a.
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s42r.xz > target/kiln-s42r && chmod +x target/kiln-s42r; (cd .device/kc42a && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc42a
S=$OUT/h-summary.txt; date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
M=llama3.2-1b
[ -f target/synth/$M-seed1/config.json ] || timeout 100 target/kiln-s42r synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
echo "synth ready at $(el) s" >> $S
i=0
# after:<region> pads 64 MiB after it; order:<list> allocates the regions in that order (KILN_ALLOC_ORDER);
# before:1024 is calls F-G's fast setting, as a control.
for C in after:none after:weights after:state after:step after:output order:step,output,arena,state,weights \
         order:weights,step,output,arena,state before:1024 after:none after:state after:output after:step after:weights \
         order:step,output,arena,state,weights order:weights,step,output,arena,state before:1024; do
  i=$((i+1))
  K=${C%%:*}; V=${C#*:}
  case $K in after) E="KILN_ALLOC_PAD_AFTER=$V:64";; order) E="KILN_ALLOC_ORDER=$V";; before) E="KILN_ALLOC_PAD_MB=$V";; esac
  env $E timeout 30 target/kiln-s42r bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42h-$i > $OUT/bench-$i.txt 2>&1
  echo "$C rc $? at $(el) s: $(grep -a -E "^$M +1 " $OUT/bench-$i.txt | cut -c1-90) $(grep -a -m1 'region bases' $OUT/bench-$i.txt | cut -c1-130)" >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
