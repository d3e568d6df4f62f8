// tests/kernels/block_weights_test.cc — matmul and embed_rows over a matrix held in ggml blocks
// (a GGUF model held as stored, io/weights.h GgufWeights::Stored) against the same matrix widened
// to fp32 first (the model dequantized at load): the same bits on every ISA, for T on both sides
// of every GEMV/sgemm switch. Bit-identity is the contract here, not a tolerance: the kernels widen
// each block with the one scalar dequantizer and then run the F32 code on the same values in the
// same row blocks (ops.cc), so any difference is a bug.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

// tests/data/gguf/<T>.bin: the raw bytes of a [2, 512] tensor of type T (scripts/make_gguf_fixtures.py).
std::string fixture_bytes(const char* name) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "gguf" /
                    (std::string(name) + ".bin");
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), {}};
}

const DType kBlockTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// A [rows, cols] matrix of blocks drawn at random from the fixture's (realistic scales, every
// packed bit pattern for the K-quants), and its fp32 widening.
struct BlockMat {
  std::vector<std::byte> blocks;
  std::vector<float> f32;
  Mat stored, widened;
};
BlockMat random_block_mat(DType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const std::string pool = fixture_bytes(std::string(dtype_name(t)).c_str());
  const size_t bb = dtype_block_bytes(t);
  const int64_t be = dtype_block_elems(t);
  EXPECT_EQ(pool.size(), dtype_row_bytes(t, 1024));  // 2 x 512 elements
  const size_t npool = pool.size() / bb;
  BlockMat m;
  m.blocks.resize(size_t(rows) * dtype_row_bytes(t, cols));
  for (size_t b = 0; b < m.blocks.size() / bb; ++b)
    std::memcpy(m.blocks.data() + b * bb, pool.data() + (rng() % npool) * bb, bb);
  m.f32.resize(size_t(rows * cols));
  to_f32(t, m.blocks.data(), m.f32.data(), m.f32.size());
  EXPECT_EQ(cols % be, 0);
  m.stored = Mat{t, rows, cols, m.blocks.data(), "stored"};
  m.widened = Mat{DType::F32, rows, cols, m.f32.data(), "widened"};
  return m;
}

TEST(BlockWeights, MatmulAndEmbedRowsEqualTheWidenedMatrixBitForBit) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(7);
  // 300 rows: a whole and a partial 256-row sgemm block, and GEMV tiles of 24 with a remainder.
  const int64_t rows = 300, cols = 1024;
  const int64_t kTs[] = {1, 2, 5, 8, 9, 16, 17, 64, 65, 80};
  for (DType t : kBlockTypes) {
    SCOPED_TRACE(dtype_name(t));
    const BlockMat W = random_block_mat(t, rows, cols, rng);
    std::vector<float> bias = ktest::random_vec(rng, size_t(rows));
    for (Isa isa : ktest::all_isas()) {
      set_isa(isa);
      for (int64_t T : kTs) {
        const std::vector<float> x = ktest::random_vec(rng, size_t(T * cols));
        const float* b = T % 2 ? bias.data() : nullptr;
        std::vector<float> ys(size_t(T * rows), NAN), yw(ys.size(), NAN);
        matmul(x.data(), T, W.stored, b, ys.data());
        matmul(x.data(), T, W.widened, b, yw.data());
        EXPECT_EQ(std::memcmp(ys.data(), yw.data(), ys.size() * sizeof(float)), 0)
            << isa_name(isa) << " T=" << T;
      }
      const std::vector<int32_t> ids = {0, 299, 17, 17, 150};
      std::vector<float> es(ids.size() * size_t(cols), NAN), ew(es.size(), NAN);
      embed_rows(W.stored, ids, es.data());
      embed_rows(W.widened, ids, ew.data());
      EXPECT_EQ(std::memcmp(es.data(), ew.data(), es.size() * sizeof(float)), 0) << isa_name(isa);
    }
    // Row bytes are whole blocks: a row of a K-quant is cols / 256 blocks.
    EXPECT_EQ(dtype_row_bytes(t, cols), size_t(cols / dtype_block_elems(t)) * dtype_block_bytes(t));
  }
}

// Every ISA's dequantizer (reached through embed_rows, which widens a row with it) against the
// scalar reference on blocks of uniformly random bytes: every code and packed-scale bit pattern,
// and f16 scales of every finite value (subnormals included; exponent 31 is redrawn, as a NaN's
// payload is not part of the contract). Bit-identity: dequant_simd.inc says why it must hold.
TEST(BlockWeights, DequantizersEqualTheReferenceOnRandomBlocks) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(11);
  const int64_t rows = 64, cols = 1024;
  for (DType t : kBlockTypes) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> bytes(size_t(rows) * dtype_row_bytes(t, cols));
    for (uint8_t& b : bytes) b = uint8_t(rng());
    // The f16 scale fields: offsets within a block (core/gguf_quants.cc layouts).
    std::vector<size_t> halves = {0};
    if (t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q2_K || t == DType::Q4_K || t == DType::Q5_K)
      halves.push_back(2);
    if (t == DType::Q2_K) halves = {80, 82};
    if (t == DType::Q3_K) halves = {108};
    if (t == DType::Q6_K) halves = {208};
    const size_t bb = dtype_block_bytes(t);
    for (size_t b = 0; b < bytes.size() / bb; ++b)
      for (size_t off : halves) {
        uint16_t h;
        do h = uint16_t(rng()); while ((h & 0x7c00) == 0x7c00);
        std::memcpy(bytes.data() + b * bb + off, &h, 2);
      }
    std::vector<float> ref(size_t(rows * cols));
    to_f32(t, bytes.data(), ref.data(), ref.size());
    const Mat m{t, rows, cols, bytes.data(), "random"};
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int32_t i = 0; i < rows; ++i) ids[size_t(i)] = i;
    for (Isa isa : ktest::all_isas()) {
      set_isa(isa);
      std::vector<float> got(ref.size(), NAN);
      embed_rows(m, ids, got.data());
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << isa_name(isa);
    }
  }
}

TEST(BlockWeights, NamesAndGgmlIds) {
  EXPECT_EQ(dtype_name(DType::Q4_K), "Q4_K");
  EXPECT_EQ(dtype_of_ggml(12), DType::Q4_K);
  EXPECT_EQ(dtype_of_ggml(0), DType::F32);
  EXPECT_EQ(dtype_of_ggml(30), DType::BF16);
  EXPECT_FALSE(dtype_of_ggml(16).has_value());  // IQ2_XXS: not read
  EXPECT_FALSE(parse_dtype("Q4_K").has_value());  // never in a safetensors file or an artifact
  EXPECT_TRUE(dtype_is_block(DType::Q6_K));
  EXPECT_FALSE(dtype_is_block(DType::BF16));
  EXPECT_EQ(dtype_block_bytes(DType::Q6_K), 210u);
  EXPECT_EQ(dtype_row_bytes(DType::F16, 10), 20u);
}

}  // namespace
}  // namespace sinkq
