# Per-block timing of a kiln block trace: for each launch size of interest, the distribution of each block's
# wait arrival (t0) and wait return (t1) relative to the launch's release, by block index and by how many
# blocks of the launch share its SM (rank on SM by arrival).
import sys, numpy as np
raw = np.fromfile(sys.argv[1], dtype=np.uint64).reshape(-1, 4)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
grid, t0, t1, meta = raw[:, 0], raw[:, 1].astype(np.int64), raw[:, 2].astype(np.int64), raw[:, 3]
sm = (meta >> 48).astype(np.int64); nb = ((meta >> 24) & 0xFFFFFF).astype(np.int64); bi = (meta & 0xFFFFFF).astype(np.int64)
order = np.lexsort((t1, grid))
cuts = np.flatnonzero((np.diff(grid[order]) != 0) | (np.diff(t1[order]) > 2000)) + 1
groups = np.split(order, cuts)
groups.sort(key=lambda idx: t1[idx].min())
groups = groups[len(groups)//4:]  # skip warm-up
for want in [int(x) for x in sys.argv[3].split(",")]:
    sel = [g for g in groups if nb[g[0]] == want and len(g) == want]
    if not sel: continue
    a0, a1, rank, idxs = [], [], [], []
    for g in sel[:400]:
        rel = t1[g].min()
        a0.append(t0[g] - rel); a1.append(t1[g] - rel); idxs.append(bi[g])
        r = np.zeros(len(g), dtype=int)
        for s in np.unique(sm[g]):
            m = np.flatnonzero(sm[g] == s)
            r[m[np.argsort(t0[g][m])]] = np.arange(len(m))
        rank.append(r)
    a0 = np.concatenate(a0) / 1000; a1 = np.concatenate(a1) / 1000; rank = np.concatenate(rank); idxs = np.concatenate(idxs)
    print(f"== blocks={want}: {len(sel)} launches; t0-rel (us) quantiles 10/50/90/99/max:",
          " ".join(f"{q:.2f}" for q in np.percentile(a0, [10, 50, 90, 99, 100])))
    for r in range(rank.max() + 1):
        m = rank == r
        print(f"  rank-on-SM {r}: {m.sum()/len(sel):.1f} blocks/launch; t0-rel median {np.median(a0[m]):.2f} p90 {np.percentile(a0[m],90):.2f}; t1-rel median {np.median(a1[m]):.2f} p90 {np.percentile(a1[m],90):.2f}")
    for lo in range(0, want, max(want // 8, 1)):
        m = (idxs >= lo) & (idxs < lo + max(want // 8, 1))
        print(f"  blocks {lo}-{lo + max(want//8,1) - 1}: t0-rel median {np.median(a0[m]):.2f} p90 {np.percentile(a0[m],90):.2f}")
