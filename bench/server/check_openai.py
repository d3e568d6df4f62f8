#!/usr/bin/env python3
"""The real `openai` Python client against `sinkq serve`, checked token for token against
`sinkq generate` (not run by CI; a person runs it).

    python3 -m venv /tmp/openai-venv && /tmp/openai-venv/bin/pip install -r bench/server/requirements.txt
    /tmp/openai-venv/bin/python bench/server/check_openai.py

For SmolLM2-135M-Instruct and stories260K it starts `sinkq serve --port 0 --json` (SmolLM2 with
--api-key and --alias, so the client's Authorization header and the model name are exercised), and:

* completions, greedy and seeded sampling (temperature 0.8 with top_p 0.95, top_k 40 — top_k
  through extra_body — and both), each also streamed: the text must equal `sinkq generate -m MODEL
  -p PROMPT -n N --temp T --top-k K --top-p P --seed S --json`'s generated_ids decoded as
  decode(prompt_ids + generated_ids) − decode(prompt_ids) through the server's /detokenize; the
  streamed text must equal the non-streamed one; completion_tokens, prompt_tokens and
  finish_reason must agree with the CLI (stopped ⇔ "stop"). Greedy is also sent as token ids.
* chat (SmolLM2): the conversation is rendered here by the rule of SmolLM2's ChatML template (the
  default system turn when the first message is not a system one), tokenized by /tokenize
  (add_special_tokens false); the chat answer must equal /v1/completions on those token ids (which
  stops at <|im_end|>, the model's EOS) and `sinkq generate -p RENDERED` (whose prompt_ids must be
  the same ids); streamed = non-streamed; chat logprobs = completions logprobs on the same ids.
* stories260K has no chat template: the chat request must be a 400 whose message says so.

Prints a table; exits 1 on any mismatch, 0 otherwise. The servers must exit 0 on SIGTERM.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import SINKQ, SMOL, STORIES, Server, continuation_text, host_line  # noqa: E402

SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# (name, temperature, top_p, top_k, seed)
CONFIGS = [
    ("greedy", 0.0, 1.0, 0, 0),
    ("T0.8 p0.95", 0.8, 0.95, 0, 1234),
    ("T0.8 k40", 0.8, 1.0, 40, 42),
    ("T0.8 p0.95 k40", 0.8, 0.95, 40, 7),
]

SMOL_PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):\n"]
STORIES_PROMPTS = ["Once upon a time", "Lily and Tom went to the park."]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a pirate. Answer like one."},
     {"role": "user", "content": "Tell me about the sea."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "Name three colors."}],
]

rows = []      # the summary table
failures = []  # (where, what)


def check(ok, where, what):
    if not ok:
        failures.append((where, what))
    return ok


def cli_generate(model, prompt, n, temp, top_p, top_k, seed):
    cmd = [SINKQ, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", str(temp),
           "--top-k", str(top_k), "--top-p", str(top_p), "--seed", str(seed), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def sampling_kwargs(temp, top_p, top_k, seed):
    kw = {"temperature": temp, "top_p": top_p, "seed": seed}
    if top_k:
        kw["extra_body"] = {"top_k": top_k}
    return kw


def stream_text(stream, chat):
    """Concatenated text, the last finish_reason and the usage chunk of a streamed response."""
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            piece = (c.delta.content or "") if chat else (c.text or "")
            text += piece
            if c.finish_reason is not None:
                finish = c.finish_reason
    return text, finish, usage


def short(s, n=28):
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[: n - 1] + "…"


def completions_case(client, srv, model_path, alias, prompt, cfg, n):
    name, temp, top_p, top_k, seed = cfg
    where = f"{alias} completions {short(prompt)!r} {name}"
    ref = cli_generate(model_path, prompt, n, temp, top_p, top_k, seed)
    want = continuation_text(srv, ref["prompt_ids"], ref["generated_ids"])
    want_finish = "stop" if ref["stopped"] else "length"
    kw = sampling_kwargs(temp, top_p, top_k, seed)
    r = client.completions.create(model=alias, prompt=prompt, max_tokens=n, **kw)
    got = r.choices[0].text
    ok_text = check(got == want, where, f"server text {got!r} != CLI {want!r}")
    ok_meta = check(r.usage.completion_tokens == len(ref["generated_ids"]) and
                    r.usage.prompt_tokens == len(ref["prompt_ids"]) and r.choices[0].finish_reason == want_finish,
                    where, f"usage {r.usage} / finish {r.choices[0].finish_reason} vs CLI "
                           f"{len(ref['prompt_ids'])}+{len(ref['generated_ids'])} {want_finish}")
    st, sfinish, susage = stream_text(client.completions.create(
        model=alias, prompt=prompt, max_tokens=n, stream=True, stream_options={"include_usage": True}, **kw), chat=False)
    ok_stream = check(st == got and sfinish == r.choices[0].finish_reason and susage is not None and
                      susage.completion_tokens == r.usage.completion_tokens,
                      where, f"stream {st!r} ({sfinish}, {susage}) != non-stream {got!r}")
    ids_note = ""
    if name == "greedy":  # the same request as token ids
        ri = client.completions.create(model=alias, prompt=ref["prompt_ids"], max_tokens=n, **kw)
        ok_ids = check(ri.choices[0].text == want, where, f"token-id prompt gave {ri.choices[0].text!r}")
        ids_note = " ids✓" if ok_ids else " ids✗"
    rows.append([alias, "completions", short(prompt), name, len(ref["generated_ids"]), want_finish,
                 ("✓" if ok_text else "✗") + ids_note, "✓" if ok_stream else "✗", "✓" if ok_meta else "✗"])


def render_chatml(messages):
    """SmolLM2's chat template, written out: the default system turn when there is no system message."""
    out = ""
    if messages[0]["role"] != "system":
        out += f"<|im_start|>system\n{SMOL_SYSTEM}<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def chat_case(client, srv, model_path, alias, conv, cfg, n):
    name, temp, top_p, top_k, seed = cfg
    where = f"{alias} chat {short(conv[-1]['content'])!r} {name}"
    rendered = render_chatml(conv)
    ids = srv.tokenize(rendered, add_special_tokens=False)
    kw = sampling_kwargs(temp, top_p, top_k, seed)
    # Reference 1: /v1/completions on the rendered conversation's token ids (stops at <|im_end|>,
    # the model's EOS). Raw JSON, logprobs 3 for the logprob comparison below.
    body = {"model": alias, "prompt": ids, "max_tokens": n, "temperature": temp, "top_p": top_p, "seed": seed,
            "logprobs": 3}
    if top_k:
        body["top_k"] = top_k
    comp = srv.post("/v1/completions", body)
    want = comp["choices"][0]["text"]
    want_finish = comp["choices"][0]["finish_reason"]
    # Reference 2: sinkq generate on the rendered text (the CLI parses the special tokens).
    ref = cli_generate(model_path, rendered, n, temp, top_p, top_k, seed)
    ok_ids = check(ref["prompt_ids"] == ids, where, f"CLI prompt_ids {ref['prompt_ids']} != /tokenize {ids}")
    cli_text = continuation_text(srv, ref["prompt_ids"], ref["generated_ids"])
    ok_cli = check(cli_text == want, where, f"CLI text {cli_text!r} != completions on ids {want!r}")
    r = client.chat.completions.create(model=alias, messages=conv, max_tokens=n, logprobs=True, top_logprobs=3, **kw)
    got = r.choices[0].message.content
    ok_text = check(got == want and r.choices[0].finish_reason == want_finish and r.usage.prompt_tokens == len(ids)
                    and r.usage.completion_tokens == len(ref["generated_ids"]),
                    where, f"chat {got!r} ({r.choices[0].finish_reason}, {r.usage}) != completions {want!r} "
                           f"({want_finish}, {len(ids)} prompt tokens, CLI {len(ref['generated_ids'])} generated)")
    chat_lp = [e.logprob for e in r.choices[0].logprobs.content]
    comp_lp = comp["choices"][0]["logprobs"]["token_logprobs"]
    comp_tok = comp["choices"][0]["logprobs"]["tokens"]
    # Since 3c57ab0 a completion that stopped at a stop id lists that token last in its logprobs (as
    # vLLM does; lm-eval's echo reads on it); chat's logprobs.content lists the message's tokens only.
    if want_finish == "stop" and len(comp_lp) == len(chat_lp) + 1 and comp_tok[-1] == "<|im_end|>":
        comp_lp = comp_lp[:-1]
    ok_lp = check(chat_lp == comp_lp, where, f"chat logprobs ({len(chat_lp)}) {chat_lp[:5]}… != completions "
                                             f"({len(comp_lp)}) {comp_lp[:5]}… (last tokens {comp_tok[-2:]})")
    st, sfinish, _ = stream_text(client.chat.completions.create(model=alias, messages=conv, max_tokens=n, stream=True,
                                                                 **kw), chat=True)
    ok_stream = check(st == got and sfinish == r.choices[0].finish_reason, where,
                      f"stream {st!r} ({sfinish}) != non-stream {got!r}")
    rows.append([alias, "chat", short(conv[-1]["content"]), name, len(ref["generated_ids"]), want_finish,
                 ("✓" if ok_text and ok_cli and ok_ids else "✗") + (" lp✓" if ok_lp else " lp✗"),
                 "✓" if ok_stream else "✗", "✓" if ok_text else "✗"])


