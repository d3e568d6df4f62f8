"""Summarises lm_eval --log_samples runs of the cs_* tasks into one reference.json.

usage: python summarize.py --out reference.json --tokenizer HF_DIR RUN_DIR [RUN_DIR ...]

RUN_DIR is an lm_eval --output_path; the newest results_*.json under it and its samples_*.jsonl
are read. Runs are keyed by their --limit ("50", "200", or "all").

Per task and item: the log-likelihood of every choice exactly as lm-eval logged it (HFLM sums the
float32 log-softmax of the continuation tokens in float32, then converts to a Python float),
is_greedy per choice, the gold index, acc and acc_norm, the request strings (context,
continuation) and the continuation's token ids (HFLM._encode_pair with the same tokenizer).
acc_norm = argmax(ll / len(choice string)) == gold, as lm-eval's ConfigurableTask.process_results;
it is computed here for every task, also for those whose lm-eval definition does not report it
(winogrande, boolq, social_iqa) — `acc_norm_in_lm_eval` says which. Per-task acc / acc_norm and
stderr (lm-eval's mean_stderr: sample std with n-1 over sqrt(n)); where lm-eval reported a
metric, it is checked to equal the recomputed one.
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

TASKS = ["piqa", "arc_easy", "arc_challenge", "winogrande", "boolq", "openbookqa", "social_iqa"]
HERE = os.path.dirname(os.path.abspath(__file__))


def mean_stderr(x):
    n = len(x)
    mu = sum(x) / n
    if n < 2:
        return mu, float("nan")
    var = sum((v - mu) ** 2 for v in x) / (n - 1)
    return mu, math.sqrt(var) / math.sqrt(n)


def encode_pair(tok, context, continuation):
    # lm_eval.models.huggingface.HFLM._encode_pair (tok_encode adds what the tokenizer adds by
    # default: nothing for this model).
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok(context + continuation).input_ids
    ctx = tok(context).input_ids
    return ctx, whole[len(ctx):]


def newest(pattern):
    files = sorted(glob.glob(pattern, recursive=True))
    if not files:
        sys.exit(f"nothing matches {pattern}")
    return files[-1]


def summarise_run(run_dir, tok):
    res_path = newest(os.path.join(run_dir, "**", "results_*.json"))
    res = json.load(open(res_path))
    stamp = os.path.basename(res_path)[len("results_"):-len(".json")]
    limit = res["config"].get("limit")
    out = {"results_file": res_path, "limit": limit, "total_evaluation_time_seconds":
           float(res.get("total_evaluation_time_seconds", "nan")), "tasks": {}}
    sys.path.insert(0, os.path.join(HERE, "tasks"))
    import preprocess_winogrande as wg  # noqa: E402

    for task in TASKS:
        name = "cs_" + task
        if name not in res["results"]:
            continue
        spath = os.path.join(os.path.dirname(res_path), f"samples_{name}_{stamp}.jsonl")
        samples = [json.loads(l) for l in open(spath)]
        samples.sort(key=lambda s: s["doc_id"])
        cfg = res["configs"][name]
        delim = cfg.get("target_delimiter", " ")
        items, accs, norms = [], [], []
        for s in samples:
            args = [s["arguments"][f"gen_args_{i}"] for i in range(len(s["arguments"]))]
            reqs = [(a["arg_0"], a["arg_1"]) for a in args]
            ll = [float(r[0]) for r in s["filtered_resps"]]
            greedy = [r[1] in (True, "True") for r in s["filtered_resps"]]
            doc = s["doc"]
            if task == "winogrande":
                choices = wg.doc_to_choice(doc)  # the contexts: lm-eval's multiple_input task
                gold = wg.doc_to_text(doc)
            else:
                choices = [c[len(delim):] for _, c in reqs]
                assert all(c.startswith(delim) for _, c in reqs)
                gold = int(s["target"])
            lens = np.array([float(len(c)) for c in choices])
            lls = np.array(ll)
            pred = int(np.argmax(lls))
            pred_norm = int(np.argmax(lls / lens))
            acc = 1.0 if pred == gold else 0.0
            acc_norm = 1.0 if pred_norm == gold else 0.0
            assert acc == s["acc"], (task, s["doc_id"], acc, s["acc"])
            if "acc_norm" in s:
                assert acc_norm == s["acc_norm"], (task, s["doc_id"])
            accs.append(acc)
            norms.append(acc_norm)
            toks = [encode_pair(tok, c, k) for c, k in reqs]
            items.append({
                "index": s["doc_id"], "gold": gold, "ll": ll, "greedy": greedy,
                "pred": pred, "pred_norm": pred_norm, "acc": acc, "acc_norm": acc_norm,
                "choices": choices, "choice_chars": [len(c) for c in choices],
                "contexts": [c for c, _ in reqs], "continuations": [k for _, k in reqs],
                "context_tokens": [len(c) for c, _ in toks],
                "continuation_ids": [k for _, k in toks],
            })
        acc, acc_se = mean_stderr(accs)
        acc_norm, acc_norm_se = mean_stderr(norms)
        r = res["results"][name]
        assert abs(r["acc,none"] - acc) < 1e-12 and abs(r["acc_stderr,none"] - acc_se) < 1e-12, (task, r)
        if "acc_norm,none" in r:
            assert abs(r["acc_norm,none"] - acc_norm) < 1e-12, (task, r)
        out["tasks"][task] = {
            "lm_eval_task": name, "n": len(items), "n_in_file": res["n-samples"][name]["original"],
            "acc": acc, "acc_stderr": acc_se, "acc_norm": acc_norm, "acc_norm_stderr": acc_norm_se,
            "acc_norm_in_lm_eval": "acc_norm,none" in r,
            "doc_to_text": cfg.get("doc_to_text"), "target_delimiter": delim,
            "items": items,
        }
    meta = {k: res.get(k) for k in ("lm_eval_version", "transformers_version", "model_name",
                                      "tokenizer_bos_token", "max_length")}
    meta["config"] = res["config"]
    return str(int(limit)) if limit else "all", out, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    from importlib.metadata import version
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    ref = {"description": "lm-evaluation-harness zero-shot reference, SmolLM2-135M-Instruct Q4_1 GGUF "
                          "dequantised to float32 by transformers, hf model, batch_size 1, cpu, eager "
                          "attention, no BOS; tasks bench/lmeval/tasks/cs_*.yaml over "
                          "shared/data/commonsense (first `limit` items of each file)",
           "versions": {p: version(p) for p in ("lm-eval", "transformers", "torch", "gguf", "accelerate",
                                                "tokenizers", "numpy")},
           "by_limit": {}}
    for run in a.runs:
        key, out, meta = summarise_run(run, tok)
        ref.setdefault("lm_eval_meta", meta)
        if key in ref["by_limit"]:
            ref["by_limit"][key]["tasks"].update(out["tasks"])
        else:
            ref["by_limit"][key] = out
    # Consistency: the first items of a larger run equal the smaller run's (same batch size).
    keys = sorted(ref["by_limit"], key=lambda k: float("inf") if k == "all" else int(k))
    for small, big in zip(keys, keys[1:]):
        for task, t in ref["by_limit"][small]["tasks"].items():
            tb = ref["by_limit"][big]["tasks"].get(task)
            if tb:
                d = max(abs(x - y) for i, j in zip(t["items"], tb["items"]) for x, y in zip(i["ll"], j["ll"]))
                t[f"max_abs_ll_diff_vs_limit_{big}"] = d
    json.dump(ref, open(a.out, "w"), indent=1, ensure_ascii=False)
    print(f"wrote {a.out}")
    print(f"{'limit':>6} {'task':<14} {'n':>4}  {'acc':>6} {'±':>6}  {'acc_norm':>8} {'±':>6}")
    for key in keys:
        for task in TASKS:
            t = ref["by_limit"][key]["tasks"].get(task)
            if t:
                star = "" if t["acc_norm_in_lm_eval"] else " *"
                print(f"{key:>6} {task:<14} {t['n']:>4}  {t['acc']:.4f} {t['acc_stderr']:.4f}  "
                      f"{t['acc_norm']:.4f}   {t['acc_norm_stderr']:.4f}{star}")
    print("* acc_norm not reported by lm-eval's definition of the task; computed here the same way")


if __name__ == "__main__":
    main()
