#!/usr/bin/env python3
"""Paired comparison of `sinkq eval --tasks ... --samples --json` runs on the same items.

    python3 scripts/eval_pairs.py BASE.json NAME=ROW.json [NAME=ROW.json ...] [--md]

BASE is the reference run (the fp model); every ROW must have scored the same items (same --tasks,
--limit). Per task: the chance level (mean of 1 / choices), and per row: acc ± its standard error (lm-eval's: sample sd / sqrt(n)), the paired
difference of acc against BASE ± the standard error of the per-item differences, the share of items
whose prediction equals BASE's, and the paired mean difference of the gold choice's log-likelihood
(nats; continuous, so it shows a quantizer's effect with a far smaller standard error than acc).
The "average" row: the unweighted mean over tasks (as `sinkq eval`), its standard error from the
tasks' (independent items): sqrt(sum se_t^2) / number of tasks.
"""
import json
import math
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    tasks = d.get("tasks", d)
    out = {}
    for t in tasks:
        if "items" not in t:
            sys.exit(f"{path}: task {t.get('task')} has no items (run sinkq eval with --samples --json)")
        out[t["task"]] = t
    return out


def mean_se(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def main(argv):
    md = "--md" in argv
    args = [a for a in argv if a != "--md"]
    if len(args) < 2:
        sys.exit(__doc__)
    base = load(args[0])
    rows = []
    for a in args[1:]:
        name, _, path = a.partition("=")
        rows.append((name, load(path)))
    tasks = list(base.keys())
    header = ["task", "n", "chance", "fp acc"]
    for name, _ in rows:
        header += [f"{name} acc", f"Δacc vs fp", "same pred", "Δ ll(gold), nats"]
    lines = []
    avg = {name: {"acc": [], "acc_se": [], "d": [], "d_se": [], "ll": [], "ll_se": []} for name, _ in rows}
    base_acc, base_se, chances = [], [], []
    for t in tasks:
        bi = {it["index"]: it for it in base[t]["items"]}
        b_scores = [1.0 if bi[i]["pred"] == bi[i]["gold"] else 0.0 for i in sorted(bi)]
        bm, bse = mean_se(b_scores)
        base_acc.append(bm), base_se.append(bse)
        chance = sum(1.0 / len(bi[i]["ll"]) for i in bi) / len(bi)
        chances.append(chance)
        cells = [base[t].get("display", t), str(len(bi)), f"{chance:.2f}", f"{bm:.3f} ± {bse:.3f}"]
        for name, r in rows:
            if t not in r:
                sys.exit(f"{name}: no task {t}")
            ri = {it["index"]: it for it in r[t]["items"]}
            if sorted(ri) != sorted(bi):
                sys.exit(f"{name}: task {t} scored other items than the base run")
            idx = sorted(bi)
            sc = [1.0 if ri[i]["pred"] == ri[i]["gold"] else 0.0 for i in idx]
            m, se = mean_se(sc)
            dm, dse = mean_se([sc[k] - b_scores[k] for k in range(len(idx))])
            same = sum(1 for i in idx if ri[i]["pred"] == bi[i]["pred"]) / len(idx)
            lm, lse = mean_se([ri[i]["ll"][ri[i]["gold"]] - bi[i]["ll"][bi[i]["gold"]] for i in idx])
            a = avg[name]
            a["acc"].append(m), a["acc_se"].append(se), a["d"].append(dm), a["d_se"].append(dse)
            a["ll"].append(lm), a["ll_se"].append(lse)
            cells += [f"{m:.3f} ± {se:.3f}", f"{dm:+.3f} ± {dse:.3f}", f"{same:.2f}", f"{lm:+.4f} ± {lse:.4f}"]
        lines.append(cells)
    k = len(tasks)
    comb = lambda ses: math.sqrt(sum(s * s for s in ses)) / k
    cells = ["**average**", "", f"{sum(chances) / k:.2f}", f"{sum(base_acc) / k:.3f} ± {comb(base_se):.3f}"]
    for name, _ in rows:
        a = avg[name]
        cells += [f"{sum(a['acc']) / k:.3f} ± {comb(a['acc_se']):.3f}", f"{sum(a['d']) / k:+.3f} ± {comb(a['d_se']):.3f}",
                  "", f"{sum(a['ll']) / k:+.4f} ± {comb(a['ll_se']):.4f}"]
    lines.append(cells)
    if md:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for c in lines:
            print("| " + " | ".join(c) + " |")
    else:
        w = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(header)))
        for c in lines:
            print("  ".join(x.ljust(w[i]) for i, x in enumerate(c)))


if __name__ == "__main__":
    main(sys.argv[1:])
