"""Tests of the Python module (python/src/module.cc) against the sinkq CLI and the real models in
../shared (beside the repository). Run with python/run_tests.sh (PYTHONPATH=build/python: the
module of the main CMake build). The CLI comparisons need build/src/cli/sinkq (or $SINKQ_BINARY).

Bit-identity claims hold between two runs on one host (docs/architecture.md "Determinism"): the
module and the CLI run the same library calls, so logits, sampled ids, perplexities and artifacts
are compared exactly, not within a tolerance.
"""

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import sinkq

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
S260K = SHARED / "models" / "stories260K"
SMOL = SHARED / "models" / "smollm2-135m-instruct-q4_1" / "model.gguf"
WIKI = SHARED / "data" / "wikitext-2" / "wiki.test.tokens"
C4 = SHARED / "data" / "c4" / "c4_train_00000_first1000.jsonl"
CLI = Path(os.environ.get("SINKQ_BINARY", ROOT / "build" / "src" / "cli" / "sinkq"))

pytestmark = pytest.mark.skipif(not S260K.is_dir(), reason="../shared (models) must sit beside the checkout")
needs_cli = pytest.mark.skipif(not CLI.is_file(), reason=f"the sinkq CLI ({CLI}) is not built")

PROMPT = "Once upon a time, there was a little girl"


