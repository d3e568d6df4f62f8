#!/usr/bin/env python3
"""Training curves of `sinkq ppl|quantize --json` runs as SVG (no dependencies).

  python3 scripts/plot_training.py RUN.json [--title T] -o OUT.svg

Finds the calibration report in the run's JSON (any object with a "finetune" report holding
"blocks", or a "prefix_train" report) and draws:
  - block-wise fine-tuning (docs/train.md): per block, the block-output MSE relative to the grid
    search's (epoch 0 = before training, then each epoch's mean as it trained, the last point the
    MSE after training), one line per block, early blocks light, late blocks dark; and the MSE
    before / after per block on a log axis;
  - IntactKV+Cal: the objective before training and each epoch's mean.
"""
import argparse
import json
import math
import sys


def find(obj, key, need):
    """The first value under `key` (depth first) that is a dict holding `need`."""
    if isinstance(obj, dict):
        v = obj.get(key)
        if isinstance(v, dict) and need in v:
            return v
        for v in obj.values():
            r = find(v, key, need)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find(v, key, need)
            if r is not None:
                return r
    return None


class Panel:
    """One x/y chart inside the SVG at (x0, y0) of size w x h."""

    def __init__(self, x0, y0, w, h, xr, yr, title, xlabel, ylabel, logy=False):
        self.x0, self.y0, self.w, self.h = x0, y0, w, h
        self.logy = logy
        self.xr = xr
        self.yr = (math.log10(yr[0]), math.log10(yr[1])) if logy else yr
        self.out = []
        self.out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>')
        self.out.append(f'<text x="{x0 + w / 2}" y="{y0 - 10}" text-anchor="middle" font-size="14">{title}</text>')
        self.out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle" font-size="12">{xlabel}</text>')
        self.out.append(f'<text x="{x0 - 52}" y="{y0 + h / 2}" text-anchor="middle" font-size="12" '
                        f'transform="rotate(-90 {x0 - 52} {y0 + h / 2})">{ylabel}</text>')
        for i in range(5):
            fy = self.yr[0] + (self.yr[1] - self.yr[0]) * i / 4
            v = 10 ** fy if logy else fy
            py = self.py(v)
            self.out.append(f'<line x1="{x0}" y1="{py}" x2="{x0 + w}" y2="{py}" stroke="#eee"/>')
            self.out.append(f'<text x="{x0 - 6}" y="{py + 4}" text-anchor="end" font-size="10">{v:.3g}</text>')
        for i in range(5):
            v = xr[0] + (xr[1] - xr[0]) * i / 4
            self.out.append(f'<text x="{self.px(v)}" y="{y0 + h + 16}" text-anchor="middle" font-size="10">{v:.3g}</text>')

    def px(self, x):
        return self.x0 + (x - self.xr[0]) / ((self.xr[1] - self.xr[0]) or 1) * self.w

    def py(self, y):
        if self.logy:
            y = math.log10(max(y, 1e-30))
        return self.y0 + self.h - (y - self.yr[0]) / ((self.yr[1] - self.yr[0]) or 1) * self.h

    def line(self, xs, ys, color, width=1.5, label=None):
        pts = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in zip(xs, ys))
        self.out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}"/>')
        if label:
            self.out.append(f'<text x="{self.px(xs[-1]) + 4:.1f}" y="{self.py(ys[-1]) + 4:.1f}" font-size="10" '
                            f'fill="{color}">{label}</text>')


def shade(i, n):
    t = i / max(n - 1, 1)
    c = int(200 - 170 * t)
    return f"rgb({c},{c},{255 - int(80 * t)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    run = json.load(open(a.run))
    ft = find(run, "finetune", "blocks")  # the report, not the recipe's settings
    pt = find(run, "prefix_train", "epoch_loss")
    if not ft and not pt:
        sys.exit(f"{a.run}: no fine-tuning or prefix-training report found")
    panels = []
    if ft:
        blocks = ft["blocks"]
        E = len(blocks[0]["epoch_mse"])
        rel = [[1.0] + [e / b["mse_before"] for e in b["epoch_mse"]] + [b["mse_after"] / b["mse_before"]] for b in blocks]
        lo = min(min(r) for r in rel)
        hi = max(max(r) for r in rel)
        p = Panel(80, 50, 420, 300, (0, E + 1), (min(lo, 1.0) * 0.98, max(hi, 1.0) * 1.02),
                  "block MSE / grid-search MSE", "epoch (0: grid search; last: after training)", "relative MSE")
        for i, r in enumerate(rel):
            p.line(list(range(E + 2)), r, shade(i, len(rel)))
        panels.append(p)
        before = [b["mse_before"] for b in blocks]
        after = [b["mse_after"] for b in blocks]
        q = Panel(620, 50, 420, 300, (0, len(blocks) - 1), (min(before + after) * 0.8, max(before + after) * 1.25),
                  "block-output MSE per block", "block", "MSE (log)", logy=True)
        q.line(list(range(len(blocks))), before, "#c33", label="grid search")
        q.line(list(range(len(blocks))), after, "#33c", label="fine-tuned")
        panels.append(q)
    if pt:
        ys = [pt["initial_loss"]] + list(pt["epoch_loss"])
        y0 = 50 if not ft else 430
        r = Panel(80, y0, 420, 300, (0, len(ys) - 1), (min(ys) * 0.98, max(ys) * 1.02),
                  "IntactKV+Cal objective", "epoch (0: untrained prefix)", "1/2 sum_l ||f_l - y_l||^2 per token")
        r.line(list(range(len(ys))), ys, "#3a3", width=2)
        panels.append(r)
    height = 430 if not (ft and pt) else 810
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="1120" height="{height}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="560" y="20" text-anchor="middle" font-size="15">{a.title}</text>']
    for p in panels:
        svg += p.out
    svg.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
