#!/usr/bin/env python3
"""The paired table of the peer harness: per-window NLLs of two runs on the same windows, their
difference as mean ± standard error over windows.

    python bench/peers/pair.py --base FP.json  ROW_NAME:A.json:B.json [ROW_NAME:A.json:B.json ...]

Each JSON is either `sinkq ppl --json` (fields window_nll, ctx, protocol) or what a run_official.sh
writes (windows: [{nll_sum, targets}, ...], or window_nll + window_targets).
A row prints, for A (the official code) and B (sinkq): ppl, Δ NLL from --base (nats per token,
± s.e.) and B − A ± s.e. The standard error is that of the mean of the per-window paired
differences (sd / sqrt(windows)); both sides must have scored the same number of windows with the
same target counts, else the row is refused (they did not see the same windows).
"""
import argparse
import json
import math
import sys


def load(path):
    j = json.load(open(path))
    if "windows" in j and isinstance(j["windows"], list):  # run_official.sh: per-window objects
        w = j["windows"]
        return [x["nll_sum"] / x["targets"] for x in w], [x["targets"] for x in w]
    nll = j["window_nll"]
    if "window_targets" in j:
        tg = j["window_targets"]
    else:  # sinkq: ctx − 1 predictions per window in the bos and prefix protocols
        assert j.get("protocol") in ("bos", "prefix", "plain"), f"{path}: protocol {j.get('protocol')}"
        tg = [j["ctx"] - 1] * len(nll)
    return nll, tg


def paired(a, b):
    d = [y - x for x, y in zip(a, b)]
    m = sum(d) / len(d)
    sd = math.sqrt(sum((v - m) ** 2 for v in d) / (len(d) - 1)) if len(d) > 1 else float("nan")
    return m, sd / math.sqrt(len(d))


def ppl(nll, tg):
    return math.exp(sum(n * t for n, t in zip(nll, tg)) / sum(tg))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the fp run both rows are compared with")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("rows", nargs="+", help="NAME:OFFICIAL.json:SINKQ.json")
    args = ap.parse_args()
    base = load(args.base) if args.base else None
    hdr = ["row", "official ppl", "sinkq ppl", "official Δ", "sinkq Δ", "sinkq − official", "windows"]
    out = []
    for r in args.rows:
        name, pa, pb = r.rsplit(":", 2)
        (a, ta), (b, tb) = load(pa), load(pb)
        qa, qb = (json.load(open(x)).get("protocol") for x in (pa, pb))
        if qa and qb and qa != qb:
            sys.exit(f"row {name}: protocols differ ({qa} vs {qb}): not the same windows")
        if ta != tb:
            sys.exit(f"row {name}: the two runs scored different windows ({len(ta)} vs {len(tb)} windows, "
                     f"{sum(ta)} vs {sum(tb)} targets)")
        cells = [name, f"{ppl(a, ta):.3f}", f"{ppl(b, tb):.3f}"]
        for x in (a, b):
            if base and base[1] == ta:
                m, se = paired(base[0], x)
                cells.append(f"{m:+.4f} ± {se:.4f}")
            else:
                cells.append("—")
        m, se = paired(a, b)
        tol = 2 * se + 1e-6  # 1e-6 nats: the printed rounding of the JSONs, so equal runs read "same"
        verdict = "worse" if m > tol else ("better" if m < -tol else "same")
        cells.append(f"{m:+.4f} ± {se:.4f} ({verdict})")
        cells.append(str(len(a)))
        out.append(cells)
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for c in out:
            print("| " + " | ".join(c) + " |")
    else:
        w = [max(len(x[i]) for x in out + [hdr]) for i in range(len(hdr))]
        for c in [hdr] + out:
            print("  ".join(s.ljust(w[i]) for i, s in enumerate(c)))


if __name__ == "__main__":
    main()