def cli(*args):
    """Runs `sinkq ARGS --json` and returns its JSON."""
    r = subprocess.run([str(CLI), *map(str, args), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def window_nll(logits, window):
    """The mean NLL of a window as src/eval/ppl.cc computes it, in the same order and precision:
    per position logsumexp in double (max, then a sequential sum of exp(x - max)), minus the
    target's logit; the positions' sum divided by their count. math.exp / math.log are the C
    library's, as std::exp / std::log in the C++."""
    total = 0.0
    for p in range(len(window) - 1):
        row = logits[p].tolist()  # float32 -> double, exact
        mx = max(row)
        s = 0.0
        for x in row:
            s += math.exp(x - mx)
        total += (mx + math.log(s)) - row[window[p + 1]]
    return total / (len(window) - 1)


@pytest.fixture(scope="module")
def s260k():
    return sinkq.load(S260K)


@pytest.fixture(scope="module")
def smol():
    if not SMOL.is_file():
        pytest.skip("SmolLM2 GGUF not in ../shared")
    return sinkq.load(SMOL)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    # The first ~12 KB of WikiText-2 test: enough for several windows of 64 tokens.
    path = tmp_path_factory.mktemp("text") / "wiki.txt"
    path.write_text(WIKI.read_text(encoding="utf-8")[:12000], encoding="utf-8")
    return path


# ---- the model ----------------------------------------------------------------------------------


def test_properties(s260k):
    assert s260k.runtime == "simulated"
    assert s260k.path == str(S260K)
    assert s260k.vocab_size == 512
    assert s260k.max_context == 512  # max_position_embeddings, no prefix
    assert s260k.prefix_tokens == []
    assert s260k.bos_id == 1 and 2 in s260k.stop_ids
    cfg = s260k.config
    assert isinstance(cfg, dict) and cfg  # SimModel::to_json as a dict
    assert s260k.recipe["weights"]["bits"] == 16
    assert isinstance(s260k.describe(), str) and s260k.describe()
    assert "stories260K" in repr(s260k)
    assert "w8a8" in sinkq.presets() and "fp16" in sinkq.presets()
    assert issubclass(sinkq.Error, RuntimeError)


@needs_cli
def test_tokenize_matches_cli_and_round_trips(s260k):
    ids = s260k.tokenize(PROMPT)
    assert ids == cli("tokenize", "-m", S260K, "--text", PROMPT)["ids"]
    assert ids[0] == s260k.bos_id
    assert s260k.tokenize(PROMPT, add_special=False) == ids[1:]
    assert s260k.detokenize(ids) == PROMPT
    assert s260k.detokenize(np.array(ids, dtype=np.int64)) == PROMPT  # any sequence of ints
    text = "Tom and Lily played in the park. They were happy!"
    assert s260k.detokenize(s260k.tokenize(text, add_special=False)) == text


def test_tokenize_smollm2(smol):
    # Byte-level BPE without BOS; special tokens parsed unless parse_special=False.
    text = "<|im_start|>user\nHello, wörld! 123<|im_end|>"
    ids = smol.tokenize(text)
    assert smol.detokenize(ids, skip_special=False) == text
    assert len(smol.tokenize(text, parse_special=False)) > len(ids)


# ---- logits, logprobs, ppl: bit for bit against `sinkq ppl --json` -----------------------------


@needs_cli
def test_logits_and_ppl_match_cli(s260k, text_file):
    ctx, windows = 64, 3
    ref = cli("ppl", "-m", S260K, "-f", text_file, "--ctx", ctx, "--max-windows", windows)
    assert ref["protocol"] == "gptq" and ref["windows"] == windows
    # The gptq protocol's windows: [BOS] + the raw text, cut every ctx tokens.
    toks = s260k.tokenize(text_file.read_text(encoding="utf-8"), add_special=False, parse_special=False)
    assert len(toks) == ref["file_tokens"]
    stream = [s260k.bos_id] + toks
    for k in range(windows):
        w = stream[k * ctx:(k + 1) * ctx]
        logits = s260k.logits(w)
        assert logits.dtype == np.float32 and logits.shape == (ctx, 512) and logits.flags.c_contiguous
        # Exactly the CLI's printed NLL (nlohmann prints doubles round-trip exact): the logits are
        # the same bits and the NLL is recomputed in the C++ order.
        assert window_nll(logits, w) == ref["window_nll"][k]
        # logprobs() = -NLL per target, from the same logits.
        lp = s260k.logprobs(w)
        assert -sum(lp) / len(lp) == pytest.approx(ref["window_nll"][k], rel=1e-12)
    mine = s260k.ppl(text_file.read_text(encoding="utf-8"), ctx=ctx, windows=windows)
    for key in ("ppl", "mean_nll", "tokens_scored", "windows", "window_nll", "file_tokens", "ctx", "protocol"):
        assert mine[key] == ref[key], key
    assert s260k.ppl(file=text_file, ctx=ctx, windows=windows)["window_nll"] == ref["window_nll"]
    bos = s260k.ppl(file=text_file, ctx=ctx, windows=1, protocol="bos")
    assert bos["protocol"] == "bos" and bos["tokens_scored"] == ctx - 1


def test_logits_prefix_of_sequence(s260k):
    # Causality: the logits of a prefix of the ids are those rows of the whole sequence's logits.
    # The 5-token prefix runs the per-query attention, the whole sequence (>= 8 tokens) the blocked
    # one (sgemm): the same math in another fp32 summation order, ~1e-6 of max|logit| (measured
    # 5.7e-6 at max|logit| ~10); a row that saw a later token would be off by O(1).
    ids = s260k.tokenize(PROMPT)
    assert len(ids) >= 8
    full = s260k.logits(ids)
    part = s260k.logits(ids[:5])
    np.testing.assert_allclose(part, full[:5], rtol=0, atol=1e-5 * np.abs(full).max())


# ---- generation ---------------------------------------------------------------------------------


@needs_cli
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, top_k=40, top_p=0.9, seed=1234)])
def test_generate_matches_cli(s260k, sampling):
    n = 48
    ref = cli("generate", "-m", S260K, "-p", PROMPT, "-n", n, "--temp", sampling["temperature"],
              "--top-k", sampling.get("top_k", 0), "--top-p", sampling.get("top_p", 1.0), "--seed", sampling.get("seed", 0))
    gen = s260k.generate(PROMPT, max_tokens=n, **sampling)
    items = list(gen)
    ids = [i for i, _ in items]
    assert gen.prompt_ids == ref["prompt_ids"]
    assert ids == ref["generated_ids"]
    assert gen.text == ref["text"]
    # The streamed pieces continue the prompt's text (its leading space included, which decoding
    # the generated ids alone drops).
    whole = s260k.detokenize(gen.prompt_ids + ids)
    assert whole.startswith(PROMPT)
    assert "".join(p for _, p in items) == whole[len(PROMPT):]
    r = gen.result
    assert r["generated_ids"] == ids and r["stopped"] == ref["stopped"] and not r["cancelled"]
    # A prompt given as ids is the same generation.
    assert [i for i, _ in s260k.generate(ref["prompt_ids"], max_tokens=n, **sampling)] == ids


