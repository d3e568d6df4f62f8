#!/usr/bin/env python3
"""Markdown tables from `sinkq ladder --json` documents (scripts/smollm2_ladder.sh).

One table per ladder and table (Table 6, Table 2, IntactKV): ppl, the mean per-window NLL
difference to the row's fp reference with its paired standard error, and the KLD against that
reference. Usage: python3 scripts/ladder_tables.py LADDER.json [LADDER.json ...]
"""
import json
import sys

TITLES = {"fp": "reference", "table6": "PrefixQuant Table 6 ladder", "table2": "PrefixQuant Table 2 analogue",
          "intactkv": "IntactKV"}


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
            print("| row | ppl | Δ NLL vs fp ± s.e. | KLD |")
            print("|---|---|---|---|")
            print(f"| full precision | {fp['ppl']:.2f} | – | 0 |")
            for r in rows[1:]:
                if r["table"] != t:
                    continue
                ref = " (vs fp behind [P])" if r.get("delta_reference", "full precision") != "full precision" else ""
                if r["name"] == "full precision behind [P]":
                    print(f"| {r['name']} | {r['ppl']:.2f} | – | 0 |")
                    continue
                print(f"| {r['name']} | {r['ppl']:.2f} | {r['delta_nll_vs_fp']:+.4f} ± {r['delta_nll_se']:.4f}{ref} "
                      f"| {r['kld']:.4f} |")
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
