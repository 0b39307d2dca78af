#!/bin/bash
# Session 33 call A: the decode attention's blocks prefetch into the L2 the next launches' weights
# (KILN_ATTN_L2PF=<bytes of the o projection's weights>, KILN_ATTN_L2PF2=<bytes of gate/up's>), after their wait.
# 1. greedy ids default vs prefetch (must be identical); 2. kiln-only A/B, two rounds; 3. block traces.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s33
export KILN_CACHE_DIR=$PWD/.device/kc33 KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc33 && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
BIG=1099511627776
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  for V in 0 1; do
    if [ $V = 1 ]; then E="KILN_ATTN_L2PF=$BIG KILN_ATTN_L2PF2=16777216"; else E="KILN_X=0"; fi
    env $E timeout 45 $B run --model $D --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M pf=$V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|tok/s' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  if cmp -s /tmp/ids-$M-0.txt /tmp/ids-$M-1.txt; then echo "IDENTICAL $M" >> $S; else
    echo "DIFFER $M: stopping" >> $S; cat $S; exit 1; fi
done
ab() {  # ab ROUND LIMIT
  for V in A O O8 O24 P4; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    case $V in
      A) E="KILN_X=0" ;;
      O) E="KILN_ATTN_L2PF=$BIG" ;;
      O8) E="KILN_ATTN_L2PF=$BIG KILN_ATTN_L2PF2=8388608" ;;
      O24) E="KILN_ATTN_L2PF=$BIG KILN_ATTN_L2PF2=25165824" ;;
      P4) E="KILN_ATTN_L2PF=4194304" ;;
    esac
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b33a-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 260
ab 2 400
for MV in llama3.2-1b:0 llama3.2-1b:1 qwen2.5-0.5b:1; do
  M=${MV%:*}; V=${MV#*:}
  [ $(el) -gt 470 ] && break
  if [ $V = 1 ]; then E="KILN_ATTN_L2PF=$BIG"; else E="KILN_X=0"; fi
  D=target/synth/$M-seed1
  echo "== trace $M pf=$V at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  env $E KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-$V.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
