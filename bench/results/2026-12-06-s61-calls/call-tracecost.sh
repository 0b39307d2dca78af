#!/bin/bash
# Session 61: what the trace build's parts cost (its whole cost was ~12% of a 0.5B step in call-warm.sh). The same
# binary (e83bae9: KILN_TRACE_PHASE_STAMPS / KILN_TRACE_END_GUARD, trace builds only) untraced through kiln bench
# (scripts/ab_placement.py, one arm, pads 0 and 1024), then traced at context 128 three ways, two rounds
# (scripts/device_trace.sh; a trace's own "step us median" over its ~44 whole steps):
#   full     KILN_TRACE=1                                 the slot at the wait, phase stamps, end guard
#   nophase  + KILN_TRACE_PHASE_STAMPS=0                  the slot and the end guard
#   neither  + KILN_TRACE_END_GUARD=0                     the slot only
# Carry [".device/bin/kiln-s61t.xz", ".device/kc61t"] (scripts/device_cache.sh /tmp/kiln-s61t .device/kc61t with no
# defines and with each set above). ~90 s.
set -u
BIN=.device/bin/kiln-s61t.xz KC=.device/kc61t
S=$OUT/tracecost-summary.txt
source scripts/device_prep.sh $BIN $KC > /tmp/prep.txt
B=$PWD/target/kiln M=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
{ date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
timeout 60 python3 scripts/ab_placement.py --arm untraced=$B --pads 0,1024 --rounds 1 --timeout 30 --out /tmp/ab-u -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
for R in 1 2; do
  for V in full:KILN_TRACE=1 nophase:KILN_TRACE=1,KILN_TRACE_PHASE_STAMPS=0 \
           neither:KILN_TRACE=1,KILN_TRACE_PHASE_STAMPS=0,KILN_TRACE_END_GUARD=0; do
    N=${V%%:*}
    DEFINES=${V#*:} bash scripts/device_trace.sh $BIN $KC trace-$N-r$R-summary.txt $M:128 > /dev/null
    mv $OUT/$M-128.json $OUT/trace-$N-r$R-128.json 2>/dev/null
    echo "round $R $N: $(grep -a 'step us median' $OUT/trace-$N-r$R-summary.txt)" >> $S
  done
done
cat $S
