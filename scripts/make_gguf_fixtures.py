#!/usr/bin/env python3
"""Writes the GGUF dequantization fixtures in tests/data/gguf/ (used by tests/io/gguf_quants_test.cc).

How to run (from anywhere; the output directory is found from this file's location):

    pip install gguf==0.19.0 numpy
    python3 scripts/make_gguf_fixtures.py

Deterministic: a fixed seed per type (1000 + ggml type id), so re-running rewrites identical bytes
(check with `git status tests/data/gguf`; written with gguf 0.19.0 and numpy 2.4.6 — numpy does not
promise identical random streams across versions). Re-run it only on purpose, e.g. to add a type; the committed files
are the reference.

For each ggml type T in TYPES it writes:
    T.gguf  a GGUF v3 file with one tensor "fixture" of shape [2, 512] (numpy order; ggml
            ne = [512, 2]): 2 rows of 512, i.e. 2 K-quant super-blocks (256) or 16 32-blocks
            per row, and 4 KB or less of tensor data.
    T.bin   that tensor's raw bytes exactly as stored in the GGUF data section, so the C++ test
            does not depend on a GGUF parser (it checks that T.bin occurs inside T.gguf).
    T.f32   the expected dequantization, gguf.quants.dequantize() of the tensor read back from
            T.gguf with GGUFReader, as raw little-endian float32 (1024 values, row-major).
Raw float32 rather than JSON: bit-exact with no decimal round trip, 4 KB, read with one memcpy.

Tensor contents:
  * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (types gguf-py can quantize): standard normal
    data with a few outliers (so block scales vary), quantized with gguf.quants.quantize (F32/F16
    via numpy casts).
  * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (gguf-py only dequantizes them): uniformly random block bytes,
    which exercise every bit pattern of the packed quants and 6-bit scales, with the f16 super-block
    scale fields (d, and dmin where present) replaced by finite values of moderate size and random
    sign (|x| log-uniform in [1e-4, 1e-1]) so every result is finite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize
except ImportError:  # pragma: no cover
    sys.exit("needs gguf-py: pip install gguf==0.19.0 numpy")

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gguf"
ROWS, COLS = 2, 512
TENSOR = "fixture"

# Byte offsets of the f16 super-block scale fields in each K-quant block (ggml-common.h).
K_SCALE_FIELDS = {
    T.Q2_K: [80, 82],  # d, dmin (after scales[16], qs[64])
    T.Q3_K: [108],     # d (after hmask[32], qs[64], scales[12])
    T.Q4_K: [0, 2],    # d, dmin (first)
    T.Q5_K: [0, 2],    # d, dmin (first)
    T.Q6_K: [208],     # d (after ql[128], qh[64], scales[16])
}
QUANTIZED_FROM_DATA = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
TYPES = QUANTIZED_FROM_DATA + list(K_SCALE_FIELDS)


def normal_data(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    idx = rng.choice(x.size, size=8, replace=False)
    x.flat[idx] *= np.float32(8.0)  # outliers: some blocks get larger scales
    return x


def random_kquant_bytes(qtype: T, rng: np.random.Generator) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block_size
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in K_SCALE_FIELDS[qtype]:
        mag = 10.0 ** rng.uniform(-4.0, -1.0, size=n_blocks)
        sign = np.where(rng.random(n_blocks) < 0.5, -1.0, 1.0)
        blocks[:, off:off + 2] = (sign * mag).astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(ROWS, COLS // block_size * type_size)


def tensor_for(qtype: T, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if qtype in K_SCALE_FIELDS:
        return random_kquant_bytes(qtype, rng)
    x = normal_data(rng)
    if qtype == T.F32:
        return x
    if qtype == T.F16:
        return x.astype(np.float16)
    return quantize(x, qtype)  # uint8 bytes, shape [ROWS, bytes per row]


def write_one(qtype: T, seed: int) -> list[Path]:
    data = tensor_for(qtype, seed)
    path = OUT / f"{qtype.name}.gguf"
    w = gguf.GGUFWriter(str(path), arch="sinkq-fixture")
    w.add_string("sinkq.fixture.type", qtype.name)
    w.add_uint32("sinkq.fixture.seed", seed)
    raw_dtype = None if qtype in (T.F32, T.F16) else qtype
    w.add_tensor(TENSOR, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Expected values come from what a reader sees in the file, not from the array written.
    r = gguf.GGUFReader(str(path))
    (t,) = [t for t in r.tensors if t.name == TENSOR]
    assert t.tensor_type == qtype, (t.tensor_type, qtype)
    assert [int(v) for v in t.shape] == [COLS, ROWS], t.shape  # ggml order
    raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
    assert raw.tobytes() == np.ascontiguousarray(data).view(np.uint8).tobytes()
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    expected = dequantize(raw.reshape(ROWS, -1), qtype)  # uint8 bytes in; F32/F16 are viewed
    expected = np.asarray(expected, dtype=np.float32).reshape(ROWS, COLS)
    assert np.all(np.isfinite(expected)), qtype.name
    assert raw.size == ROWS * COLS // block_size * type_size

    bin_path = OUT / f"{qtype.name}.bin"
    f32_path = OUT / f"{qtype.name}.f32"
    bin_path.write_bytes(raw.tobytes())
    f32_path.write_bytes(expected.astype("<f4").tobytes())
    return [path, bin_path, f32_path]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    total = 0
    for qtype in TYPES:
        for p in write_one(qtype, seed=1000 + int(qtype)):
            total += p.stat().st_size
        print(f"{qtype.name:5s} ok")
    print(f"wrote {len(TYPES) * 3} files to {OUT}, {total} bytes")


if __name__ == "__main__":
    main()
