#!/usr/bin/env python3
"""The PyTorch/transformers competitor of `kiln bench` (src/bench.rs, src/bench/torch.rs).

Run by `kiln bench --torch` as a subprocess on the GPU machine, once per model:

    python3 scripts/bench_torch.py --job JOB.json

JOB.json: {"name": str, "dir": HF_DIR, "new_tokens": N, "repeats": R, "modes": ["eager", "compile"],
           "decode": [{"batch": B, "context": C, "prompts": [[C token ids] x B]}],
           "prefill": [{"n": N, "prompt": [N token ids]}], "gemm": bool, "out": PATH}

The model is loaded in bfloat16 on the GPU (SDPA attention). Modes:
  eager    static KV cache (cache_implementation="static"), nothing compiled (disable_compile)
  compile  static KV cache, torch.compile(mode="reduce-overhead"): transformers' own compile of
           the decode step (fullgraph, else not), else the forward compiled by hand (the
           first decode case picks the path; "path" in the results says which)
Decode: generate() greedy for exactly N new tokens (EOS ignored) after the given prompts; a
streamer stamps the host clock as each token reaches the host (generate copies each token to
the host, which waits for the GPU), so only the N-1 decode steps after the first token are
timed, as kiln times them. tok/s = B x (N - 1) / time, median of R runs after warm-up.
Prefill (time to first token): one forward over the prompt (logits of the last position only)
and the argmax on the host, median of R runs after warm-up.
GEMM: an 8192^3 bf16 matmul, median of 20 timed with CUDA events (the tensor-core ceiling).

Writes PATH after every measurement (so a run stopped by kiln's timeout keeps what it did):
  {"versions": {...}, "gemm": {"n", "tflops", "samples_ms"},
   "modes": {mode: {"path": how, "error": str|null,
                    "decode": [{"batch", "context", "tok_s", "samples_tok_s", "tokens", "method", "error"}],
                    "prefill": [{"n", "ttft_s", "samples_s", "first_token", "error"}]}},
   "error": str|null}
This script only measures PyTorch; kiln's numbers and the comparison are kiln's.
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback

RESULT = {"versions": {}, "gemm": None, "modes": {}, "error": None}
OUT = None


def save():
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULT, f)
    os.replace(tmp, OUT)


def log(*a):
    print("[bench_torch]", *a, flush=True)


def short_error(e):
    lines = [l for l in traceback.format_exception_only(type(e), e) if l.strip()]
    return (lines[-1].strip() if lines else repr(e))[:2000]


def versions(torch, transformers):
    v = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": str(torch.version.cuda),
    }
    try:
        v["gpu"] = torch.cuda.get_device_name(0)
    except Exception as e:  # noqa: BLE001 - report, do not fail
        v["gpu"] = "unknown: " + short_error(e)
    return v


def gemm(torch, n=8192, runs=20):
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(runs):
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    med = statistics.median(ms)
    del a, b
    torch.cuda.empty_cache()
    return {"n": n, "tflops": 2.0 * n**3 / (med * 1e-3) / 1e12, "samples_ms": ms}


def load(path, torch):
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa")
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to("cuda").eval()
    gc = model.generation_config
    # Exactly new_tokens tokens, greedy: no EOS stop, no sampling settings from the directory.
    gc.eos_token_id = None
    gc.do_sample = False
    for k in ("temperature", "top_p", "top_k"):
        if hasattr(gc, k):
            setattr(gc, k, None)
    gc.pad_token_id = 0
    return model


class Stamps:
    """A generate() streamer that stamps the host clock at each put (prompt first, then each token)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def make_streamer():
    try:
        from transformers.generation.streamers import BaseStreamer

        class S(Stamps, BaseStreamer):
            pass

        return S()
    except Exception:  # noqa: BLE001 - any object with put/end works
        return Stamps()


def generate(model, torch, ids, new_tokens, streamer=None):
    mask = torch.ones_like(ids)
    kw = dict(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        cache_implementation="static",
        pad_token_id=0,
    )
    if streamer is not None:
        kw["streamer"] = streamer
    with torch.no_grad():
        return model.generate(**kw)