def run_model(model_path, alias, prompts, n, chat, api_key):
    args = ["--alias", alias] if alias else []
    srv = Server(model_path, args, api_key=api_key)
    alias = srv.ready["model"]
    print(f"== {alias}: sinkq serve on port {srv.port} (pid {srv.pid}, ready in {srv.startup_s:.1f} s, "
          f"ctx {srv.ready['ctx']}), log {srv.log_path}", flush=True)
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=api_key or "sk-no-key-required", max_retries=0,
                               timeout=600)
        models = [m.id for m in client.models.list().data]
        check(models == [alias], alias, f"/v1/models lists {models}")
        if api_key:  # a wrong key: 401 through the client
            bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong-key", max_retries=0)
            try:
                bad.completions.create(model=alias, prompt="x", max_tokens=1)
                check(False, alias, "a wrong API key was accepted")
            except openai.AuthenticationError as e:
                check(e.status_code == 401, alias, f"wrong key: {e.status_code}")
        for prompt in prompts:
            for cfg in CONFIGS:
                completions_case(client, srv, model_path, alias, prompt, cfg, n)
        if chat:
            for conv in CONVERSATIONS:
                for cfg in (CONFIGS[0], CONFIGS[3]):
                    chat_case(client, srv, model_path, alias, conv, cfg, n)
        else:  # no chat template: a 400 that says so, through the client
            try:
                client.chat.completions.create(model=alias, messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
                check(False, alias, "chat without a chat template did not fail")
                msg = "(accepted)"
            except openai.BadRequestError as e:
                msg = e.body.get("message") if isinstance(e.body, dict) else str(e)
                check(e.status_code == 400 and "no chat template" in msg and "/v1/completions" in msg, alias,
                      f"chat without template: {e.status_code} {msg!r}")
            print(f"   chat on {alias}: 400 {msg!r}")
            rows.append([alias, "chat", "Hi", "—", 0, "400", "✓" if "no chat template" in msg else "✗", "", ""])
    finally:
        rc = srv.stop()
        print(f"   SIGTERM → exit code {rc}")
        check(rc == 0, alias, f"sinkq serve exited {rc} on SIGTERM (log {srv.log_path})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smol", default=SMOL)
    ap.add_argument("--stories", default=STORIES)
    ap.add_argument("--n-smol", type=int, default=48, help="max_tokens / -n for SmolLM2")
    ap.add_argument("--n-stories", type=int, default=64, help="max_tokens / -n for stories260K")
    a = ap.parse_args()
    t0 = time.time()
    print(f"openai {openai.__version__}, {SINKQ}, host {host_line()}")
    run_model(a.smol, "smollm2", SMOL_PROMPTS, a.n_smol, chat=True, api_key="bench-key")
    run_model(a.stories, None, STORIES_PROMPTS, a.n_stories, chat=False, api_key=None)
    print()
    print("| model | endpoint | prompt | sampling | tokens | finish | = reference | stream = non-stream | usage/finish |")
    print("|---|---|---|---|---:|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print()
    print("reference: completions = `sinkq generate` (ids decoded via /detokenize; 'ids' = the prompt sent as token ids);"
          " chat = /v1/completions on the rendered conversation's ids and `sinkq generate -p RENDERED`"
          " ('lp' = chat logprobs equal completions logprobs)")
    print(f"{len(rows)} cases, {len(failures)} failures, {time.time() - t0:.0f} s")
    for where, what in failures:
        print(f"FAIL {where}: {what}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
