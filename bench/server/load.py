#!/usr/bin/env python3
"""100 concurrent clients against `sinkq serve -m SmolLM2 --ctx 512 --parallel P` (stdlib only;
loopback; not run by CI).

    python3 bench/server/load.py                       # P = 1, 2, 4; --threads max(1, cores // P)
    python3 bench/server/load.py --parallel 2,4 --threads 2

For each P: a fresh server (`--port 0 --json`, port from its first stdout line); every distinct
valid request is first sent alone, one after another, on the idle server (the references); then
CLIENTS threads start together, each sending a fixed, shuffled list of PER_CLIENT requests on a
new connection each:

* valid: /v1/completions (max_tokens 16, greedy), the same streamed (stream_options.include_usage),
  /v1/chat/completions greedy max_tokens 16, and the same streamed — the text must equal the
  reference (determinism under concurrency); a 503 is retried after its Retry-After (counted);
* malformed JSON → 400; wrong types (prompt 42, max_tokens "16", temperature "hot", messages "hi",
  prompt [1, "a"]) → 400 naming the field; prompts longer than the context (text of ~600
  tokens, 600 token ids, 500 tokens + max_tokens 16 > 512) → 400 context_length_exceeded;
  bodies over the 8 MiB limit (Content-Length) → 413.

Checks: the server is alive and /health answers 200 after the load, every invalid request got its
4xx, every valid text equals its reference (and the references are the same for every P), the
server exits 0 on SIGTERM. Measures per P: p50 / p99 latency of the valid requests (end to end:
queueing and 503 retries included), generated tokens/s over the load phase, 503s, peak RSS
(VmHWM of the server process). At the end (--chunked-probe, on by default) a body over the limit
sent with Transfer-Encoding: chunked: it must be refused with 413 as well.
Prints a Markdown table with the host and date. Exit 1 on any failed check.
"""
import argparse
import datetime
import http.client
import json
import os
import random
import resource
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import SINKQ, SMOL, Server, host_line  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n",
    "The three primary colors are",
    "Water boils at a temperature of",
    "To make a cup of tea, first",
    "The quick brown fox",
    "In 1969, the first humans landed on",
    "A good way to learn a new language is",
    "Photosynthesis is the process by which plants " * 12,  # ~100 tokens
]
QUESTIONS = [
    "What is the capital of France?",
    "Name three colors.",
    "How do I boil an egg?",
    "Write a haiku about the sea.",
    "What is 2 + 2?",
    "Give me a tip for learning Python.",
    "Who wrote Hamlet?",
    "What is photosynthesis?",
    "Tell me a joke.",
    "Why is the sky blue?",
]
OVERSIZE = None  # built once: a JSON body of 9 MiB
T0 = [0.0]  # the start of the load phase


def valid_body(kind, i):
    if kind.startswith("completion"):
        b = {"prompt": PROMPTS[i], "max_tokens": 16, "temperature": 0}
    else:
        b = {"messages": [{"role": "user", "content": QUESTIONS[i]}], "max_tokens": 16, "temperature": 0}
    if kind.endswith("stream"):
        b["stream"] = True
        b["stream_options"] = {"include_usage": True}
    return b


