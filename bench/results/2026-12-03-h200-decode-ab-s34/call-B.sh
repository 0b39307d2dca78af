#!/bin/bash
# Session 34 call B. Binary kiln-s34b (main 1975d4b: the early residual by default, and fusion rewrite 8,
# sample_advance, by default). Variants: F1 = default; F0 = KILN_FUSE_SAMPLE_ADVANCE=0 (sample -> advance, two launches);
# E0 = F1 with KILN_NVRTC_DEFINES=KILN_FUSED_EARLY_RESIDUAL=0 (bit check of the early residual on fused plans).
# 1. ids on fused plans: F1 vs F0 vs E0 greedy (must be identical), F1 vs F0 sampled (T 0.8, top-k 40, seed 5);
# 2. kiln-only A/B F0 / F1, two rounds; 3. kiln gate (default); 4. the issue's official command on the better
# of F0 / F1 (by the sum of tok/s ratios over the three shapes); 5. the 1B's trace if time is left.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s34b
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for d in kc34s kc34s0; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
var() {  # var NAME -> sets CD, E
  case $1 in
    F1) CD=kc34s; E="KILN_X=0" ;;
    F0) CD=kc34s; E="KILN_FUSE_SAMPLE_ADVANCE=0" ;;
    E0) CD=kc34s0; E="KILN_NVRTC_DEFINES=KILN_FUSED_EARLY_RESIDUAL=0" ;;
  esac
}
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  for V in F1 F0 E0 F1s F0s; do
    var ${V%s}
    if [ $V = ${V%s} ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 45 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal\|compil' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  for P in F1:F0 F1:E0 F1s:F0s; do
    a=${P%:*}; b=${P#*:}
    cmp -s /tmp/ids-$M-$a.txt /tmp/ids-$M-$b.txt && echo "IDENTICAL $a $b $M" >> $S || echo "DIFFER $a $b $M" >> $S
  done
done
ab() {  # ab ROUND
  for V in F0 F1; do
    var $V
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b34b-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1
ab 2
# The better variant: sum over shapes and rounds of F1 / F0 tok/s.
SCORE=$(python3 - $OUT <<'PY'
import re, sys, glob
out = sys.argv[1]
tok = {}
for f in glob.glob(out + "/bench-F*-*.txt"):
    v = f.split("bench-")[1].split("-")[0]
    for line in open(f, errors="replace"):
        m = re.match(r"^(qwen\S*|llama\S*)\s+1\s+128\s+([\d.]+)", line)
        if m: tok.setdefault((v, m.group(1)), []).append(float(m.group(2)))
s = sum(sum(tok[("F1", k)]) / sum(tok[("F0", k)]) for (v, k) in tok if v == "F1" and ("F0", k) in tok)
print(f"{s:.4f}")
PY
)
echo "score (sum over shapes of F1/F0) $SCORE" >> $S
if python3 -c "import sys; sys.exit(0 if float('$SCORE') >= 3.0 else 1)"; then WIN=F1; else WIN=F0; fi
echo "winner $WIN" >> $S
echo "== gate (default, F1) start $(el) s" >> $S
KILN_CACHE_DIR=$PWD/.device/kc34s timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S; tail -2 $OUT/gate.log >> $S
var $WIN
R=2026-12-03-h200-decode-$KILN_COMMIT
echo "== official ($WIN: $E) start $(el) s" >> $S
env $E KILN_CACHE_DIR=$PWD/.device/$CD KILN_COMMIT=$KILN_COMMIT timeout 330 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
if [ $(el) -lt 560 ]; then
  M=llama3.2-1b; D=target/synth/$M-seed1
  echo "== trace $M $WIN at $(el) s" >> $S
  env $E $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$WIN.plan >> $OUT/log-$M.txt 2>&1
  env $E KILN_CACHE_DIR=$PWD/.device/kc34s KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 30 $B run --model $D --plan $OUT/$M-$WIN.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$WIN.plan.txt --csv $OUT/launches-$M-$WIN.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$WIN.plan
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt official.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