def time_decode(model, torch, case, new_tokens, repeats, warmups):
    """Median tok/s of decode steps (after the first token), tokens of sequence 0, method."""
    ids = torch.tensor(case["prompts"], dtype=torch.long, device="cuda")
    batch, context = ids.shape
    samples, tokens, method = [], [], "streamer"
    for r in range(warmups + repeats):
        s = make_streamer()
        torch.cuda.synchronize()
        out = generate(model, torch, ids, new_tokens, s)
        torch.cuda.synchronize()
        new = out.shape[1] - context
        if new != new_tokens:
            raise RuntimeError(f"generate made {new} tokens, not {new_tokens}")
        # generate() puts the prompt first (when it does), then each new token.
        if len(s.times) < new_tokens:
            raise RuntimeError(f"the streamer saw {len(s.times)} puts for {new_tokens} new tokens")
        stamps = s.times[-new_tokens:]
        if r == 0:
            tokens = out[0, context:].tolist()
        if r >= warmups:
            samples.append(batch * (new_tokens - 1) / (stamps[-1] - stamps[0]))
    return statistics.median(samples), samples, tokens, method


def forward_last(fwd, torch, ids):
    try:
        out = fwd(input_ids=ids, use_cache=False, logits_to_keep=1)
    except TypeError:
        out = fwd(input_ids=ids, use_cache=False)
    return int(out.logits[0, -1].argmax().item())


