#!/usr/bin/env python3
"""Helpers of bench/server/lmeval_local.sh (stdlib only; not run by CI).

  compare_lmeval.py windows --port PORT --model GGUF --file WIKITEXT --ctx 512 --windows 4 --out W.json
      The first WINDOWS windows of CTX tokens of WIKITEXT cut as `sinkq ppl --protocol gptq` cuts
      them (src/eval/ppl.cc: scoring_tokens = the text tokenized raw, no special tokens added or
      parsed; [BOS] in front only when the tokenizer adds one — SmolLM2's does not), each sent to
      the running server as token ids with echo=true, logprobs=0, max_tokens=0; the mean
      −logprob of tokens 1..CTX−1 per window goes to W.json.

  compare_lmeval.py compare --lmeval-dir DIR --sinkq-eval EVAL.json --ppl PPL.json --windows W.json
                            [--tol 1e-3] [--ppl-rtol 1e-6] [--hf-reference reference.json]
      lm-eval's --log_samples (local-completions against sinkq serve) item by item against
      `sinkq eval --samples --json`: acc / acc_norm per task, pred and pred_norm per item,
      is_greedy per choice, and every choice's log-likelihood within --tol nats; and the windows'
      NLL against `sinkq ppl --json`'s window_nll within --ppl-rtol (relative). Exit 1 on any
      mismatch. With --diag, a table that explains the mismatches (not a check).

  compare_lmeval.py diagnose --port PORT --lmeval-dir DIR --out DIAG.json
      Re-sends lm-eval's loglikelihood requests (as lm-eval builds them) to the running server
      and records, per choice, completion_tokens / finish_reason and both the sum lm-eval takes
      (token_logprobs[ctxlen:-1]) and the continuation's own sum (token_logprobs[ctxlen:len(prompt)]).
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serve_util import SINKQ  # noqa: E402

TASKS = {"arc_easy": "cs_arc_easy", "piqa": "cs_piqa"}


# ---------------------------------------------------------------- windows
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def raw_tokens(model, text):
    """`sinkq tokenize --no-special`: no BOS/EOS added, special tokens not parsed (= scoring_tokens)."""
    r = subprocess.run([SINKQ, "tokenize", "-m", model, "--no-special", "--json", "--text", text],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["ids"]


def cmd_windows(a):
    need = a.ctx * a.windows
    with open(a.file, encoding="utf-8", newline="") as f:
        text = f.read().replace("\r\n", "\n")  # read_text_file reads CRLF as LF
    info = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{a.port}/tokenizer_info", timeout=60).read())
    bos = []
    if info.get("add_bos_token"):
        bos = post(a.port, "/tokenize", {"prompt": info["bos_token"], "add_special_tokens": False})["tokens"]
    # The whole file does not fit one argv string (128 KiB): tokenize a prefix cut at a line end,
    # long enough, and check that a longer prefix gives the same first tokens (BPE merges do not
    # cross a newline pre-token boundary far away).
    chars = 8 * need
    while True:
        cut = text.rfind("\n", 0, chars) + 1
        toks = raw_tokens(a.model, text[:cut])
        if len(bos) + len(toks) > need + 64:
            break
        chars *= 2
    cut2 = text.rfind("\n", 0, int(chars * 1.5)) + 1
    toks2 = raw_tokens(a.model, text[:cut2])
    assert toks2[: len(toks) - 64] == toks[:-64], "the prefix's tokens depend on where the text is cut"
    via_server = post(a.port, "/tokenize", {"prompt": text[:cut], "add_special_tokens": False})["tokens"]
    stream = bos + toks
    out = {"ctx": a.ctx, "file": a.file, "bos": bos, "server_tokenize_equal": via_server == toks, "windows": []}
    for k in range(a.windows):
        w = stream[k * a.ctx:(k + 1) * a.ctx]
        r = post(a.port, "/v1/completions", {"prompt": w, "echo": True, "logprobs": 0, "max_tokens": 0,
                                             "temperature": 0})
        ch = r["choices"][0]
        lps = ch["logprobs"]["token_logprobs"]
        assert len(lps) == a.ctx and lps[0] is None, (len(lps), lps[:2])
        assert r["usage"]["completion_tokens"] == 0, r["usage"]
        nll = -math.fsum(lps[1:]) / (a.ctx - 1)
        out["windows"].append({"nll": nll, "first_ids": w[:8]})
        print(f"window {k}: server mean −logprob of tokens 1..{a.ctx - 1} = {nll:.12f}", flush=True)
    json.dump(out, open(a.out, "w"), indent=1)


# ---------------------------------------------------------------- diagnose
def cmd_diagnose(a):
    """Re-sends lm-eval's loglikelihood requests as lm-eval builds them (TemplateLM._encode_pair
    over the remote tokenizer; echo, logprobs 1, max_tokens 1, temperature 0) and records, per
    choice, what the server generated and two sums of its echoed logprobs: lm-eval's
    token_logprobs[ctxlen:-1] (which assumes that the last entry is one generated token) and the
    continuation's own tokens token_logprobs[ctxlen:len(prompt)]."""
    def tok(text):
        return post(a.port, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]

    out = {}
    for task in TASKS:
        items, _, _ = lmeval_items(a.lmeval_dir, task, with_args=True)
        rows = out[task] = {}
        for it in items:
            per = []
            for context, continuation in it["args"]:
                n_spaces = len(context) - len(context.rstrip())
                if n_spaces > 0:
                    continuation = context[-n_spaces:] + continuation
                    context = context[:-n_spaces]
                whole = tok(context + continuation)
                ctxlen = len(tok(context))
                r = post(a.port, "/v1/completions", {"prompt": whole, "echo": True, "logprobs": 1, "max_tokens": 1,
                                                     "temperature": 0, "seed": 1234})
                ch = r["choices"][0]
                lps = ch["logprobs"]["token_logprobs"]
                per.append({"ctxlen": ctxlen, "prompt_tokens": len(whole),
                            "completion_tokens": r["usage"]["completion_tokens"], "finish": ch["finish_reason"],
                            "lm_eval_sum": sum(lps[ctxlen:-1]), "continuation_sum": sum(lps[ctxlen:len(whole)])})
            rows[str(it["index"])] = per
        print(f"diagnose {task}: {len(rows)} items re-sent", flush=True)
    json.dump(out, open(a.out, "w"), indent=1)


