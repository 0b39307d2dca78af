#!/usr/bin/env python3
"""Per-kernel summary of an Nsight Compute CSV (`ncu --csv --page details --metrics
gpu__time_duration.sum,dram__bytes_read.sum ...`): kernels grouped by (name, grid, block), with
count, total and mean time and DRAM read rate, heaviest first.

Usage: python3 scripts/ncu_summary.py PROFILE.csv [TOP]   (bench/README.md, "Profiling")
"""
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None; data = collections.OrderedDict()
for r in rows:
    if r and r[0] == 'ID': hdr = r; continue
    if not hdr or len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    k = d['ID']
    e = data.setdefault(k, {'name': d['Kernel Name'][:70], 'grid': d['Grid Size'], 'block': d['Block Size']})
    try: e[d['Metric Name']] = float(d['Metric Value'].replace(',', ''))
    except: pass
seq = list(data.values())
print(f"{len(seq)} kernels profiled")
agg = collections.OrderedDict()
for e in seq:
    key = (e['name'], e['grid'], e['block'])
    a = agg.setdefault(key, [0, 0.0, 0.0])
    a[0] += 1; a[1] += e.get('gpu__time_duration.sum', 0); a[2] += e.get('dram__bytes_read.sum', 0)
tot = sum(a[1] for a in agg.values())
print(f"total kernel time {tot/1e3:.1f} us")
print(f"{'count':>5} {'total us':>10} {'mean us':>8} {'GB/s':>7}  kernel grid block")
for key, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:int(sys.argv[2]) if len(sys.argv) > 2 else 40]:
    bw = a[2] / a[1] if a[1] else 0  # bytes per ns = GB/s
    print(f"{a[0]:5d} {a[1]/1e3:10.1f} {a[1]/a[0]/1e3:8.2f} {bw:7.0f}  {key[0]} {key[1]} {key[2]}")
