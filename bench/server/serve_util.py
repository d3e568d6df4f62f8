"""Shared helpers of the bench/server scripts: start `sinkq serve` on a free port, talk to it over
plain HTTP (stdlib only), stop it with SIGTERM and check that it exits 0.

Nothing here is run by CI.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared"))
SINKQ = os.environ.get("SINKQ", os.path.join(ROOT, "build", "src", "cli", "sinkq"))
SMOL = os.path.join(SHARED, "models", "smollm2-135m-instruct-q4_1", "model.gguf")
STORIES = os.path.join(SHARED, "models", "stories260K")


class Server:
    """`sinkq serve -m MODEL --port 0 --json ARGS...`; the port is read from its first stdout line."""

    def __init__(self, model, args=(), log=None, api_key=None, ready_timeout=300):
        self.model = model
        self.api_key = api_key
        cmd = [SINKQ, "serve", "-m", model, "--port", "0", "--json", *map(str, args)]
        if api_key:
            cmd += ["--api-key", api_key]
        self.cmd = cmd
        self.log_path = log or f"/tmp/sinkq-serve-{os.getpid()}-{int(time.time() * 1000)}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        t0 = time.time()
        line = self.proc.stdout.readline()  # blocks until the server listens (or dies)
        if not line:
            rc = self.proc.wait()
            raise RuntimeError(f"sinkq serve exited {rc} before listening; log {self.log_path}:\n"
                               + open(self.log_path).read()[-3000:])
        self.ready = json.loads(line)
        self.port = int(self.ready["port"])
        self.base = f"http://127.0.0.1:{self.port}"
        self.startup_s = time.time() - t0
        self.exit_code = None

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def status(self, field):
        """A field of /proc/PID/status in kB (VmHWM: peak RSS, VmRSS: now)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return None

    def request(self, method, path, body=None, headers=None, timeout=600):
        """(status, headers dict, body bytes) — 4xx/5xx included, never raises on a status."""
        data = None
        h = {}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def post(self, path, body, want=200):
        st, _, b = self.request("POST", path, body)
        if st != want:
            raise RuntimeError(f"POST {path} → {st} (wanted {want}): {b[:500]!r}")
        return json.loads(b)

    def get(self, path):
        st, _, b = self.request("GET", path)
        if st != 200:
            raise RuntimeError(f"GET {path} → {st}: {b[:500]!r}")
        return json.loads(b) if b[:1] in (b"{", b"[") else b.decode()

    def tokenize(self, text, add_special_tokens=False):
        return self.post("/tokenize", {"prompt": text, "add_special_tokens": add_special_tokens})["tokens"]

    def detokenize(self, ids):
        return self.post("/detokenize", {"tokens": list(ids)})["prompt"]

    def stop(self, timeout=120):
        """SIGTERM; returns the exit code (0 expected)."""
        if self.exit_code is not None:
            return self.exit_code
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = self.proc.wait()
            print(f"sinkq serve (pid {self.pid}) did not exit {timeout} s after SIGTERM: killed", file=sys.stderr)
            self.exit_code = "timeout"
        self._log.close()
        return self.exit_code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def continuation_text(srv, prompt_ids, generated_ids):
    """decode(prompt + generated) minus decode(prompt), through the server's /detokenize (the
    completion continues the prompt: a SentencePiece model keeps the leading space)."""
    p = srv.detokenize(prompt_ids)
    a = srv.detokenize(list(prompt_ids) + list(generated_ids))
    if not a.startswith(p):
        raise RuntimeError(f"decode(prompt + generated) does not start with decode(prompt): {p!r} vs {a!r}")
    return a[len(p):]


def host_line():
    """'<lscpu model name>, AVX-512|AVX2|no AVX2, N cores' from lscpu and /proc/cpuinfo."""
    name = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    isa = "AVX-512 (avx512f)" if "avx512f" in flags else ("AVX2 (no avx512f)" if "avx2" in flags else "no AVX2")
    return f"{name}, {isa}, {os.cpu_count()} cores"