# ---------------------------------------------------------------- compare
def newest(pattern):
    files = sorted(glob.glob(pattern, recursive=True))
    if not files:
        sys.exit(f"nothing matches {pattern}")
    return files[-1]


def argmax(xs):  # np.argmax: the first maximum
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def gap(xs):
    """Distance between the largest and the second largest value."""
    s = sorted(xs, reverse=True)
    return s[0] - s[1] if len(s) > 1 else math.inf


def lmeval_items(lm_dir, task, with_args=False):
    res_path = newest(os.path.join(lm_dir, "**", "results_*.json"))
    res = json.load(open(res_path))
    stamp = os.path.basename(res_path)[len("results_"):-len(".json")]
    spath = os.path.join(os.path.dirname(res_path), f"samples_{TASKS[task]}_{stamp}.jsonl")
    samples = sorted((json.loads(l) for l in open(spath)), key=lambda s: s["doc_id"])
    items = []
    for s in samples:
        ll = [float(r[0]) for r in s["filtered_resps"]]
        greedy = [r[1] in (True, "True") for r in s["filtered_resps"]]
        delim = " "
        args = [s["arguments"][f"gen_args_{i}"] for i in range(len(s["arguments"]))]
        chars = [len(x["arg_1"]) - len(delim) for x in args]
        items.append({"index": s["doc_id"], "gold": int(s["target"]), "ll": ll, "greedy": greedy, "chars": chars,
                      "acc": float(s["acc"]), "acc_norm": float(s["acc_norm"])})
        if with_args:
            items[-1]["args"] = [(x["arg_0"], x["arg_1"]) for x in args]
    r = res["results"][TASKS[task]]
    return items, {"acc": r["acc,none"], "acc_norm": r["acc_norm,none"]}, res