def time_prefill(fwd, torch, case, repeats, warmups):
    ids = torch.tensor([case["prompt"]], dtype=torch.long, device="cuda")
    samples, first = [], None
    with torch.no_grad():
        for r in range(warmups + repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            tok = forward_last(fwd, torch, ids)
            t = time.perf_counter() - t0
            if r == 0:
                first = tok
            if r >= warmups:
                samples.append(t)
    return statistics.median(samples), samples, first


def dynamo_graphs(torch):
    try:
        from torch._dynamo.utils import counters

        return sum(counters["stats"].values()) + len(counters.get("frames", {}))
    except Exception:  # noqa: BLE001
        return None


# How `compile` mode is realised, tried in order on the first decode case until one compiles
# and runs: transformers' own compile of the decode step (fullgraph, then not), then the
# forward compiled by hand. The JSON's "path" says which one the numbers come from.
COMPILE_PATHS = ("auto-fullgraph", "auto", "by-hand")


def apply_mode(model, torch, mode, orig_forward):
    """Configures `model` for `mode` (eager, or a compile path); returns a description."""
    gc = model.generation_config
    model.forward = orig_forward
    if mode == "eager":
        gc.disable_compile = True
        return "static cache, no compile (generation_config.disable_compile=True)"
    if mode.startswith("auto"):
        gc.disable_compile = False
        fullgraph = mode == "auto-fullgraph"
        try:
            from transformers import CompileConfig

            gc.compile_config = CompileConfig(fullgraph=fullgraph, mode="reduce-overhead")
        except Exception as e:  # noqa: BLE001
            if fullgraph:
                raise
            return "generate() auto-compile of the decode step, default compile_config (CompileConfig: " + short_error(e) + ")"
        return f"generate() auto-compile of the decode step, CompileConfig(fullgraph={fullgraph}, mode='reduce-overhead'), static cache"
    gc.disable_compile = True
    model.forward = torch.compile(orig_forward, mode="reduce-overhead", fullgraph=False)
    return "model.forward = torch.compile(model.forward, mode='reduce-overhead'), static cache"


def run_mode(model, torch, job, mode, orig_forward):
    entry = {"path": None, "error": None, "decode": [], "prefill": []}
    RESULT["modes"][mode] = entry
    new_tokens, repeats = int(job["new_tokens"]), int(job["repeats"])
    warmups = 1 if mode == "eager" else 2
    paths = ["eager"] if mode == "eager" else list(COMPILE_PATHS)
    failed = []
    for i, case in enumerate(job["decode"]):
        row = {"batch": case["batch"], "context": case["context"], "tok_s": None, "samples_tok_s": [], "tokens": [], "method": None, "error": None}
        entry["decode"].append(row)
        t0 = time.perf_counter()
        while True:
            try:
                if entry["path"] is None:
                    entry["path"] = apply_mode(model, torch, paths[0], orig_forward)
                    if failed:
                        entry["path"] += " (after: " + "; ".join(failed) + ")"
                    save()
                before = dynamo_graphs(torch)
                tok_s, samples, tokens, method = time_decode(model, torch, case, new_tokens, repeats, warmups)
                if paths[0].startswith("auto") and i == 0 and before is not None and dynamo_graphs(torch) == before:
                    raise RuntimeError("generate() ran the decode step eagerly")
                row.update(tok_s=tok_s, samples_tok_s=samples, tokens=tokens if mode == "eager" else [], method=method, error=None)
                log(f"{mode} decode batch {row['batch']} context {row['context']}: {tok_s:.1f} tok/s ({time.perf_counter() - t0:.1f} s with warm-up)")
                break
            except Exception as e:  # noqa: BLE001
                row["error"] = short_error(e)
                log(f"{mode} ({paths[0]}) decode batch {row['batch']} context {row['context']} failed: {row['error']}")
                traceback.print_exc()
                if i > 0 or len(paths) == 1:
                    break
                # The first case decides the compile path: try the next one from a clean slate.
                failed.append(f"{paths.pop(0)} failed: {row['error'][:300]}")
                entry["path"] = None
                try:
                    torch._dynamo.reset()
                except Exception:  # noqa: BLE001
                    pass
        save()
    if job["prefill"]:
        if mode == "eager":
            model.forward = orig_forward
            fwd = orig_forward
            entry["path"] = entry["path"] or "eager forward (SDPA), logits of the last position"
        else:
            for name in ("recompile_limit", "cache_size_limit"):  # renamed across torch versions
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
            fwd = torch.compile(orig_forward, mode="reduce-overhead", dynamic=False)
            how = "prefill: torch.compile(model.forward, mode='reduce-overhead', dynamic=False)"
            entry["path"] = f"{entry['path']}; {how}" if entry["path"] else how
        for case in job["prefill"]:
            row = {"n": case["n"], "ttft_s": None, "samples_s": [], "first_token": None, "error": None}
            entry["prefill"].append(row)
            try:
                t0 = time.perf_counter()
                ttft, samples, first = time_prefill(fwd, torch, case, repeats, 3)
                row.update(ttft_s=ttft, samples_s=samples, first_token=first)
                log(f"{mode} prefill {row['n']}: {ttft * 1e3:.3f} ms ({time.perf_counter() - t0:.1f} s with warm-up)")
            except Exception as e:  # noqa: BLE001
                row["error"] = short_error(e)
                log(f"{mode} prefill {row['n']} failed: {row['error']}")
                traceback.print_exc()
            save()


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", required=True)
    args = ap.parse_args()
    with open(args.job) as f:
        job = json.load(f)
    OUT = job["out"]
    save()
    try:
        import torch
        import transformers

        RESULT["versions"] = versions(torch, transformers)
        log("versions:", json.dumps(RESULT["versions"]))
        save()
        torch.backends.cuda.matmul.allow_tf32 = False
        if job.get("gemm"):
            try:
                RESULT["gemm"] = gemm(torch)
                log(f"bf16 GEMM 8192^3: {RESULT['gemm']['tflops']:.1f} TFLOP/s")
            except Exception as e:  # noqa: BLE001
                RESULT["gemm"] = None
                log("GEMM failed:", short_error(e))
            save()
        t0 = time.perf_counter()
        model = load(job["dir"], torch)
        log(f"loaded {job['dir']} in {time.perf_counter() - t0:.1f} s")
        orig_forward = model.forward
        for mode in job["modes"]:
            run_mode(model, torch, job, mode, orig_forward)
    except Exception as e:  # noqa: BLE001
        RESULT["error"] = short_error(e)
        traceback.print_exc()
    save()
    return 0 if RESULT["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