def test_generate_seeds_differ(s260k):
    a = [i for i, _ in s260k.generate(PROMPT, max_tokens=32, seed=1, stop_on_eos=False)]
    b = [i for i, _ in s260k.generate(PROMPT, max_tokens=32, seed=2, stop_on_eos=False)]
    assert len(a) == len(b) == 32 and a != b


def test_generate_close_stops_early(s260k):
    g = s260k.generate(PROMPT, max_tokens=400, stop_on_eos=False)
    got = [next(g) for _ in range(3)]
    assert len(got) == 3
    g.close()
    r = g.result
    assert r["cancelled"] and not r["stopped"]
    # The worker is at most the queue (4 ids) and the token being produced past the reader.
    assert 3 <= len(r["generated_ids"]) <= 3 + 4 + 1 < 400
    with pytest.raises(StopIteration):
        next(g)
    # A `with` block closes it; so does dropping it (no hang, no crash).
    with s260k.generate(PROMPT, max_tokens=400, stop_on_eos=False) as g2:
        for _ in zip(range(2), g2):
            pass
    assert g2.result["cancelled"]
    g3 = s260k.generate(PROMPT, max_tokens=400, stop_on_eos=False)
    next(g3)
    del g3
    for i, _ in s260k.generate(PROMPT, max_tokens=400, stop_on_eos=False):
        break


def test_generate_closed_from_another_thread(s260k):
    # A reader blocked in next() ends with StopIteration when another thread closes the iterator.
    g = s260k.generate(PROMPT, max_tokens=480, stop_on_eos=False)
    ids = []
    for i, (tok, _) in enumerate(g):
        ids.append(tok)
        if i == 5:
            threading.Thread(target=g.close).start()
    r = g.result
    assert r["cancelled"] and len(ids) < 480 and r["generated_ids"][:len(ids)] == ids


def test_generate_zero_tokens_and_stop(s260k):
    g = s260k.generate(PROMPT, max_tokens=0)
    assert list(g) == [] and g.result["generated_ids"] == []
    # stories260K ends its stories with EOS or BOS; with both stops, nothing after one.
    ids = [i for i, _ in s260k.generate(PROMPT, max_tokens=400, temperature=0, stop_on_bos=True)]
    assert all(i not in s260k.stop_ids and i != s260k.bos_id for i in ids)


def test_concurrent_generations_equal_sequential(s260k):
    # Sessions over one Model on several Python threads (each call releases the GIL).
    seeds = [3, 4, 5]
    want = {s: [i for i, _ in s260k.generate(PROMPT, max_tokens=40, seed=s)] for s in seeds}
    got = {}

    def run(s):
        got[s] = [i for i, _ in s260k.generate(PROMPT, max_tokens=40, seed=s)]

    threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_gil_released_during_logits(smol):
    # A Python thread keeps counting while logits() runs on SmolLM2: with the GIL held for the
    # whole call it could not run at all inside the call (a 5 ms switch interval only applies to
    # Python bytecode). Ticks are taken in the middle 80% of the call.
    ids = smol.tokenize("The quick brown fox jumps over the lazy dog. " * 12)
    smol.logits(ids[:4])  # warm up
    ticks, stop = [], threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    logits = smol.logits(ids)
    t1 = time.perf_counter()
    stop.set()
    t.join()
    assert logits.shape == (len(ids), smol.vocab_size)
    lo, hi = t0 + 0.1 * (t1 - t0), t1 - 0.1 * (t1 - t0)
    inside = [x for x in ticks if lo <= x <= hi]
    assert len(inside) >= 5, f"{len(inside)} ticks during a {t1 - t0:.3f} s logits() call"


