#!/usr/bin/env python3
"""docs/results.md's main table: every row one `sinkq eval` run (one calibration) on SmolLM2-135M-Instruct
giving WikiText-2 and C4 perplexity, KLD against the fp model, and the seven zero-shot tasks.

    python3 scripts/results_table.py [--limit 100] [--threads 1] [--out results-run] [ROW ...]

Each row's JSON goes to OUT/<row>.json (a row already there is not run again: delete it to rerun);
then OUT/results.md, results.csv and acc.svg are written from all rows present. Needs build/src/cli/sinkq
(bash scripts/build.sh) and ../shared. Progress of each run on stderr.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MODEL = os.path.join(SHARED, "models/smollm2-135m-instruct-q4_1/model.gguf")
WIKI = os.path.join(SHARED, "data/wikitext-2/wikitext2_test_joined.txt")
C4 = os.path.join(SHARED, "data/c4/c4_train_00000_first1000.jsonl")
CALIB = ["--calib", C4, "--calib-samples", "4", "--calib-len", "256"]

# (row id, bits, method, flags). Calibrated rows take CALIB.
def method_rows(bits, preset):
    """The six methods of the issue's table at one bit width."""
    tag = bits.lower()
    return [
        (f"{tag}-rtn", bits, "RTN dynamic", ["--preset", preset]),
        (f"{tag}-rot", bits, "+ rotation", ["--preset", preset, "--rotate"]),
        (f"{tag}-cross", bits, "CrossQuant (α 0.15)", ["--preset", preset, "--a-quant", "cross"]),
        (f"{tag}-prefixquant", bits, "PrefixQuant (static + prefix)", ["--preset", "prefixquant-" + preset] + CALIB),
        (f"{tag}-rot-intactkv", bits, "+ rotation + IntactKV[B]",
         ["--preset", preset, "--rotate", "--prefix", "bos", "--prefix-source", "fp"]),
        (f"{tag}-rot-kvquant", bits, "+ rotation, KVQuant KV (nuq4-1%, fp [BOS])",
         ["--preset", preset, "--rotate", "--kv-bits", "4", "--kv-codebook", "fisher", "--kv-outliers", "0.01",
          "--prefix", "bos"] + CALIB),
    ]


# (row id, bits, method, flags). Calibrated rows take CALIB.
ROWS = [("fp", "fp", "full precision", ["--preset", "fp16"])] + method_rows("W8A8KV8", "w8a8kv8") + \
    method_rows("W4A8KV4", "w4a8kv4") + method_rows("W4A4KV4", "w4a4kv4")
TASKS = ["piqa", "arc_easy", "arc_challenge", "winogrande", "boolq", "openbookqa", "social_iqa"]


def c4_text(path):
    """C4 evaluation text: documents 900..999 of the sample joined by blank lines (calibration draws 4
    random documents of the same file: at most 4 of these 100 can overlap)."""
    if not os.path.exists(path):
        with open(C4) as f:
            docs = [json.loads(line)["text"] for line in f][900:1000]
        with open(path + ".tmp", "w") as f:
            f.write("\n\n".join(docs))
        os.replace(path + ".tmp", path)
    return path


