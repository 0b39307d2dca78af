#!/bin/bash
# Session 31 call C (binary of $KILN_COMMIT: decode fused_linear GEMVs of tiles <= 128 KiB, the o projections,
# take the register-capped `_rc` variant). A/B at batch 1, context 128, two rounds interleaved:
#   X = KILN_GEMV_CAP=0 (78123ed's plans) | N = the default (o capped).
# Pre-stated rule: N becomes the default, and the issue's command and kiln gate run on it in this call, only if
# N's median over the rounds beats X's on the 8B and is not more than 0.3% below X's on the 0.5B and the 1B.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s31d
export KILN_CACHE_DIR=$PWD/.device/kc31d KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc31d && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
for r in 1 2; do
  for V in X N; do
    case $V in X) E="KILN_GEMV_CAP=0" ;; N) E="KILN_X=0" ;; esac
    echo "-- $V round $r ($E) start $(el) s" >> $S
    env $E timeout 100 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b31-$V-$r > $OUT/bench-$V-$r.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$r.txt | head -8 >> $S
  done
done
python3 - "$OUT" >> $S 2>&1 <<'PY'
import glob, re, statistics, sys
out = sys.argv[1]
med = {}
for v in "XN":
    for f in sorted(glob.glob(f"{out}/bench-{v}-*.txt")):
        for line in open(f, errors="replace"):
            m = re.match(r"^(qwen\S*|llama\S*)\s+1\s+128\s+([\d.]+)", line)
            if m:
                med.setdefault((v, m.group(1)), []).append(float(m.group(2)))
ok = True
for s in ["qwen2.5-0.5b", "llama3.2-1b", "llama3.1-8b"]:
    x, n = statistics.median(med[("X", s)]), statistics.median(med[("N", s)])
    print(f"{s}: X {med[('X', s)]} median {x:.1f} | N {med[('N', s)]} median {n:.1f} | N/X {n / x:.4f}")
    ok &= (n > x) if s == "llama3.1-8b" else (n >= 0.997 * x)
print("RULE", "N wins" if ok else "N does not win")
open("/tmp/rule", "w").write("1" if ok else "0")
PY
if [ "$(cat /tmp/rule 2>/dev/null)" = 1 ]; then
  R=2026-12-03-h200-decode-$KILN_COMMIT
  echo "== official start $(el) s" >> $S
  timeout 330 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
    --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
    --out $OUT/$R > $OUT/official.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -4 >> $S
  echo "== gate start $(el) s" >> $S
  timeout 120 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; tail -2 $OUT/gate.log >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt official.txt log-*.txt 2>/dev/null; rm -f bench-*.txt log-*.txt official.txt
cat $S