@needs_cli
def test_smollm2_greedy_matches_cli(smol):
    n = 12
    ref = cli("generate", "-m", SMOL, "-p", "The capital of France is", "-n", n, "--temp", 0)
    ids = [i for i, _ in smol.generate("The capital of France is", max_tokens=n, temperature=0)]
    assert ids == ref["generated_ids"]


# ---- errors -------------------------------------------------------------------------------------


def test_errors(s260k, tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(sinkq.Error, match="no-such-model"):
        sinkq.load(missing)
    with pytest.raises(sinkq.Error, match=r"weights\.bits"):
        sinkq.load(S260K, recipe={"weights": {"bits": "eight"}})
    with pytest.raises(sinkq.Error, match=r"weights\.bitz"):
        sinkq.load(S260K, recipe='{"weights": {"bitz": 8}}')
    with pytest.raises(sinkq.Error, match="no-such-preset"):
        sinkq.load(S260K, recipe="no-such-preset")
    with pytest.raises(sinkq.Error, match="not valid JSON"):
        sinkq.load(S260K, recipe="{bits: 8")
    with pytest.raises(TypeError):
        sinkq.load(S260K, recipe=8)
    with pytest.raises(TypeError):
        sinkq.load(42)
    with pytest.raises(ValueError):
        sinkq.load(S260K, threads=0)
    with pytest.raises(sinkq.Error, match="99999"):
        s260k.logits([1, 99999])
    with pytest.raises(sinkq.Error, match="-3"):
        s260k.logits([1, -3])
    with pytest.raises(sinkq.Error, match="512"):
        s260k.detokenize([512])
    with pytest.raises(sinkq.Error):
        s260k.generate([1, 5000])
    with pytest.raises(sinkq.Error):
        s260k.logits([1] * 513)  # longer than the model's 512 positions
    with pytest.raises(ValueError):
        s260k.logits([])
    with pytest.raises(TypeError):
        s260k.logits("Once upon a time")
    with pytest.raises(TypeError):
        s260k.logits([1, 2.5])
    with pytest.raises(TypeError):
        s260k.tokenize(123)
    with pytest.raises(TypeError):
        s260k.generate(3.5)
    with pytest.raises(ValueError):
        s260k.generate(PROMPT, max_tokens=-1)
    with pytest.raises(ValueError):
        s260k.generate(PROMPT, top_p=0)
    with pytest.raises(ValueError):
        s260k.generate(PROMPT, temperature=-1)
    with pytest.raises(sinkq.Error, match="exceeds"):
        s260k.generate(PROMPT, max_tokens=600)
    with pytest.raises(sinkq.Error, match="protocol"):
        s260k.ppl("some text", protocol="nope")
    with pytest.raises(sinkq.Error):
        s260k.ppl("too short", ctx=64)  # no complete window
    with pytest.raises(sinkq.Error, match="no-such-file"):
        s260k.ppl(file=tmp_path / "no-such-file.txt")
    with pytest.raises(TypeError):
        s260k.ppl()
    with pytest.raises(sinkq.Error, match="from = 0"):
        s260k.logprobs([1, 2, 3], start=0)
    # The model is still usable after every error above.
    assert s260k.logits([1, 2]).shape == (2, 512)


# ---- recipes, quantization, the packed runtime ---------------------------------------------------


def test_recipe_forms(tmp_path):
    by_name = sinkq.load(S260K, recipe="w8a8")
    as_dict = sinkq.load(S260K, recipe=by_name.recipe)
    as_json = sinkq.load(S260K, recipe=json.dumps(by_name.recipe))
    f = tmp_path / "recipe.json"
    f.write_text(json.dumps(by_name.recipe))
    as_file = sinkq.load(S260K, recipe=str(f))
    ids = by_name.tokenize(PROMPT)
    want = by_name.logits(ids)
    for m in (as_dict, as_json, as_file):
        assert m.recipe == by_name.recipe and m.describe() == by_name.describe()
        np.testing.assert_array_equal(m.logits(ids), want)
    fp = sinkq.load(S260K)
    assert not np.array_equal(fp.logits(ids), want)  # W8A8 does change the logits


@needs_cli
def test_quantize_packed_runtime(tmp_path, text_file):
    out = tmp_path / "s260k-w8a8"
    info = sinkq.quantize(S260K, out, "w8a8")
    assert info["out"] == str(out) and info["model"] == str(S260K)
    assert set(info) == {"out", "model", "config", "files", "total_bytes", "tensor_bytes", "packed_weight_bytes",
                         "fp16_bytes", "ratio_to_fp16", "fp_dtype", "seconds"}
    # The CLI writes the same artifact byte for byte (the writer is deterministic).
    ref_out = tmp_path / "cli"
    ref = cli("quantize", "-m", S260K, "--preset", "w8a8", "-o", ref_out)
    for key in ("config", "files", "total_bytes", "tensor_bytes", "packed_weight_bytes", "fp16_bytes", "fp_dtype"):
        assert info[key] == ref[key], key
    for name in info["files"]:
        assert (out / name).read_bytes() == (ref_out / name).read_bytes(), name
    with pytest.raises(sinkq.Error, match="already exists"):
        sinkq.quantize(S260K, out, "w8a8")
    with pytest.raises(sinkq.Error, match="artifact"):
        sinkq.load(out, recipe="w8a8")

    packed16 = sinkq.load(out)
    assert packed16.runtime == "packed"

    # Against the simulator: an artifact with fp32 embeddings / lm_head (the default rounds an fp32
    # source's to fp16, a difference of its own), so only the runtime differs. The packed int8
    # kernels compute what the simulator fake-quantizes in another order (integer dot products,
    # scales applied after): fp32 rounding differences (observed ~1e-5 on a short prompt), which
    # now and then move a later activation across an int8 rounding boundary: one step of its
    # per-token scale, 1/127 (0.8%) of the row's max, carried on through the later layers. So a
    # logit may move by about that share of the logits' spread: bound 2% (observed 0.7% on the 180
    # tokens below), the mean difference far less (bound 0.1%, observed 0.015%), and perplexity,
    # an average over every scored target, by a fraction of a percent (bound 0.5%, observed 0.016%).
    out32 = tmp_path / "s260k-w8a8-f32"
    assert sinkq.quantize(S260K, out32, "w8a8", fp_dtype="f32")["fp_dtype"] == "F32"
    packed = sinkq.load(out32)
    sim = sinkq.load(S260K, recipe="w8a8")
    assert packed.runtime == "packed" and sim.runtime == "simulated"
    ids = sim.tokenize(text_file.read_text(encoding="utf-8")[:1000])[:180]
    a, b = packed.logits(ids), sim.logits(ids)
    spread = float(b.max() - b.min())
    assert float(np.abs(a - b).max()) <= 0.02 * spread
    assert float(np.abs(a - b).mean()) <= 0.001 * spread
    pp, ps = packed.ppl(file=text_file, ctx=64, windows=3), sim.ppl(file=text_file, ctx=64, windows=3)
    assert pp["runtime"] == "packed" and abs(pp["ppl"] / ps["ppl"] - 1) < 0.005
    # The packed runtime is what `sinkq ppl` runs on the artifact.
    assert pp["window_nll"] == cli("ppl", "-m", out32, "-f", text_file, "--ctx", 64, "--max-windows", 3)["window_nll"]


# ---- analyze ------------------------------------------------------------------------------------


@needs_cli
def test_analyze_matches_cli(s260k):
    ref = cli("analyze", "-m", S260K, "--data", C4, "--samples", 2, "--len", 48)
    mine = s260k.analyze(data=C4, samples=2, len=48)
    assert mine["model_dir"] == ref["model_dir"] == str(S260K)
    assert mine == ref
    by_text = s260k.analyze(texts=["Once upon a time there was a cat. " * 4, "The dog ran to the park."])
    assert by_text["samples"] == 2 and by_text["data"] == {"texts": 2, "bos": True}
    with pytest.raises(TypeError):
        s260k.analyze()
    with pytest.raises(ValueError):
        s260k.analyze(texts=["a b c"], bits=9)


def test_import_pins_openblas_kernels_and_restores_the_environment():
    """As the CLI does (docs/architecture.md "Reproducibility"): on a CPU with AVX2 the module loads
    OpenBLAS with its Haswell kernels, whatever OpenBLAS would pick for this CPU model, and removes
    the variable again (numpy's own OpenBLAS and child processes keep their choice); a kernel set
    the user names is the one that runs."""
    flags = next(line.split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
    code = ("import ctypes, os, sinkq; f = ctypes.CDLL('libopenblas.so.0').openblas_get_corename; "
            "f.restype = ctypes.c_char_p; print(f().decode(), os.environ.get('OPENBLAS_CORETYPE'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    if all(f in flags for f in ("avx2", "fma", "f16c")):
        assert out.split() == ["Haswell", "None"]
    env["OPENBLAS_CORETYPE"] = "Prescott"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Prescott", "Prescott"]


# Ctrl-C during each long call, in a child Python (a heap corruption shows as its exit status):
# the call raises KeyboardInterrupt within 2 s of the signal — the check points are a layer of a
# forward pass (~0.2 s here for 1,000 tokens on 2 idle cores; 2 s leaves 10x for a loaded host)
# and each progress report of quantize — and the model then gives the logits it gave before, bit
# for bit (nothing shared was left half-done). Before, a SIGINT during logits() aborted the process
# with `free(): invalid size` in 2 runs of 3, and ppl() ran to its end (103 s) first.
CTRL_C_CHILD = r"""
import json, os, signal, sys, threading, time
import numpy as np
import sinkq
smol, c4, wiki, tmp, recipe = sys.argv[1:6]
# A process started in the background by a non-interactive shell (as CI may start this one)
# inherits SIGINT ignored, and Python then installs no handler: Ctrl-C would not reach it at all.
signal.signal(signal.SIGINT, signal.default_int_handler)
m = sinkq.load(smol)
ids = m.tokenize("The history of the city begins with a small village by the river. " * 80)[:1000]
probe = m.logits(ids[:8])
calls = {
    "logits": lambda: m.logits(ids),
    "logprobs": lambda: m.logprobs(ids),
    "ppl": lambda: m.ppl(file=wiki, ctx=512, windows=40),
    "analyze": lambda: m.analyze(data=c4, samples=16, len=512),
    "quantize": lambda: sinkq.quantize(smol, os.path.join(tmp, "a"), recipe),
    "load": lambda: sinkq.load(smol, recipe=recipe),
}
out = {}
for name, call in calls.items():
    sent = []
    def interrupt():
        time.sleep(0.8)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        call()
        out[name] = "returned"
    except KeyboardInterrupt:
        out[name] = time.monotonic() - sent[0]
    time.sleep(0.9)  # the timer has fired either way
out["same_logits_after"] = bool(np.array_equal(m.logits(ids[:8]), probe))
out["artifact_left"] = os.path.exists(os.path.join(tmp, "a"))
print(json.dumps(out))
"""


@needs_cli
def test_ctrl_c_stops_every_long_call_promptly(tmp_path):
    # A calibrated recipe (minutes of work) as the CLI writes it, with its calibration file.
    recipe = tmp_path / "recipe.json"
    d = subprocess.run([str(CLI), "quantize", "-m", str(SMOL), "--preset", "prefixquant-w4a4kv4", "--calib", str(C4),
                        "--dump-recipe", "-o", str(tmp_path / "unused")], capture_output=True, text=True, timeout=60)
    assert d.returncode == 0, d.stderr
    recipe.write_text(d.stdout)
    r = subprocess.run([sys.executable, "-c", CTRL_C_CHILD, str(SMOL), str(C4), str(WIKI), str(tmp_path), str(recipe)],
                       capture_output=True, text=True, timeout=600, env=os.environ)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for name in ("logits", "logprobs", "ppl", "analyze", "quantize", "load"):
        assert out[name] != "returned", f"{name} ran to its end through the Ctrl-C"
        assert out[name] < 2.0, f"{name}: KeyboardInterrupt {out[name]:.2f} s after the signal"
    assert out["same_logits_after"]
    assert not out["artifact_left"], "an interrupted quantize leaves no artifact (the temporary directory is removed)"


# `pip wheel ./python` after the main build takes its module (python/CMakeLists.txt: the build is
# brought up to date, nothing compiled in pip's directory — it took 23 min), and the wheel installs
# and runs in a fresh virtual environment. Without build isolation, so without the network.
def test_pip_wheel_reuses_the_main_build(tmp_path):
    if not list((ROOT / "build" / "python" / "sinkq").glob("_sinkq*.so")):
        pytest.fail("build/python/sinkq/_sinkq*.so is missing: run scripts/build.sh first")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                        "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(ROOT / "python")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.monotonic() - t0 < 300, "the wheel compiled the engine instead of reusing build/"
    wheels = list((tmp_path / "dist").glob("sinkq-*.whl"))
    assert len(wheels) == 1
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
                    str(wheels[0])], check=True, timeout=300)
    code = ("import sinkq, sys; m = sinkq.load(sys.argv[1]); "
            "print(sinkq.__file__); print(m.detokenize(m.tokenize('Once upon a time')))")
    out = subprocess.run([str(py), "-c", code, str(S260K)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    where, text = out.stdout.splitlines()[:2]
    assert where.startswith(str(venv)), where  # the installed package, not build/python
    assert text == "Once upon a time"


def test_generate_stop_strings(smol):
    prompt = "The Eiffel Tower is"
    full = smol.generate(prompt, max_tokens=60, temperature=0)
    full_text = "".join(p for _, p in full)
    for stop in ([". "], ["Paris", "."], "ffel To"):  # the last spans two tokens (" E", "iffel", " Tower")
        first = min((full_text.find(s) for s in ([stop] if isinstance(stop, str) else stop) if s in full_text),
                    default=-1)
        assert first > 0, f"the greedy text has none of {stop}: {full_text!r}"
        g = smol.generate(prompt, max_tokens=60, temperature=0, stop=stop)
        pieces = list(g)
        assert "".join(p for _, p in pieces) == full_text[:first] == g.text
        assert g.result["stop_string"] and g.ids == full.ids[:len(g.ids)]
    # Never seen: the whole text, the held-back tail released at the end (a last (-1, text)).
    g = smol.generate(prompt, max_tokens=60, temperature=0, stop=[full_text[-3:] + "@@"])
    assert "".join(p for _, p in g) == full_text and not g.result["stop_string"]
    for bad, err in ((["a", ""], ValueError), ([1], TypeError), (["x"] * 17, ValueError), (b"x", TypeError)):
        with pytest.raises(err):
            smol.generate(prompt, stop=bad)


def test_chat_uses_the_template_and_ends_at_the_turn(smol, s260k):
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
    reply = smol.chat(messages, temperature=0, max_tokens=64)
    g = smol.chat([(m["role"], m["content"]) for m in messages], temperature=0, max_tokens=64, stream=True)
    assert "".join(p for _, p in g) == reply and "Paris" in reply
    assert g.result["stopped"], "ended at <|im_end|>, not at max_tokens"
    # The prompt is the template's rendering, generation prompt included.
    rendered = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert g.prompt_ids == smol.tokenize(rendered)
    assert "<|im_end|>" not in reply
    assert smol.chat(messages, temperature=0, max_tokens=64, stop="Paris") == reply[:reply.index("Paris")]
    with pytest.raises(sinkq.Error, match="no chat template"):
        s260k.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="empty"):
        smol.chat([])
    with pytest.raises(TypeError):
        smol.chat("hi")


def test_signatures_and_docstrings_are_readable():
    callables = {"load": sinkq.load, "quantize": sinkq.quantize, "presets": sinkq.presets}
    for name in ("describe", "tokenize", "detokenize", "logits", "logprobs", "generate", "chat", "ppl", "analyze"):
        callables[name] = getattr(sinkq.Model, name)
    for name, f in callables.items():
        doc = f.__doc__ or ""
        first = doc.splitlines()[0] if doc else ""
        assert first.startswith(name + "("), (name, first)
        assert "handle" not in first and "::" not in first and "0.800000" not in first, (name, first)
        assert len(doc.splitlines()) >= 3, f"{name}: a signature and no description"
