#!/usr/bin/env python3
"""Training curves of `sinkq ppl|quantize --json` runs as SVG (needs matplotlib: pip install matplotlib).

  python3 scripts/plot_training.py RUN.json [--title T] -o OUT.svg

Finds the calibration report in the run's JSON (any object with a "finetune" report holding
"blocks", or a "prefix_train" report) and draws:
  - block-wise fine-tuning (docs/train.md): per block, the block-output MSE relative to the grid
    search's (epoch 0 = before training, then each epoch's mean as it trained, the last point the
    MSE after training), one line per block, early blocks light, late blocks dark (colour bar); and
    the MSE before / after per block on a log axis;
  - IntactKV+Cal: the objective before training and each epoch's mean.
The SVG is deterministic (fixed hash salt, no date).
"""
import argparse
import json
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


def plot(ft, pt, title, out):
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_training: needs matplotlib (pip install matplotlib)")
    from matplotlib import cm, colors
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    nrows = (1 if ft else 0) + (1 if pt else 0)
    with matplotlib.rc_context({"svg.hashsalt": "sinkq-plot-training", "font.size": 10}):
        fig = Figure(figsize=(12, 4.6 * nrows + (0.4 if title else 0)), layout="constrained")
        grid = fig.add_gridspec(nrows, 2)
        row = 0
        if ft:
            blocks = ft["blocks"]
            E = len(blocks[0]["epoch_mse"])
            rel = [[1.0] + [e / b["mse_before"] for e in b["epoch_mse"]] + [b["mse_after"] / b["mse_before"]]
                   for b in blocks]
            cmap = matplotlib.colormaps["viridis_r"]
            norm = colors.Normalize(0, max(len(blocks) - 1, 1))
            ax = fig.add_subplot(grid[row, 0])
            xs = list(range(E + 2))
            for i, r in enumerate(rel):
                ax.plot(xs, r, color=cmap(norm(i)), linewidth=1.2)
            ax.axhline(1.0, color="#888", linestyle=":", linewidth=1)
            ax.set_xlim(0, E + 1)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title("block MSE / grid-search MSE")
            ax.set_xlabel(f"epoch (0: grid search; {E + 1}: after training)")
            ax.set_ylabel("relative MSE")
            ax.grid(color="#eee")
            sm = cm.ScalarMappable(norm=norm, cmap=cmap)
            fig.colorbar(sm, ax=ax, label="block", pad=0.01).locator = MaxNLocator(integer=True)

            bx = fig.add_subplot(grid[row, 1])
            layers = [b.get("layer", i) for i, b in enumerate(blocks)]
            bx.plot(layers, [b["mse_before"] for b in blocks], "o-", color="#c33", markersize=3, label="grid search")
            bx.plot(layers, [b["mse_after"] for b in blocks], "s-", color="#33c", markersize=3, label="fine-tuned")
            bx.set_yscale("log")
            bx.xaxis.set_major_locator(MaxNLocator(integer=True))
            bx.set_title("block-output MSE per block")
            bx.set_xlabel("block")
            bx.set_ylabel("MSE (log)")
            bx.grid(color="#eee", which="both")
            bx.legend(loc="best", frameon=True, framealpha=0.9)
            row += 1
        if pt:
            ys = [pt["initial_loss"]] + list(pt["epoch_loss"])
            ax = fig.add_subplot(grid[row, 0])
            ax.plot(range(len(ys)), ys, "o-", color="#3a3", linewidth=2, markersize=3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title("IntactKV+Cal objective")
            ax.set_xlabel("epoch (0: untrained prefix)")
            ax.set_ylabel(r"$\frac{1}{2}\sum_l \|f_l - y_l\|^2$ per token")
            ax.grid(color="#eee")
        if title:
            fig.suptitle(title, fontsize=12)
        fig.savefig(out, format="svg", metadata={"Date": None})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    with open(a.run) as f:
        run = json.load(f)
    ft = find(run, "finetune", "blocks")  # the report, not the recipe's settings
    pt = find(run, "prefix_train", "epoch_loss")
    if not ft and not pt:
        sys.exit(f"{a.run}: no fine-tuning or prefix-training report found")
    plot(ft, pt, a.title, a.out)


if __name__ == "__main__":
    main()