def diagnosis(a, sq):
    """Not a check (the table above is): explains its mismatches from the re-sent requests."""
    diag = json.load(open(a.diag))
    print()
    print("Diagnosis (the same requests re-sent; `stopped` = the server generated no token because the model's next "
          "token is a stop id, so its echo logprobs end at the prompt and lm-eval's [ctxlen:-1] drops the last "
          "continuation token):")
    print()
    print("| task | choices | stopped (completion_tokens 0) | lm-eval's logged ll = re-sent [ctxlen:-1] | mismatching choices "
          "that are stopped ones | continuation sum vs sinkq eval: max abs Δ (nats) | median | pred / pred_norm differ |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for task in TASKS:
        items, _, _ = lmeval_items(a.lmeval_dir, task)
        d = diag[task]
        by_index = {it["index"]: it for it in sq[task]["items"]}
        n = stopped = same = mism = mism_stopped = 0
        diffs = []
        npred = nnorm = 0
        for it in items:
            per = d[str(it["index"])]
            s = by_index[it["index"]]
            cont = [p["continuation_sum"] for p in per]
            for x, p, y in zip(it["ll"], per, s["ll"]):
                n += 1
                stopped += p["completion_tokens"] == 0
                same += x == p["lm_eval_sum"]
                if abs(x - y) > a.tol:
                    mism += 1
                    mism_stopped += p["completion_tokens"] == 0
                diffs.append(abs(p["continuation_sum"] - y))
            npred += argmax(cont) != s["pred"]
            nnorm += argmax([l / c for l, c in zip(cont, it["chars"])]) != s["pred_norm"]
        diffs.sort()
        print(f"| {task} | {n} | {stopped} | {same}/{n} | {mism_stopped}/{mism} | {diffs[-1]:.3g} | "
              f"{diffs[len(diffs) // 2]:.3g} | {npred} / {nnorm} |")


def cmd_compare(a):
    ev = json.load(open(a.sinkq_eval))
    sq = {t["task"]: t for t in ev["tasks"]}
    hf = None
    if a.hf_reference and os.path.exists(a.hf_reference):
        hf = json.load(open(a.hf_reference))
    bad = []
    print(f"| task | n | acc (lm-eval → serve) | acc (sinkq eval) | acc_norm (lm-eval → serve) | acc_norm (sinkq eval) "
          f"| pred differs | pred_norm differs | greedy differs | max abs Δll (nats) | median abs Δll | max rel Δll |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for task in TASKS:
        items, agg, res = lmeval_items(a.lmeval_dir, task)
        t = sq[task]
        by_index = {it["index"]: it for it in t["items"]}
        n_pred = n_norm = n_greedy = 0
        diffs, rels = [], []
        worst = None
        for it in items:
            s = by_index.get(it["index"])
            if s is None:
                bad.append(f"{task} item {it['index']}: not in sinkq eval's items")
                continue
            if s["gold"] != it["gold"] or len(s["ll"]) != len(it["ll"]) or s["chars"] != it["chars"]:
                bad.append(f"{task} item {it['index']}: gold/choices differ (lm-eval gold {it['gold']} chars "
                           f"{it['chars']}, sinkq {s['gold']} {s['chars']})")
                continue
            for x, y in zip(it["ll"], s["ll"]):
                d = abs(x - y)
                diffs.append(d)
                rels.append(d / max(abs(y), 1e-30))
                if worst is None or d > worst[0]:
                    worst = (d, it["index"], x, y)
                if d > a.tol:
                    bad.append(f"{task} item {it['index']}: ll {x!r} (server) vs {y!r} (sinkq eval), |Δ| {d:.3g} > {a.tol}")
            pred, pred_norm = argmax(it["ll"]), argmax([l / c for l, c in zip(it["ll"], it["chars"])])
            if pred != s["pred"]:
                n_pred += 1
                bad.append(f"{task} item {it['index']}: pred {pred} (server) vs {s['pred']} (sinkq eval); ll gap "
                           f"{gap(s['ll']):.3g}")
            if pred_norm != s["pred_norm"]:
                n_norm += 1
                bad.append(f"{task} item {it['index']}: pred_norm {pred_norm} vs {s['pred_norm']}")
            if it["greedy"] != s["greedy"]:
                n_greedy += 1
                bad.append(f"{task} item {it['index']}: is_greedy {it['greedy']} (server) vs {s['greedy']} (sinkq eval)")
            if (pred == it["gold"]) != (it["acc"] == 1.0):
                bad.append(f"{task} item {it['index']}: lm-eval's acc {it['acc']} is not argmax(ll) == gold")
        for m in ("acc", "acc_norm"):
            if abs(agg[m] - t[m]) > 1e-12:
                bad.append(f"{task}: {m} {agg[m]} (lm-eval → serve) vs {t[m]} (sinkq eval)")
        if len(items) != t["n"]:
            bad.append(f"{task}: {len(items)} items (lm-eval) vs {t['n']} (sinkq eval)")
        diffs.sort()
        med = diffs[len(diffs) // 2] if diffs else float("nan")
        print(f"| {task} | {len(items)} | {agg['acc']:.4f} | {t['acc']:.4f} | {agg['acc_norm']:.4f} | {t['acc_norm']:.4f} "
              f"| {n_pred} | {n_norm} | {n_greedy} | {max(diffs):.3g} | {med:.3g} | {max(rels):.3g} |")
        if worst:
            print(f"  worst: item {worst[1]}: {worst[2]!r} (server) vs {worst[3]!r} (sinkq eval)")
        if hf:  # the earlier session's lm-eval hf-model run (transformers fp32) on the first items
            for key, run in hf["by_limit"].items():
                ht = run["tasks"].get(task)
                if not ht:
                    continue
                srv = {it["index"]: it for it in items}
                d = [abs(x - y) for h in ht["items"] if h["index"] in srv for x, y in zip(h["ll"], srv[h["index"]]["ll"])]
                both = [h for h in ht["items"] if h["index"] in srv]
                same_pred = sum(argmax(h["ll"]) == argmax(srv[h["index"]]["ll"]) for h in both)
                print(f"  vs lm-eval's hf model (transformers fp32, limit {key}; not a check): {len(d)} choices, max |Δll| "
                      f"{max(d):.3g}, median {sorted(d)[len(d) // 2]:.3g}; same pred {same_pred}/{len(both)}")
    print(f"  lm-eval: model {res.get('model_name')!r}, config model_args {res['config'].get('model_args')!r}")

    if a.diag and os.path.exists(a.diag):
        diagnosis(a, sq)

    # perplexity windows
    ppl = json.load(open(a.ppl))
    win = json.load(open(a.windows))
    print()
    print(f"| window | server mean −logprob (tokens 1..{win['ctx'] - 1}) | sinkq ppl window_nll | abs diff | rel diff |")
    print("|---:|---:|---:|---:|---:|")
    if ppl["ctx"] != win["ctx"] or ppl["protocol"] != "gptq" or len(ppl["window_nll"]) != len(win["windows"]):
        bad.append(f"ppl: ctx {ppl['ctx']} protocol {ppl['protocol']} windows {len(ppl['window_nll'])} vs "
                   f"ctx {win['ctx']} windows {len(win['windows'])}")
    for k, (w, p) in enumerate(zip(win["windows"], ppl["window_nll"])):
        d = abs(w["nll"] - p)
        r = d / abs(p)
        print(f"| {k} | {w['nll']:.12f} | {p:.12f} | {d:.3g} | {r:.3g} |")
        if r > a.ppl_rtol:
            bad.append(f"ppl window {k}: server {w['nll']!r} vs sinkq ppl {p!r} (rel {r:.3g} > {a.ppl_rtol})")
    if not win.get("server_tokenize_equal", False):
        print("  note: the server's /tokenize (special tokens parsed) differs from `sinkq tokenize --no-special` on this text")
    print()
    for b in bad[:60]:
        print("MISMATCH", b)
    if len(bad) > 60:
        print(f"... {len(bad) - 60} more")
    print(f"{len(bad)} mismatches")
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("windows")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--model", required=True)
    w.add_argument("--file", required=True)
    w.add_argument("--ctx", type=int, default=512)
    w.add_argument("--windows", type=int, default=4)
    w.add_argument("--out", required=True)
    d = sub.add_parser("diagnose")
    d.add_argument("--port", type=int, required=True)
    d.add_argument("--lmeval-dir", required=True)
    d.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--lmeval-dir", required=True)
    c.add_argument("--sinkq-eval", required=True)
    c.add_argument("--ppl", required=True)
    c.add_argument("--windows", required=True)
    c.add_argument("--tol", type=float, default=1e-3, help="per-choice |Δ log-likelihood| allowed (nats)")
    c.add_argument("--ppl-rtol", type=float, default=1e-6, help="per-window relative NLL difference allowed")
    c.add_argument("--hf-reference", default="/tmp/lmeval-out/reference.json")
    c.add_argument("--diag", default=None, help="the output of `diagnose` (explains mismatches; not a check)")
    a = ap.parse_args()
    {"windows": cmd_windows, "diagnose": cmd_diagnose, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