def invalid_request(kind, j):
    """(path, body bytes, wanted status, substring of the error message or code)."""
    if kind == "malformed":
        bodies = [b'{"prompt": "hello", "max_tokens": 16', b"{prompt: hello}", b"not json at all", b'{"prompt": "a",}']
        return "/v1/completions", bodies[j % len(bodies)], 400, "not valid JSON"
    if kind == "wrong_type":
        cases = [
            ("/v1/completions", {"prompt": 42}, "'prompt' must be"),
            ("/v1/completions", {"prompt": "hi", "max_tokens": "16"}, "'max_tokens' must be an integer"),
            ("/v1/completions", {"prompt": "hi", "temperature": "hot"}, "'temperature' must be a number"),
            ("/v1/chat/completions", {"messages": "hi"}, "'messages' must be"),
            ("/v1/completions", {"prompt": [1, "a"]}, "must be a token id"),
            ("/v1/completions", [1, 2, 3], "must be a JSON object"),
        ]
        path, body, msg = cases[j % len(cases)]
        return path, json.dumps(body).encode(), 400, msg
    if kind == "too_long":
        cases = [
            ("/v1/completions", {"prompt": "hello " * 600, "max_tokens": 16}),
            ("/v1/completions", {"prompt": [28120] * 600, "max_tokens": 1}),
            ("/v1/completions", {"prompt": [28120] * 500, "max_tokens": 16}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello " * 600}], "max_tokens": 16}),
        ]
        path, body = cases[j % len(cases)]
        return path, json.dumps(body).encode(), 400, "context_length_exceeded"
    if kind == "oversize":
        return "/v1/completions", OVERSIZE, 413, "exceeds"
    raise ValueError(kind)


def http_call(port, path, body, timeout=900):
    """(status, headers, body bytes); one connection per request (Connection: close)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json", "Connection": "close"})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def parse_result(kind, data):
    """(text, completion_tokens) of a response body, streamed or not."""
    if kind.endswith("stream"):
        text, ntok, done = "", None, False
        for ev in data.decode().split("\n\n"):
            if not ev:
                continue
            assert ev.startswith("data: "), ev[:100]
            if ev == "data: [DONE]":
                done = True
                continue
            j = json.loads(ev[6:])
            if j.get("usage"):
                ntok = j["usage"]["completion_tokens"]
            for ch in j["choices"]:
                text += ch["delta"].get("content", "") if "delta" in ch else ch["text"]
        assert done, "a stream without [DONE]"
        return text, ntok
    j = json.loads(data)
    ch = j["choices"][0]
    return (ch["message"]["content"] if "message" in ch else ch["text"]), j["usage"]["completion_tokens"]


def path_of(kind):
    return "/v1/completions" if kind.startswith("completion") else "/v1/chat/completions"


def references(port):
    refs = {}
    for kind in ("completion", "chat"):
        for i in range(len(PROMPTS)):
            st, _, data = http_call(port, path_of(kind), json.dumps(valid_body(kind, i)).encode())
            assert st == 200, (kind, i, st, data[:300])
            refs[(kind, i)] = parse_result(kind, data)
    return refs


def client_plan(cid, per_client):
    """A fixed, shuffled list of requests: about half valid, the rest spread over the invalid kinds."""
    valid_kinds = ["completion", "completion_stream", "chat", "chat_stream"]
    invalid_kinds = ["malformed", "wrong_type", "too_long", "oversize"]
    plan = []
    n_valid = (per_client + 1) // 2
    for j in range(per_client):
        if j < n_valid:
            plan.append(("valid", valid_kinds[(cid + j) % 4], (cid * 7 + j) % len(PROMPTS)))
        else:
            plan.append(("invalid", invalid_kinds[(cid + j) % 4], cid + j))
    random.Random(cid).shuffle(plan)
    return plan


def run_load(srv, clients, per_client, refs):
    results = []  # dicts
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(cid):
        barrier.wait()
        for what, kind, i in client_plan(cid, per_client):
            t0 = time.perf_counter()
            retries = 0
            rec = {"client": cid, "what": what, "kind": kind}
            try:
                if what == "valid":
                    body = json.dumps(valid_body(kind, i)).encode()
                    while True:
                        st, hdr, data = http_call(srv.port, path_of(kind), body)
                        if st != 503:
                            break
                        retries += 1
                        time.sleep(float(hdr.get("Retry-After", "1")))
                    rec.update(status=st, retries=retries, latency=time.perf_counter() - t0)
                    if st == 200:
                        text, ntok = parse_result(kind, data)
                        ref_text, ref_ntok = refs[(kind.replace("_stream", ""), i)]
                        rec.update(tokens=ntok or 0, ok=(text == ref_text and ntok == ref_ntok),
                                   detail=None if text == ref_text else f"{text!r} != reference {ref_text!r}")
                    else:
                        rec.update(tokens=0, ok=False, detail=f"status {st}: {data[:300]!r}")
                else:
                    path, body, want, needle = invalid_request(kind, i)
                    while True:
                        st, hdr, data = http_call(srv.port, path, body)
                        if st != 503:
                            break
                        retries += 1  # (an invalid request is refused before the queue: never expected)
                        time.sleep(float(hdr.get("Retry-After", "1")))
                    ok = st == want and needle in data.decode(errors="replace")
                    rec.update(status=st, retries=retries, latency=time.perf_counter() - t0, ok=ok,
                               detail=None if ok else f"wanted {want} with {needle!r}, got {st}: {data[:300]!r}")
            except Exception as e:  # a reset connection, a timeout: a failure to report
                rec.update(status=None, retries=retries, latency=time.perf_counter() - t0, ok=False, tokens=0,
                           detail=f"{type(e).__name__}: {e} ({time.perf_counter() - t0:.1f} s after the request's "
                                  f"start, {retries} 503s before it, {time.perf_counter() - T0[0]:.1f} s into the load)")
            with lock:
                results.append(rec)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    rss = []
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            try:
                rss.append(srv.status("VmRSS"))
            except (OSError, TypeError):
                pass
            stop.wait(0.25)

    st = threading.Thread(target=sampler, daemon=True)
    st.start()
    cpu0, scpu0 = self_cpu(), proc_cpu(srv.pid)
    barrier.wait()
    t0 = T0[0] = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = {"client": self_cpu() - cpu0, "server": proc_cpu(srv.pid) - scpu0}
    stop.set()
    st.join()
    return results, wall, max(rss) if rss else None, cpu


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    """utime + stime of a process, seconds (/proc/PID/stat fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def chunked_probe(model, mib, failures):
    """A body over the limit with Transfer-Encoding: chunked (no Content-Length)."""
    with Server(model, ["--ctx", "512"]) as srv:
        before = srv.status("VmHWM")
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.settimeout(300)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        chunk = b"a" * (1 << 20)
        sent = 0
        try:
            for _ in range(mib):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += 1
            s.sendall(b"0\r\n\r\n")
        except OSError as e:
            print(f"   chunked probe: the server closed the connection after {sent} MiB ({e})")
        data = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
        except OSError:
            pass
        s.close()
        after = srv.status("VmHWM")
        line = data.split(b"\r\n", 1)[0].decode(errors="replace")
        body = data.split(b"\r\n\r\n", 1)[-1][:200]
        print(f"   chunked probe: {mib} MiB body (limit 8 MiB) → {line!r} {body!r}; "
              f"VmHWM {before / 1024:.0f} → {after / 1024:.0f} MiB")
        if " 413 " not in line + " ":
            failures.append(f"chunked body of {mib} MiB over the 8 MiB limit: got {line!r} (expected 413); "
                            f"the server buffered it (VmHWM {before / 1024:.0f} → {after / 1024:.0f} MiB)")
        alive = srv.alive()
        rc = srv.stop()
        if not alive or rc != 0:
            failures.append(f"chunked probe: server alive {alive}, exit code {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=SMOL)
    ap.add_argument("--parallel", default="1,2,4")
    ap.add_argument("--threads", default="split",
                    help="'split': --threads max(1, cores // P); a number: that for every P; 'default': no flag")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--per-client", type=int, default=6, help="requests per client (half valid)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--queue", type=int, default=None, help="--queue (default: the server's, 16)")
    ap.add_argument("--chunked-probe", type=int, default=64, help="MiB of the chunked probe (0: skip)")
    ap.add_argument("--serve-args", default="", help="more flags for sinkq serve, e.g. '--no-batch'")
    a = ap.parse_args()
    global OVERSIZE
    OVERSIZE = json.dumps({"prompt": "a" * (9 << 20), "max_tokens": 1}).encode()
    cores = os.cpu_count()
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"host: {host_line()}; {date}; {SINKQ}")
    failures = []
    table = []
    first_refs = None
    for P in [int(x) for x in a.parallel.split(",")]:
        T = None if a.threads == "default" else (max(1, cores // P) if a.threads == "split" else int(a.threads))
        args = ["--ctx", a.ctx, "--parallel", P] + (["--threads", T] if T else []) + \
               (["--queue", a.queue] if a.queue is not None else []) + a.serve_args.split()
        srv = Server(a.model, args)
        print(f"== P={P} threads={T or 'default'}: {' '.join(map(str, srv.cmd[1:]))} (port {srv.port}, pid {srv.pid}), "
              f"log {srv.log_path}", flush=True)
        try:
            t0 = time.perf_counter()
            refs = references(srv.port)
            hwm_idle = srv.status("VmHWM")
            print(f"   {len(refs)} references alone in {time.perf_counter() - t0:.1f} s; VmHWM {hwm_idle / 1024:.0f} MiB",
                  flush=True)
            if first_refs is None:
                first_refs = refs
            elif refs != first_refs:
                diff = [k for k in refs if refs[k] != first_refs[k]]
                failures.append(f"P={P}: the idle references differ from the first P's for {diff}")
            results, wall, rss_max, cpu = run_load(srv, a.clients, a.per_client, refs)
            alive = srv.alive()
            health = srv.request("GET", "/health")[0] if alive else None
            hwm = srv.status("VmHWM") if alive else None
            metrics = srv.request("GET", "/metrics")[2].decode() if alive else ""
        finally:
            rc = srv.stop()
        if not alive or health != 200:
            failures.append(f"P={P}: server alive {alive}, /health {health}")
        if rc != 0:
            failures.append(f"P={P}: exit code {rc} on SIGTERM")
        valid = [r for r in results if r["what"] == "valid"]
        invalid = [r for r in results if r["what"] == "invalid"]
        bad = [r for r in results if not r["ok"]]
        kinds = {}
        for r in bad:  # failures by cause: an exception's class, or the status / mismatch
            d = r["detail"] or ""
            k = d.split(":")[0] if r["status"] is None else (f"status {r['status']}" if r["status"] != 200 else "text differs")
            kinds[k] = kinds.get(k, 0) + 1
        if kinds:
            print(f"   failed requests by cause: {kinds}", flush=True)
        for r in bad[:10]:
            failures.append(f"P={P} client {r['client']} {r['what']} {r['kind']}: {r['detail']}")
        if len(bad) > 10:
            failures.append(f"P={P}: {len(bad) - 10} more failed requests")
        lat = [r["latency"] for r in valid if r["status"] == 200]
        tokens = sum(r.get("tokens", 0) for r in valid)
        n503 = sum(r["retries"] for r in results)
        by_kind = {}
        for r in invalid:
            k = by_kind.setdefault(r["kind"], [0, 0, set()])
            k[0] += 1
            k[1] += r["ok"]
            k[2].add(r["status"])
        def metric(name):
            v = [l.split()[-1] for l in metrics.splitlines() if l.startswith(name + " ")]
            return float(v[0]) if v else None
        batches, rows = metric("sinkq_decode_batches_total"), metric("sinkq_decode_batch_rows_total")
        mean_batch = rows / batches if batches else None
        chunks, mixed = metric("sinkq_prefill_batch_chunks_total"), metric("sinkq_mixed_batches_total")
        m503 = [l for l in metrics.splitlines() if l.startswith("sinkq_requests_total") and 'status="503"' in l]
        print(f"   load: {len(results)} requests in {wall:.1f} s; valid {sum(r['ok'] for r in valid)}/{len(valid)} equal "
              f"the reference; invalid " + ", ".join(f"{k} {v[1]}/{v[0]} ({sorted(v[2], key=str)})" for k, v in by_kind.items())
              + f"; 503 retries {n503} (server: {m503}); peak VmRSS sampled {rss_max / 1024:.0f} MiB; CPU s: server "
              f"{cpu['server']:.1f}, this client {cpu['client']:.1f}; decode batches {batches} rows {rows}; "
              f"prompt chunks batched {chunks}, with decode rows {mixed}", flush=True)
        table.append({"P": P, "threads": T or "default", "valid": len(valid), "invalid": len(invalid),
                      "ok": len(results) - len(bad), "n": len(results), "wall": wall,
                      "p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "tps": tokens / wall, "tokens": tokens,
                      "n503": n503, "mean_batch": mean_batch, "chunks": chunks, "mixed": mixed, "hwm_idle": hwm_idle, "hwm": hwm, "rc": rc, "cpu": cpu})
    if a.chunked_probe:
        chunked_probe(a.model, a.chunked_probe, failures)
    print()
    print(f"Host: {host_line()}; {date}. {a.clients} clients × {a.per_client} requests "
          f"(half valid: completions / streamed / chat / streamed chat, max_tokens 16, greedy), --ctx {a.ctx}.")
    print()
    print(f"sinkq serve flags: {a.serve_args or '(none)'}")
    print()
    print("| --parallel | --threads | valid / invalid requests | correct | p50 latency (s) | p99 latency (s) "
          "| generated tok/s | mean decode batch | prompt chunks batched / with decode rows | 503s (retried) | peak RSS idle → after load (MiB) | CPU s server / client | exit |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---|---:|---|---|---:|")
    for t in table:
        print(f"| {t['P']} | {t['threads']} | {t['valid']} / {t['invalid']} | {t['ok']}/{t['n']} | {t['p50']:.2f} | "
              f"{t['p99']:.2f} | {t['tps']:.1f} | {'%.2f' % t['mean_batch'] if t['mean_batch'] else '–'} | "
              f"{'%d / %d' % (t['chunks'], t['mixed']) if t['chunks'] is not None else '–'} | {t['n503']} | {t['hwm_idle'] / 1024:.0f} → "
              f"{(t['hwm'] or 0) / 1024:.0f} | {t['cpu']['server']:.0f} / {t['cpu']['client']:.0f} | {t['rc']} |")
    print()
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
