"""Plots the loss logs of models/training/ into docs/pagoda-tiny-loss.png:
  python3 tools/train/plot_loss.py models/training docs/pagoda-tiny-loss.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows] for k in rows[0]}


def main(src, out):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, color in (("gqa", "tab:blue"), ("mla", "tab:orange")):
        r = read(f"{src}/loss-{name}.csv")
        tok = [t / 1e6 for t in r["tokens"]]
        axes[0].plot(tok, r["text_loss"], color=color, label=f"{name.upper()}: text rows")
        axes[0].plot(tok, r["answer_loss"], color=color, linestyle="--", label=f"{name.upper()}: pass-key answer tokens")
        axes[1].plot(tok, r["answer_acc"], color=color, label=f"{name.upper()}")
        try:
            r2 = read(f"{src}/run2-dropout/loss-{name}.csv")
            axes[1].plot([t / 1e6 for t in r2["tokens"]], r2["answer_acc"], color=color, linestyle=":",
                         label=f"{name.upper()}, run 2 (dropout 0.1, less text)")
        except FileNotFoundError:
            pass
    axes[0].set_yscale("log")
    axes[0].set_xlabel("training tokens (millions)")
    axes[0].set_ylabel("cross-entropy (nats)")
    axes[0].set_title("pagoda-tiny training loss")
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("training tokens (millions)")
    axes[1].set_ylabel("teacher-forced accuracy on answer tokens")
    axes[1].set_title("retrieval answers (all variants)")
    axes[1].legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