def run_row(row, args, c4):
    rid, _, _, flags = row
    out = os.path.join(args.out, rid + ".json")
    if os.path.exists(out):
        return
    cmd = [args.sinkq, "eval", "-m", MODEL, "--tasks", ",".join(TASKS), "--limit", str(args.limit),
           "--data", os.path.join(SHARED, "data/commonsense"), "--ppl", f"wikitext2={WIKI},c4={c4}",
           "--ppl-ctx", "512", "--ppl-windows", str(args.windows), "--threads", str(args.threads), "--json"]
    if rid != "fp":
        cmd.append("--kld")
    cmd += flags
    print("results_table: " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.time()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
    j = json.loads(res.stdout)
    j["wall_seconds"] = time.time() - t0
    j["command"] = " ".join(["sinkq"] + cmd[1:]).replace(SHARED, "../shared")
    with open(out + ".tmp", "w") as f:
        json.dump(j, f)
    os.replace(out + ".tmp", out)


def svg_bars(rows, path):
    """Average accuracy per row, a horizontal bar chart (no plotting library needed)."""
    h = 24 * len(rows) + 60
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{h}" font-family="sans-serif" font-size="12">',
         '<text x="10" y="20" font-size="14">SmolLM2-135M: average zero-shot accuracy (7 tasks)</text>']
    for i, (label, acc) in enumerate(rows):
        y = 40 + 24 * i
        w = 400 * acc
        s.append(f'<text x="300" y="{y + 14}" text-anchor="end">{label}</text>')
        s.append(f'<rect x="310" y="{y}" width="{w:.1f}" height="18" fill="#4a7ab5"/>')
        s.append(f'<text x="{315 + w:.1f}" y="{y + 14}">{acc:.3f}</text>')
    s.append(f'<line x1="{310 + 400 * 0.25:.0f}" y1="35" x2="{310 + 400 * 0.25:.0f}" y2="{h - 10}" stroke="#999" '
             'stroke-dasharray="4"/></svg>')
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")


def tables(args):
    rows = []
    for rid, bits, method, _ in ROWS:
        p = os.path.join(args.out, rid + ".json")
        if os.path.exists(p):
            with open(p) as f:
                rows.append((rid, bits, method, json.load(f)))
    if not rows:
        return
    n = rows[0][3]["tasks"][0]["n"]
    head = ["bits", "method", "Wiki2 ppl", "C4 ppl", "KLD (Wiki2)"] + [t["display"] for t in rows[0][3]["tasks"]] + [
        "avg acc", "minutes"]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    csv_rows = [["row", "bits", "method", "wikitext2_ppl", "c4_ppl", "kld_wikitext2"] +
                [t["task"] for t in rows[0][3]["tasks"]] + ["avg_acc", "seconds"]]
    for rid, bits, method, j in rows:
        ppl = {p["name"]: p for p in j["ppl"]}
        kld = ppl["wikitext2"].get("kld")
        accs = [t["acc"] for t in j["tasks"]]
        mark = "†" if ppl["wikitext2"]["protocol"] == "prefix" else ""
        md.append("| " + " | ".join([bits, method, f"{ppl['wikitext2']['ppl']:.2f}{mark}", f"{ppl['c4']['ppl']:.2f}{mark}",
                                      "0" if kld is None else f"{kld:.4f}"] + [f"{100 * a:.1f}" for a in accs] +
                                     [f"{100 * j['average_acc']:.1f}", f"{j['wall_seconds'] / 60:.1f}"]) + " |")
        csv_rows.append([rid, bits, method, ppl["wikitext2"]["ppl"], ppl["c4"]["ppl"], kld or 0] + accs +
                        [j["average_acc"], round(j["wall_seconds"], 1)])
    se = max(t["acc_stderr"] for t in rows[0][3]["tasks"])
    text = "\n".join(md) + "\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"n = {n} items per task (the first of each file); acc in %, largest per-task s.e. "
                f"{100 * se:.1f} points (fp row); † perplexity behind the row's KV prefix ([BOS]: the prefix "
                f"protocol), the others without one (gptq protocol)\n\n" + text)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        csv.writer(f).writerows(csv_rows)
    svg_bars([(f"{b} {m}", j["average_acc"]) for _, b, m, j in rows], os.path.join(args.out, "acc.svg"))
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="*", help="row ids (default: all): " + ", ".join(r[0] for r in ROWS))
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--windows", type=int, default=16, help="ppl windows of 512 tokens per text")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "results-run"))
    ap.add_argument("--sinkq", default=os.path.join(ROOT, "build/src/cli/sinkq"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    c4 = c4_text(os.path.join(args.out, "c4_eval.txt"))
    ids = [r[0] for r in ROWS]
    for r in args.rows:
        if r not in ids:
            sys.exit(f"results_table: unknown row '{r}' (rows: {', '.join(ids)})")
    for row in ROWS:
        if not args.rows or row[0] in args.rows:
            run_row(row, args, c4)
            tables(args)


if __name__ == "__main__":
    main()
