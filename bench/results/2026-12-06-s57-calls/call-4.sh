#!/bin/bash
# Session 57 call 4 (run with PYTHONUNBUFFERED=1 ROUNDS=1 AB_BY=105 TRACE_BEFORE=0 and carry [".device/bin/kiln-s57.xz", ".device/kc57"]), on main's default (the 0.5B's down as the k2 GEMV at ring depth 8, 126
# registers, 7.2 MB in flight: +2.35% in session 57, down 4.90 -> 4.14 us for 8.7 MB, still 1.4 us over its bytes).
# Each k2 block's share of the down is 16 rows x 2432 inputs x 2 bytes = 77.8 KB = 9.5 ring slots of 256 threads x 32
# bytes, so at depth 10 a block has its whole share in flight before its wait (156 registers, no spills); depth 12 is
# 168 registers (its last two slots idle). Fewer blocks fit beside the down's (40 K registers a block at depth 10),
# so the A/B decides. And o took 0.6 us more beside the k2 down (1.60 -> 2.18 us): KILN_L2_PREFETCH=0 (plan time)
# drops o's planned L2 prefetch of the gate/up's first bytes, to see whether that is where it went.
#   1. greedy ids of the 0.5B: base / d10 / d12 / pf0 (the ring's depth and the prefetch change no value);
#   2. A/B of the four on the 0.5B, pads 0 / 32 / 64 / 1024, ROUNDS (default 2);
#   3. kiln gate --checks 1,2,5 at depth 10;
#   4. a block trace of the 0.5B at depth 10 (kernels built with KILN_TRACE=1).
# Carry: [".device/bin/kiln-s57.xz", ".device/kc57", ".device/kc57t"] (9e5129b; kc57 holds the caches of the define
# sets "", D10 and D12, kc57t the traced D10). ~200 s on a fresh machine.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s57.xz .device/kc57 > /tmp/prep.txt
D10=KILN_FUSED_K2_DEPTH=10,KILN_FUSED_K2_MAXNREG=168 D12=KILN_FUSED_K2_DEPTH=12,KILN_FUSED_K2_MAXNREG=168
for d in $D10 $D12; do echo "kernel cache .device/kc57 [$d]: $(KILN_NVRTC_DEFINES=$d timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached') of 2 modules cached" >> /tmp/prep.txt; done
B=$PWD/target/kiln
S=$OUT/s57-ab-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
for V in base d10 d12 pf0; do
  ( [ $V = d10 ] && export KILN_NVRTC_DEFINES=$D10; [ $V = d12 ] && export KILN_NVRTC_DEFINES=$D12; [ $V = pf0 ] && export KILN_L2_PREFETCH=0
    timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
    echo "$M ids $V rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12)" >> $S
    grep -a -i 'error\|panic' /tmp/ids.txt | head -3 >> $S )
done
echo "ids done at $(el) s" >> $S
timeout $((${AB_BY:-200} - $(el))) python3 scripts/ab_placement.py --arm base=$B --arm d10=$B:KILN_NVRTC_DEFINES=$D10 \
  --arm d12=$B:KILN_NVRTC_DEFINES=$D12 --arm pf0=$B:KILN_L2_PREFETCH=0 \
  --pads ${PADS:-0,32,64,1024} --rounds ${ROUNDS:-2} --timeout 30 --out /tmp/ab2 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "ab rc $? at $(el) s" >> $S
KILN_NVRTC_DEFINES=$D10 timeout 60 $B gate --checks 1,2,5 --synth-dir target/synth > $OUT/gate125-d10.log 2>&1
echo "gate 1,2,5 (d10) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate125-d10.log | cut -c1-220 | tail -6 >> $S
if [ $(el) -lt ${TRACE_BEFORE:-300} ]; then
  source scripts/device_prep.sh .device/bin/kiln-s57.xz .device/kc57t KILN_TRACE=1,$D10 >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-d10.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan $OUT/$M-d10.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M d10 rc $? at $(el) s" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-d10.plan.txt --csv $OUT/launches-$M-d10.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-d10.plan; gzip -f $OUT/launches-$M-d10.csv $OUT/$M-d10.plan.txt
fi
cat $S
