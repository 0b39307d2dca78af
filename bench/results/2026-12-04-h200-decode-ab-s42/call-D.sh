#!/bin/bash
# Session 42 call D: the SASS of kiln_sample_advance_f32 in main's (a) and y's (sample_advance's carry code, its
# table and row null) tile-packed cubins: cuobjdump -sass / -res-usage, to find what makes y's 1B +0.6% (call C).
set -u
for v in a y; do (cd .device/kc42$v && xz -d -f *.xz); done
S=$OUT/d-summary.txt; date -u > $S
which cuobjdump nvdisasm >> $S 2>&1
for v in a y; do
  for f in .device/kc42$v/*.cubin; do
    if cuobjdump -res-usage $f 2>/dev/null | grep -q kiln_sample_advance_f32; then
      cuobjdump -res-usage $f 2>&1 | grep -A1 "sample_advance_f32\|kiln_gather_bf16\|kiln_advance" > $OUT/res-$v.txt
      cuobjdump -sass -fun kiln_sample_advance_f32 $f > $OUT/sass-sa-$v.txt 2>&1
      cuobjdump -sass -fun kiln_gather_bf16 $f > $OUT/sass-gather-$v.txt 2>&1
      echo "$v $f: $(wc -l < $OUT/sass-sa-$v.txt) SASS lines" >> $S
      md5sum $f >> $S
    fi
  done
done
diff <(sed 's/\/\*[0-9a-f]*\*\///; s/;.*//' $OUT/sass-gather-a.txt) <(sed 's/\/\*[0-9a-f]*\*\///; s/;.*//' $OUT/sass-gather-y.txt) | head -5 >> $S
cat $OUT/res-a.txt $OUT/res-y.txt >> $S
# Every function's SASS (addresses and encodings stripped), hashed: which functions differ between a and y.
for v in a y; do
  f=$(grep "^$v " $S | sed 's/^[ay] \(.*\): .*/\1/')
  timeout 200 cuobjdump -sass $f | python3 -c '
import sys, hashlib, re
name, buf, out = None, [], {}
def flush():
    if name: out[name] = (hashlib.md5("".join(buf).encode()).hexdigest()[:10], len(buf))
for line in sys.stdin:
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        flush(); name, buf = m.group(1), []
        continue
    buf.append(re.sub(r"/\*[0-9a-f]{4}\*/|/\* 0x[0-9a-f]+ \*/", "", line).strip() + "\n")
flush()
for k in sorted(out): print(k, *out[k])
' > $OUT/fun-$v.txt
done
join $OUT/fun-a.txt $OUT/fun-y.txt | awk '$2 != $4 {print "differs:", $1, $3, $5}' >> $S
echo "functions: $(wc -l < $OUT/fun-a.txt) / $(wc -l < $OUT/fun-y.txt)" >> $S
cat $S
