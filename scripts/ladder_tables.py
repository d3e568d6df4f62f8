#!/usr/bin/env python3
"""Markdown tables from `sinkq ladder --json` documents (scripts/smollm2_ladder.sh).

One table per ladder and table (Table 6, Table 2, IntactKV): ppl, the mean per-window NLL
difference to the row's fp reference with its paired standard error, and the KLD against that
reference. Usage: python3 scripts/ladder_tables.py LADDER.json [LADDER.json ...]
"""
import json
import math
import sys

TITLES = {"fp": "reference", "table6": "PrefixQuant Table 6 ladder", "table2": "PrefixQuant Table 2 analogue",
          "intactkv": "IntactKV"}


def paired(a, b):
    """Mean per-window NLL difference a - b and its paired standard error."""
    d = [x - y for x, y in zip(a["window_nll"], b["window_nll"])]
    n = len(d)
    m = sum(d) / n
    se = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1) / n) if n > 1 else 0.0
    return m, se


def baseline(rows, r):
    """The row a step is measured against: IntactKV rows against the same setting without it (the
    prompt's KV computed by the quantized model for [P]), each Table 6 / Table 2 step against the
    step before it."""
    name = r["name"]
    by_name = {x["name"]: x for x in rows}
    if " + IntactKV[B]" in name:
        return by_name.get(name.replace(" + IntactKV[B]", ""))
    if " + IntactKV[P]" in name:
        return by_name.get(name.replace(" + IntactKV[P]", " behind [P]"))
    if r["table"] in ("table6", "table2"):
        same = [x for x in rows if x["table"] == r["table"] and
                (r["table"] == "table6" or x["name"].split(":")[0] == name.split(":")[0])]
        i = same.index(r)
        return same[i - 1] if i > 0 else None
    return None


def main(paths):
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        rows = doc["rows"]
        fp = rows[0]
        print(f"### {doc['bits'].upper()}: {TITLES['table6']} / {TITLES['table2']} / {TITLES['intactkv']}\n")
        print(f"ctx {doc['ctx']}, {fp['windows']} windows, {fp['tokens_scored']} targets; "
              f"prefix `{doc['prefix']['spec']}` found: {doc['prefix']['text']}\n")
        tables = []
        for r in rows[1:]:
            if r["table"] not in tables:
                tables.append(r["table"])
        for t in tables:
            print(f"**{TITLES[t]}** ({doc['bits']})\n")
            print("| row | ppl | Δ NLL vs fp ± s.e. | KLD | Δ NLL of the step ± s.e. |")
            print("|---|---|---|---|---|")
            print(f"| full precision | {fp['ppl']:.2f} | – | 0 | |")
            for r in rows[1:]:
                if r["table"] != t:
                    continue
                ref = " (vs fp behind [P])" if r.get("delta_reference", "full precision") != "full precision" else ""
                if r["name"] == "full precision behind [P]":
                    print(f"| {r['name']} | {r['ppl']:.2f} | – | 0 | |")
                    continue
                b = baseline(rows, r)
                vs = ""
                if b is not None:
                    m, se = paired(r, b)
                    vs = f"{m:+.4f} ± {se:.4f}"
                print(f"| {r['name']} | {r['ppl']:.2f} | {r['delta_nll_vs_fp']:+.4f} ± {r['delta_nll_se']:.4f}{ref} "
                      f"| {r['kld']:.4f} | {vs} |")
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
