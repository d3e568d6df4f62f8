#!/usr/bin/env python3
"""docs/results.md's main table: every row one `sinkq eval` run (one calibration) on SmolLM2-135M-Instruct
giving WikiText-2 and C4 perplexity, KLD against the fp model, and the seven zero-shot tasks.

    python3 scripts/results_table.py [--limit 100] [--threads 1] [--out results-run] [ROW ...]

Each row's JSON goes to OUT/<row>.json (or --rows-dir; a row already there is not run again: delete it
to rerun); then OUT/results.md, results.csv and acc.svg are written from all rows present. Needs
build/src/cli/sinkq (bash scripts/build.sh) and ../shared. Progress of each run on stderr. acc.svg needs
matplotlib (--no-plot skips it); its dashed line is the chance level of the average, from the task files.
docs/results from its rows alone, nothing run:

    python3 scripts/results_table.py --render-only --out docs/results --rows-dir docs/results/rows
"""
import argparse
import csv
import json
import math
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
    out = os.path.join(args.rows_dir, rid + ".json")
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


# Task id (the rows' "task") -> its directory under the commonsense data (src/eval/tasks.cc, mc_tasks()).
TASK_DIRS = {"piqa": "piqa", "arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge", "winogrande": "winogrande",
             "boolq": "boolq", "openbookqa": "openbookqa", "social_iqa": "social_i_qa"}


class MissingMatplotlib(Exception):
    pass


def n_choices(instruction):
    """Choices of one LLM-Adapters item: its "Answer format: a1/a2/..." line (as src/eval/tasks.cc reads it)."""
    _, sep, fmt = instruction.rpartition("Answer format: ")
    if not sep:
        raise ValueError("no 'Answer format: ' in the instruction")
    return fmt.strip().count("/") + 1


def chance_level(j):
    """(chance of the row's average accuracy, {task: chance}) for the items the row `j` was evaluated on:
    per task the mean over its first n items of 1 / choices, then the mean over the tasks (the average
    accuracy is the tasks' plain mean). None when a task file cannot be read."""
    data = j.get("data") or os.path.join(SHARED, "data/commonsense")
    data = data if os.path.isabs(data) else os.path.join(ROOT, data)
    per = {}
    for t in j["tasks"]:
        path = os.path.join(data, TASK_DIRS.get(t["task"], t["task"]), "test.json")
        try:
            with open(path) as f:
                items = json.load(f)[:t["n"]]
            per[t["task"]] = sum(1.0 / n_choices(it["instruction"]) for it in items) / len(items)
        except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
            print(f"results_table: {path}: {e}; acc.svg drawn without the chance line", file=sys.stderr)
            return None
    return sum(per.values()) / len(per), per


def svg_bars(rows, path, chance=None, title="SmolLM2-135M: average zero-shot accuracy (7 tasks)"):
    """Average accuracy per row (`rows`: (label, acc) pairs, top to bottom), a horizontal bar chart with a
    dashed line at `chance` (chance_level()'s pair, or None). Needs matplotlib (MissingMatplotlib if absent)."""
    try:
        import matplotlib
    except ImportError as e:
        raise MissingMatplotlib(str(e)) from None
    from matplotlib.figure import Figure

    labels = [r[0] for r in rows]
    accs = [r[1] for r in rows]
    top = max(accs + [chance[0] if chance else 0])
    xmax = min(1.0, math.ceil((top + 0.1) * 10) / 10)
    with matplotlib.rc_context({"svg.hashsalt": "sinkq-results", "font.size": 10}):
        fig = Figure(figsize=(9, 0.32 * len(rows) + 1.7), layout="constrained")
        ax = fig.add_subplot()
        ys = list(range(len(rows)))
        ax.barh(ys, accs, height=0.7, color="#4a7ab5", zorder=2)
        for y, a in zip(ys, accs):  # the values in a column at the right, clear of the bars and the line
            ax.text(xmax * 0.99, y, f"{a:.3f}", ha="right", va="center", fontsize=9, zorder=3)
        ax.set_yticks(ys, labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
        ax.set_xlim(0, xmax)
        ax.set_xlabel("average accuracy over the seven tasks")
        ax.grid(axis="x", color="#e4e4e4", zorder=0)
        ax.set_axisbelow(True)
        if chance:
            ax.axvline(chance[0], color="#c33", linestyle="--", linewidth=1.2, zorder=4,
                       label=f"chance ({chance[0]:.3f}: mean over the tasks of mean 1/choices)")
            try:  # below the axis (matplotlib >= 3.7)
                fig.legend(loc="outside lower center", fontsize=9, frameon=False)
            except ValueError:
                ax.legend(loc="lower right", fontsize=9, framealpha=0.95)
        ax.set_title(title, fontsize=11)
        fig.savefig(path, format="svg", metadata={"Date": None})


def tables(args):
    rows = []
    for rid, bits, method, _ in ROWS:
        p = os.path.join(args.rows_dir, rid + ".json")
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
    print(text)
    if args.plot:
        tasks = [(t["task"], t["n"]) for t in rows[0][3]["tasks"]]
        if any([(t["task"], t["n"]) for t in j["tasks"]] != tasks for _, _, _, j in rows):
            print("results_table: rows differ in tasks or items; chance line from the first row's", file=sys.stderr)
        try:
            svg_bars([(f"{b} {m}", j["average_acc"]) for _, b, m, j in rows], os.path.join(args.out, "acc.svg"),
                     chance_level(rows[0][3]),
                     f"SmolLM2-135M: average zero-shot accuracy ({len(tasks)} tasks, first {n} items each)")
        except MissingMatplotlib:
            args.plot_failed = True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="*", help="row ids (default: all): " + ", ".join(r[0] for r in ROWS))
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--windows", type=int, default=16, help="ppl windows of 512 tokens per text")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "results-run"))
    ap.add_argument("--sinkq", default=os.path.join(ROOT, "build/src/cli/sinkq"))
    ap.add_argument("--rows-dir", help="where the rows' JSONs are read and written (default: OUT; "
                    "docs/results keeps them in docs/results/rows)")
    ap.add_argument("--render-only", action="store_true",
                    help="run nothing: rewrite results.md, results.csv and acc.svg from the rows present")
    ap.add_argument("--no-plot", dest="plot", action="store_false", help="skip acc.svg (no matplotlib needed)")
    args = ap.parse_args()
    args.rows_dir = args.rows_dir or args.out
    args.plot_failed = False
    ids = [r[0] for r in ROWS]
    for r in args.rows:
        if r not in ids:
            sys.exit(f"results_table: unknown row '{r}' (rows: {', '.join(ids)})")
    os.makedirs(args.out, exist_ok=True)
    if args.render_only:
        tables(args)
    else:
        os.makedirs(args.rows_dir, exist_ok=True)
        c4 = c4_text(os.path.join(args.out, "c4_eval.txt"))
        for row in ROWS:
            if not args.rows or row[0] in args.rows:
                run_row(row, args, c4)
                tables(args)
    if args.plot_failed:
        sys.exit("results_table: acc.svg not written: matplotlib is missing (pip install matplotlib), or pass "
                 "--no-plot; results.md and results.csv were written")


if __name__ == "__main__":
    main()
