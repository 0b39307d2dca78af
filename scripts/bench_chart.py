#!/usr/bin/env python3
"""Draws the chart of a `kiln bench` run: NAME.json (src/bench/report.rs, format 1) -> NAME.png.

    python3 scripts/bench_chart.py bench/results/NAME.json bench/results/NAME.png

Decode runs: tok/s per shape at batch 1 (kiln, transformers eager, torch.compile, roofline),
then tok/s by batch bucket and by context where the run measured them. Prefill runs: time to
first token per shape and prompt size. Needs matplotlib; `kiln bench` runs this after writing
the JSON and keeps its own SVG when this fails. Draws only what the JSON holds.
"""

import json
import sys

SERIES = [
    ("kiln", "kiln_tok_s", "#d9480f"),
    ("transformers eager", "torch_eager_tok_s", "#868e96"),
    ("torch.compile", "torch_compile_tok_s", "#1c7ed6"),
    ("roofline", "roofline_tok_s", "#2b8a3e"),
]


def bars(ax, groups, series, ylabel, log=False):
    """groups: [(label, {key: value})]; series: [(name, key, color)]."""
    n = len(series)
    width = 0.8 / n
    for i, (name, key, color) in enumerate(series):
        xs, ys = [], []
        for g, (_, vals) in enumerate(groups):
            v = vals.get(key)
            if v is not None:
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(v)
        rects = ax.bar(xs, ys, width * 0.95, label=name, color=color)
        for r, v in zip(rects, ys):
            ax.annotate(f"{v:.0f}" if v >= 10 else f"{v:.2g}", (r.get_x() + r.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[0] for g in groups], fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def decode_panels(report, plt):
    prompt = report["settings"]["prompt"]
    models = report["models"]
    main = [(m["name"], r) for m in models for r in m["decode"] if r["batch"] == 1 and r["context"] == prompt]
    by_batch = {m["name"]: sorted((r for r in m["decode"] if r["context"] == prompt), key=lambda r: r["batch"]) for m in models}
    by_batch = {k: v for k, v in by_batch.items() if len(v) > 1}
    by_ctx = [(f"{m['name']}\nctx {r['context']}", r) for m in models for r in sorted(m["decode"], key=lambda r: r["context"]) if r["batch"] == 1]
    panels = 1 + bool(by_batch) + (len({r["context"] for _, r in by_ctx}) > 1)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5), squeeze=False)
    axes = list(axes[0])
    ax = axes.pop(0)
    bars(ax, main, SERIES, "tokens/s")
    ax.set_title(f"decode, batch 1, prompt {prompt} + {report['settings']['new_tokens']} tokens", fontsize=10)
    if by_batch:
        ax = axes.pop(0)
        for i, (name, rows) in enumerate(sorted(by_batch.items())):
            color = f"C{i}"
            b = [r["batch"] for r in rows]
            for key, style, label in [("kiln_tok_s", "-o", "kiln"), ("roofline_tok_s", "--", "roofline"), ("torch_compile_tok_s", ":s", "torch.compile")]:
                pts = [(x, r[key]) for x, r in zip(b, rows) if r.get(key) is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=f"{name} {label}")
        ax.set_xscale("log", base=2)
        ticks = sorted({r["batch"] for rows in by_batch.values() for r in rows})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlabel("batch (sequences per step)")
        ax.set_ylabel("tokens/s (all sequences)")
        ax.set_title(f"decode by batch bucket, prompt {prompt}", fontsize=10)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    if axes:
        ax = axes.pop(0)
        bars(ax, by_ctx, SERIES, "tokens/s")
        ax.set_title("decode by context, batch 1", fontsize=10)
    return fig


def prefill_panels(report, plt):
    groups = []
    for m in report["models"]:
        for r in m["prefill"]:
            groups.append((f"{m['name']}\nn={r['n']}", {"kiln": r.get("kiln_ttft_ms"), "eager": r.get("torch_eager_ttft_ms"), "compile": r.get("torch_compile_ttft_ms")}))
    fig, ax = plt.subplots(figsize=(max(6.5, 1.6 * len(groups)), 5))
    series = [("kiln", "kiln", "#d9480f"), ("transformers eager (SDPA)", "eager", "#868e96"), ("torch.compile", "compile", "#1c7ed6")]
    bars(ax, groups, series, "time to first token, ms (log)", log=True)
    gemm = report.get("gemm")
    ax.set_title("prefill" + (f" (bf16 GEMM {gemm['tflops']:.0f} TFLOP/s)" if gemm else ""), fontsize=10)
    return fig


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
    except ImportError:
        print("bench_chart.py: matplotlib is not installed (pip install matplotlib); no PNG", file=sys.stderr)
        return 3

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1]) as f:
        report = json.load(f)
    fig = prefill_panels(report, plt) if report["kind"] == "prefill" else decode_panels(report, plt)
    gpu = (report.get("gpu") or {}).get("name", "CPU")
    bw = report.get("bandwidth")
    sub = f"{gpu}" + (f", read {bw['bytes_per_s'] / 1e9:.0f} GB/s" if bw else "") + f" — {report['date']} — {report['commit'][:12]}"
    fig.suptitle("kiln bench: " + sub, fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print("wrote", sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
