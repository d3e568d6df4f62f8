"""sinkq: outlier-aware low-bit quantization and inference of LLMs, from Python.

The C++ engine (include/sinkq/engine.h) behind a small API::

    import sinkq
    m = sinkq.load("../shared/models/stories260K", recipe="w8a8")   # quantized in process
    ids = m.tokenize("Once upon a time")
    x = m.logits(ids)                      # numpy float32 [len(ids), vocab_size]
    for tok_id, piece in m.generate("Once upon a time", max_tokens=32, temperature=0):
        print(piece, end="", flush=True)
    print(m.ppl(open("wiki.test.tokens").read(), ctx=256, windows=4)["ppl"])
    sinkq.quantize("../shared/models/stories260K", "/tmp/s260k-w8a8", recipe="w8a8")
    packed = sinkq.load("/tmp/s260k-w8a8")  # the packed int8 runtime

Results equal the `sinkq` command line's (`generate --json`, `ppl --json`, `analyze --json`,
`quantize --json`) bit for bit on one machine: the same library calls run. Every computing call
releases the GIL; errors a user can cause raise sinkq.Error (a RuntimeError) naming the path, the
recipe field or the value.
"""

import os as _os

# OpenMP threads wait passively, as the CLI and the tests run them (docs/architecture.md
# "Threads"): spinning workers make a busy 2-core machine several times slower. libgomp reads the
# variable when it is loaded, i.e. by the import below; set OMP_WAIT_POLICY yourself to override.
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")


# OpenBLAS (the AVX2 and scalar paths' sgemm) runs its AVX2 kernels on every CPU with AVX2 (+ FMA, F16C),
# as the CLI has it (src/cli/main.cc): left to itself it picks a kernel set per CPU model, each
# rounding differently, so results would differ between hosts. It reads the variable when it is
# loaded, i.e. by the import below (unless an earlier import loaded the same library); the variable
# is removed again after it, so that other BLAS copies (numpy's) and child processes keep theirs.
def _cpu_has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split()
                    return all(f in flags for f in ("avx2", "fma", "f16c"))
    except OSError:
        pass
    return False


_pin_blas = "OPENBLAS_CORETYPE" not in _os.environ and _cpu_has_avx2()
if _pin_blas:
    _os.environ["OPENBLAS_CORETYPE"] = "Haswell"
try:
    from ._sinkq import Error, Generation, Model, load, presets, quantize  # noqa: E402
finally:
    if _pin_blas:
        del _os.environ["OPENBLAS_CORETYPE"]

try:
    from ._sinkq import __version__  # noqa: E402
except ImportError:  # pragma: no cover
    __version__ = "unknown"

__all__ = ["Error", "Generation", "Model", "load", "presets", "quantize", "__version__"]
