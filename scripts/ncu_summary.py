#!/usr/bin/env python3
"""Per-kernel summary of an Nsight Compute CSV (`ncu --csv --page details --metrics
gpu__time_duration.sum,dram__bytes_read.sum ...`): kernels grouped by (name, grid, block), with
count, total and mean time and DRAM read rate, heaviest first.

With `--decode GBPS` instead: the decode steps of a `kiln run --fuse` profile (every kernel after
the prefill's logits GEMV), by role in the layer (qkv_rope, attention, o-proj, gate/up, down:
a fused_linear right after the gate/up is the down projection, any other the o projection),
with mean time, DRAM bytes read, their fraction of GBPS (a read bandwidth, e.g. `kiln bench`'s)
and the isolated time per decode step.

Usage: python3 scripts/ncu_summary.py PROFILE.csv [TOP]   (bench/README.md, "Profiling")
       python3 scripts/ncu_summary.py PROFILE.csv --decode GBPS
"""
import csv, sys, collections


def load(path):
    """Kernels in launch (ID) order, each {name, grid, block, metric: value}."""
    hdr = None
    data = collections.OrderedDict()
    for r in csv.reader(open(path)):
        if r and r[0] == 'ID':
            hdr = r
            continue
        if not hdr or len(r) != len(hdr):
            continue
        d = dict(zip(hdr, r))
        e = data.setdefault(d['ID'], {'name': d['Kernel Name'][:70], 'grid': d['Grid Size'], 'block': d['Block Size']})
        try:
            e[d['Metric Name']] = float(d['Metric Value'].replace(',', ''))
        except ValueError:
            pass
    return [data[k] for k in sorted(data, key=int)]


def summary(seq, top):
    print(f"{len(seq)} kernels profiled")
    agg = collections.OrderedDict()
    for e in seq:
        a = agg.setdefault((e['name'], e['grid'], e['block']), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += e.get('gpu__time_duration.sum', 0)
        a[2] += e.get('dram__bytes_read.sum', 0)
    tot = sum(a[1] for a in agg.values())
    print(f"total kernel time {tot/1e3:.1f} us")
    print(f"{'count':>5} {'total us':>10} {'mean us':>8} {'GB/s':>7}  kernel grid block")
    for key, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        bw = a[2] / a[1] if a[1] else 0  # bytes per ns = GB/s
        print(f"{a[0]:5d} {a[1]/1e3:10.1f} {a[1]/a[0]/1e3:8.2f} {bw:7.0f}  {key[0]} {key[1]} {key[2]}")


def is_logits(name):
    """The output projection: `kiln_linear_{dt}_f32` (its `_o3` variant too)."""
    return name.startswith('kiln_linear_') and '_f32' in name[len('kiln_linear_'):]


def decode_roles(seq, gbps):
    first = next(i for i, e in enumerate(seq) if is_logits(e['name']))
    roles = collections.OrderedDict()
    prev = None
    for e in seq[first + 1:]:
        n = e['name']
        if 'qkv' in n:
            role = 'qkv_rope' if 'qkv_rope' in n else 'qkv'
        elif 'attention' in n:
            role = 'attention'
        elif 'gated' in n:
            role = 'gate/up'
        elif 'fused_linear' in n:
            role = 'down' if prev == 'gate/up' else 'o-proj'
        elif is_logits(n):
            role = 'logits'
        else:
            role = n.split('(')[0].replace('kiln_', '')
        roles.setdefault(role, []).append((e.get('gpu__time_duration.sum', 0) / 1e3, e.get('dram__bytes_read.sum', 0) / 1e6))
        prev = role
    steps = len(roles.get('logits', [])) or 1
    print(f"decode steps: {steps}; fraction = DRAM bytes read / time / {gbps:.0f} GB/s")
    print(f"{'role':<16}{'calls':>6}{'mean us':>9}{'MB read':>9}{'fraction':>9}{'us/step':>9}")
    total = 0.0
    for role, v in roles.items():
        t = sum(x for x, _ in v) / len(v)
        mb = sum(b for _, b in v) / len(v)
        per = sum(x for x, _ in v) / steps
        total += per
        print(f"{role:<16}{len(v):>6}{t:>9.2f}{mb:>9.1f}{(mb * 1e3 / t / gbps if t else 0):>9.2f}{per:>9.1f}")
    print(f"sum of the isolated kernel times per decode step: {total:.1f} us")


if __name__ == '__main__':
    seq = load(sys.argv[1])
    if len(sys.argv) > 3 and sys.argv[2] == '--decode':
        decode_roles(seq, float(sys.argv[3]))
    else:
        summary(seq, int(sys.argv[2]) if len(sys.argv) > 2 else 40)
