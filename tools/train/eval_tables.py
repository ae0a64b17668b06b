"""Markdown tables from tools/train/eval_report.sh's output (docs/models.md, docs/quantization.md):
  python3 tools/train/eval_tables.py OUT.tsv [OUT2.tsv ...]"""
import json
import sys

BOUND = {"fp8": 1, "int8": 1, "int4": 3, "nvfp4": 3, "kivi2": 6}


def load(paths):
    r = {}
    for p in paths:
        for line in open(p):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            m, what, cmd, out = parts[:4]
            try:
                r[(m, what)] = json.loads(out)
            except json.JSONDecodeError:
                r[(m, what)] = {"error": out}
    return r


def ret(r, m, what):
    v = r.get((m, what))
    if v is None:
        return "—", None
    if "error" in v:
        return "refused", None
    return f"{v['correct']}/{v['trials']}", v["correct"]


def main(paths):
    r = load(paths)
    models = [("gqa", "pagoda-tiny (GQA)"), ("mla", "pagoda-tiny-mla")]
    print("| model | retrieval 1024 | 2048 | 4088 | perplexity, held-out stories | perplexity, trained-on Shakespeare |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for m, name in models:
        cells = [ret(r, m, f"retrieval bf16 {c}")[0] for c in (1024, 2048, 4088)]
        pp = [r.get((m, f"ppl {k} bf16"), {}).get("perplexity") for k in ("held-out", "trained-on")]
        pp = [f"{x:.1f}" if x and x > 10 else (f"{x:.4f}" if x else "—") for x in pp]
        print(f"| {name} | " + " | ".join(cells + pp) + " |")
    print()
    for m, name in models:
        print(f"**{name}**, retrieval at 2048 tokens (24 keys), KL and perplexity on the first 4096 held-out tokens (W 1024):\n")
        print("| KV format | retrieval | misses vs bf16 | allowed | perplexity | Δ vs bf16 | KL mean | KL p99 | top-1 agreement |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        base = ret(r, m, "retrieval bf16 2048")[1]
        ref = r.get((m, "ppl held-out bf16"), {}).get("perplexity")
        print(f"| bf16 | {ret(r, m, 'retrieval bf16 2048')[0]} | — | — | {ref:.2f} | — | — | — | — |" if ref else "| bf16 | | | | | | | | |")
        for d in ("fp8", "int8", "int4", "nvfp4", "kivi2"):
            cell, c = ret(r, m, f"retrieval {d} 2048")
            miss = str(base - c) if (c is not None and base is not None) else "—"
            k = r.get((m, f"kl {d}"), {})
            if "kl_mean" in k:
                kl = f"{k['perplexity']:.2f} | {100 * (k['perplexity'] / k['perplexity_reference'] - 1):+.1f}% | {k['kl_mean']:.4f} | {k['kl_p99']:.3f} | {100 * k['top1_agreement']:.1f}%"
            else:
                kl = " | ".join(["refused" if "error" in k else "—"] * 5)
            print(f"| {d} | {cell} | {miss} | ≤{BOUND[d]} | {kl} |")
        print()
        pols = []
        for (mm, w), v in r.items():
            if mm != m or "--kv" not in w:
                continue
            fp = w[len("retrieval "):-len(" 2048")] if w.startswith("retrieval") else w[len("kl "):]
            if fp not in pols:
                pols.append(fp)
        if pols:
            print(f"Mixed precision on {name} (retrieval at 2048, 24 keys; KL and perplexity as above):\n")
            print("| format and policy | retrieval | misses vs bf16 | KL mean | KL p99 | Δ perplexity |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for fp in pols:
                cell, c = ret(r, m, f"retrieval {fp} 2048")
                miss = str(base - c) if (c is not None and base is not None) else ("—" if cell == "—" else "—")
                k = r.get((m, "kl " + fp), {})
                if "kl_mean" in k:
                    klc = f"{k['kl_mean']:.4f} | {k['kl_p99']:.3f} | {100 * (k['perplexity'] / k['perplexity_reference'] - 1):+.1f}%"
                else:
                    klc = "refused | refused | refused" if "error" in k else "— | — | —"
                print(f"| {fp} | {cell} | {miss} | {klc} |")
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
