#!/usr/bin/env python3
"""Markdown tables of scripts/smollm2_kvquant.sh's runs (docs/kvquant.md).

Usage: python3 scripts/kvquant_table.py DIR [KV_DIM]   (DIR holds <row>.json from `sinkq ppl --kld --json`;
KV_DIM: the model's kv heads x head_dim, default 192 = SmolLM2-135M)

Δ NLL is the mean over windows of the per-window NLL difference to the fp row (the same windows
and targets), ± its standard error; KLD ± the standard error over windows. KV bytes are per token
and layer for K and V together, from the layout the recipe implies (docs/kvquant.md "Bytes"):
codes bits·kv_dim/8 per vector side, 8 bytes (fp32 lo and hi) per token for token-axis vectors
(channel ranges are calibrated once: 0 per token), and with outliers a 4-byte row pointer plus
4 bytes (uint16 channel, fp16 value) per outlier: 2·round(p·kv_dim/2) per token vector, p·kv_dim
expected per token for channel vectors (lowbit/codebook_kv.h). Standard library only.
"""
import json
import math
import os
import sys

ROWS = {
    "table": [("fp16", "fp")]
    + [(f"{name} {b}-bit", f"{key}{b}" if key != "kvquant" else f"kvquant-{b}bit{suffix}")
       for b in (4, 3, 2)
       for name, key, suffix in (("int (per-token, post-RoPE)", "int", ""), ("nf (per-token, post-RoPE)", "nf", ""),
                                 ("KVQuant", "kvquant", ""), ("KVQuant 1%", "kvquant", "-1pct"))],
    "ablation": [
        ("int3: uniform, per-token keys post-RoPE, first token quantized", "int3"),
        ("+ per-channel keys (post-RoPE, calibrated ranges)", "abl3-channel"),
        ("+ pre-RoPE keys", "abl3-prerope"),
        ("+ nuq3 (k-means levels)", "abl3-kmeans"),
        ("+ Fisher-weighted k-means (nuq3)", "abl3-fisher"),
        ("+ 1% dense-and-sparse", "abl3-1pct"),
        ("+ first token in fp (= KVQuant-3bit-1%)", "abl3-sink"),
        ("+ Q-Norm", "abl3-qnorm"),
    ],
    "qnorm": [
        ("nuq2, first token fp, no Q-Norm", "abl2-noqnorm"),
        ("nuq2 + Q-Norm (= KVQuant-2bit)", "kvquant-2bit"),
        ("nuq2-1%, no Q-Norm", "abl2-1pct-noqnorm"),
        ("nuq2-1% + Q-Norm (= KVQuant-2bit-1%)", "kvquant-2bit-1pct"),
    ],
}


def mean_se(d):
    n = len(d)
    m = sum(d) / n
    se = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1) / n) if n > 1 else float("nan")
    return m, se


def kv_bytes(cfg, kv_dim):
    kv = cfg["kv"]
    bits = kv["bits"]
    if bits == 16:
        return 2 * kv_dim * 2
    if kv.get("codebook", "int") == "int":
        raise SystemExit("kvquant_table: the integer KV quantizer's rows are not in this table")
    p = kv.get("outliers", 0.0)
    total = 0.0
    for axis in (kv["keys"].split("_")[-1], kv["values"]):
        total += kv_dim * bits / 8
        if axis == "token":
            total += 8
        count = (2 * round(p * kv_dim / 2) if axis == "token" else p * kv_dim) if p > 0 else 0
        total += 4 + 4 * count
    return total


def main():
    d = sys.argv[1]
    runs = {f[:-5]: json.load(open(os.path.join(d, f))) for f in os.listdir(d) if f.endswith(".json")}
    fp = runs["fp"]
    kv_dim = int(sys.argv[2]) if len(sys.argv) > 2 else 192  # SmolLM2-135M: 3 KV heads x 64
    fp_bytes = kv_bytes(fp["config"], kv_dim)
    for table, rows in ROWS.items():
        if not any(key in runs for _, key in rows if key != "fp"):
            continue  # a table none of whose rows were run (e.g. ABLATION=0)
        print(f"\n**{table}**\n")
        print("| setting | ppl | Δ NLL vs fp (± SE) | KLD (± SE) | KV bytes / token / layer | seconds |")
        print("|---|---|---|---|---|---|")
        for label, key in rows:
            if key not in runs:
                print(f"| {label} | (not run) | | | | |")
                continue
            r = runs[key]
            m, se = mean_se([a - b for a, b in zip(r["window_nll"], fp["window_nll"])])
            kl = f"{r['kld']:.4f} ± {mean_se(r['window_kld'])[1]:.4f}" if key != "fp" else "0"
            b = kv_bytes(r["config"], kv_dim)
            delta = f"{m:+.4f} ± {se:.4f}" if key != "fp" else ""
            print(f"| {label} | {r['ppl']:.3f} | {delta} | {kl} | {b:.1f} ({fp_bytes / b:.2f}×) | {r.get('wall_seconds', '')} |")


if __name__ == "__main__":
    main()
