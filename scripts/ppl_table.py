#!/usr/bin/env python3
"""Markdown table of `sinkq ppl --json` rows against an fp row (scripts/smollm2_*_table.sh).

Usage: ppl_table.py DIR ROW [ROW ...]: DIR holds fp.json and ROW.json for each row (each with
"ppl", "window_nll" and "kld"). The ± is the standard error of the per-window mean NLL difference
to fp, paired over the windows.
"""
import json
import math
import os
import sys


def main() -> None:
    d, rows = sys.argv[1], sys.argv[2:]
    fp = json.load(open(os.path.join(d, "fp.json")))
    n_windows = len(fp["window_nll"])
    print(f"| row | ppl | Δ mean NLL vs fp (± s.e., {n_windows} windows) | KLD (nats/token) |")
    print("|---|---|---|---|")
    print(f"| fp32 (dequantized GGUF) | {fp['ppl']:.3f} | – | 0 |")
    for name in rows:
        r = json.load(open(os.path.join(d, name + ".json")))
        diffs = [a - b for a, b in zip(r["window_nll"], fp["window_nll"])]
        n = len(diffs)
        m = sum(diffs) / n
        se = math.sqrt(sum((x - m) ** 2 for x in diffs) / (n - 1) / n)
        print(f"| {name} | {r['ppl']:.3f} | {m:+.4f} ± {se:.4f} | {r['kld']:.4f} |")


if __name__ == "__main__":
    main()
