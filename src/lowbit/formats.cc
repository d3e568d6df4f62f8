// sinkq/lowbit/formats.cc — format lookup and the scalar pack / unpack / dequantize of PackedTensor
// (through the codebook rows of formats/packed_format.h).
#include "lowbit/formats.h"

#include <string>

#include "core/error.h"

namespace sinkq::lowbit {

namespace {

std::string all_names() {
  std::string s;
  for (const FormatDesc& t : kFormats) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

// Number of parameter rows: per-tensor activations share one scale.
int64_t param_rows(const FormatDesc& t, int64_t rows) {
  return t.granularity == quant::Granularity::PerTensor ? 1 : rows;
}

}  // namespace

const FormatDesc& traits(PackedFormat f) {
  const FormatDesc* t = formats::find_format(f);
  SINKQ_CHECK(t != nullptr, "lowbit: {} is not a packed format (expected one of {})", int(f), all_names());
  return *t;
}

PackedFormat parse_format(std::string_view name) {
  for (const FormatDesc& t : kFormats)
    if (t.name == name) return t.format;
  fail("lowbit: unknown packed format '{}' (expected one of {})", name, all_names());
}

quant::QuantSpec quant_spec(PackedFormat f, float clip_ratio) {
  const FormatDesc& t = traits(f);
  quant::QuantSpec s;
  s.bits = t.bits;
  s.symmetric = t.symmetric;
  s.granularity = t.granularity;
  s.group_size = t.group;
  s.clip_ratio = clip_ratio;
  return s;
}

int64_t PackedTensor::groups() const {
  const FormatDesc& t = info();
  return t.group > 0 ? cols / t.group : 1;
}

PackedTensor pack(PackedFormat f, const int8_t* q, const quant::Params& p, int64_t rows, int64_t cols) {
  const FormatDesc& t = traits(f);
  const quant::QuantSpec spec = quant_spec(f);
  quant::validate(spec, rows, cols);
  SINKQ_CHECK(p.bits == t.bits && p.symmetric == t.symmetric && p.granularity == t.granularity,
              "lowbit pack: params are int{} {} {}, format {} needs int{} {} {}", p.bits,
              p.symmetric ? "sym" : "asym", quant::granularity_name(p.granularity), t.name, t.bits,
              t.symmetric ? "sym" : "asym", quant::granularity_name(t.granularity));
  PackedTensor out;
  out.format = f;
  out.rows = rows;
  out.cols = cols;
  const int64_t prow = param_rows(t, rows), ng = out.groups();
  SINKQ_CHECK(p.prow == prow && p.pcol == ng && p.cols() == cols,
              "lowbit pack: params are [{}, {}] for {} columns, format {} on [{}, {}] needs [{}, {}]",
              p.prow, p.pcol, p.cols(), t.name, rows, cols, prow, ng);
  const size_t np = size_t(prow * ng);
  SINKQ_CHECK(p.scale.size() == np && (t.symmetric ? p.zero.empty() : p.zero.size() == np),
              "lowbit pack: {} scales / {} zero points, format {} needs {}", p.scale.size(),
              p.zero.size(), t.name, np);
  out.scales = p.scale;
  if (!t.symmetric) {
    out.zeros.resize(np);
    for (size_t i = 0; i < np; ++i) {
      SINKQ_CHECK(p.zero[i] >= 0 && p.zero[i] < (1 << t.bits), "lowbit pack: zero point {} outside [0, {}]",
                  p.zero[i], (1 << t.bits) - 1);
      out.zeros[i] = uint8_t(p.zero[i]);
    }
  }
  const int lo = formats::uniform::code_min(t.bits), hi = formats::uniform::code_max(t.bits);  // every mode
  const int64_t rb = row_bytes(t, cols);
  const formats::CodebookRows& cb = formats::codebook_rows(t.codebook);
  out.codes.assign(size_t(rows * rb), 0);
  for (int64_t i = 0; i < rows; ++i) {
    const int8_t* src = q + i * cols;
    for (int64_t j = 0; j < cols; ++j)
      SINKQ_CHECK(src[j] >= lo && src[j] <= hi, "lowbit pack: code {} at row {}, col {} outside [{}, {}] ({})",
                  int(src[j]), i, j, lo, hi, t.name);
    cb.pack(src, cols, t.bits, out.codes.data() + i * rb);
  }
  return out;
}

std::vector<int8_t> unpack_codes(const PackedTensor& pt) {
  const FormatDesc& t = pt.info();
  const int64_t rb = row_bytes(t, pt.cols);
  SINKQ_CHECK(pt.codes.size() == size_t(pt.rows * rb), "lowbit: {} tensor [{}, {}] has {} code bytes, expected {}",
              t.name, pt.rows, pt.cols, pt.codes.size(), pt.rows * rb);
  const formats::CodebookRows& cb = formats::codebook_rows(t.codebook);
  std::vector<int8_t> q(size_t(pt.rows * pt.cols));
  for (int64_t i = 0; i < pt.rows; ++i) cb.unpack(pt.codes.data() + i * rb, pt.cols, t.bits, q.data() + i * pt.cols);
  return q;
}

quant::Params params_of(const PackedTensor& pt) {
  const FormatDesc& t = pt.info();
  quant::Params p;
  p.granularity = t.granularity;
  p.bits = t.bits;
  p.symmetric = t.symmetric;
  p.prow = param_rows(t, pt.rows);
  p.pcol = pt.groups();
  p.col_block = t.group > 0 ? t.group : pt.cols;
  const size_t np = size_t(p.prow * p.pcol);
  SINKQ_CHECK(pt.scales.size() == np && pt.zeros.size() == (t.symmetric ? 0 : np),
              "lowbit: {} tensor [{}, {}] has {} scales / {} zero points, expected {}", t.name, pt.rows,
              pt.cols, pt.scales.size(), pt.zeros.size(), np);
  p.scale = pt.scales;
  p.zero.assign(pt.zeros.begin(), pt.zeros.end());
  return p;
}

void dequantize(const PackedTensor& pt, float* out) {
  const FormatDesc& t = pt.info();
  const quant::Params p = params_of(pt);  // checks the parameter counts
  const int64_t rb = row_bytes(t, pt.cols);
  SINKQ_CHECK(pt.codes.size() == size_t(pt.rows * rb), "lowbit: {} tensor [{}, {}] has {} code bytes, expected {}",
              t.name, pt.rows, pt.cols, pt.codes.size(), pt.rows * rb);
  // One (scale, zero) per span of col_block columns; spans start on a byte boundary (groups of
  // 32k columns, or whole rows).
  const formats::CodebookRows& cb = formats::codebook_rows(t.codebook);
  const int off = formats::uniform::code_offset(t.bits, t.symmetric);
  const int64_t span_bytes = p.col_block * t.bits / 8;
  for (int64_t i = 0; i < pt.rows; ++i)
    for (int64_t g = 0; g < p.pcol; ++g) {
      const size_t k = size_t((p.prow == 1 ? 0 : i) * p.pcol + g);
      const int zc = (t.symmetric ? 0 : int(pt.zeros[k])) - off;
      cb.dequantize(pt.codes.data() + i * rb + g * span_bytes, p.col_block, t.bits, zc, pt.scales[k],
                    out + i * pt.cols + g * p.col_block);
    }
}

PackedTensor quantize(PackedFormat f, const float* x, int64_t rows, int64_t cols, float clip_ratio) {
  const quant::QuantSpec spec = quant_spec(f, clip_ratio);
  const quant::Params p = quant::compute_params(spec, x, rows, cols);
  std::vector<int8_t> q(size_t(rows * cols));
  quant::quantize_to_int(spec, p, x, rows, cols, q.data());
  return pack(f, q.data(), p, rows, cols);
}

// ---- KV formats ----------------------------------------------------------------------------

namespace {
std::string all_kv_names() {
  std::string s;
  for (const FormatDesc& t : kKvFormats) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}
}  // namespace

const FormatDesc& kv_traits(PackedFormat f) {
  const FormatDesc* t = formats::find_kv_format(f);
  SINKQ_CHECK(t != nullptr, "lowbit: {} is not a KV cache format (expected one of {})", int(f), all_kv_names());
  return *t;
}

PackedFormat parse_kv_format(std::string_view name) {
  for (const FormatDesc& t : kKvFormats)
    if (t.name == name) return t.format;
  fail("lowbit: unknown KV cache format '{}' (expected one of {})", name, all_kv_names());
}

PackedFormat kv_format(int bits, bool symmetric, quant::Granularity g) {
  for (const FormatDesc& t : kKvFormats)
    if (t.bits == bits && t.symmetric == symmetric && t.granularity == g) return t.format;
  fail("lowbit: no KV cache format stores int{} {} {} (KV formats: int8 / int4, sym or asym, per_head "
       "or per_row dynamic, per_head_shared or per_tensor static)",
       bits, symmetric ? "sym" : "asym", quant::granularity_name(g));
}

quant::QuantSpec kv_spec(PackedFormat f, int head_dim, float clip_ratio) {
  const FormatDesc& t = kv_traits(f);
  quant::QuantSpec s;
  s.bits = t.bits;
  s.symmetric = t.symmetric;
  s.granularity = t.granularity;
  if (t.granularity == quant::Granularity::PerHead || t.granularity == quant::Granularity::PerHeadShared)
    s.head_dim = head_dim;
  s.clip_ratio = clip_ratio;
  return s;
}

int64_t kv_param_count(const FormatDesc& t, int kv_heads, int64_t capacity) {
  switch (t.granularity) {
    case quant::Granularity::PerHead: return capacity * kv_heads;
    case quant::Granularity::PerRow: return capacity;
    case quant::Granularity::PerHeadShared: return kv_heads;
    default: return 1;
  }
}

int64_t kv_cache_bytes(PackedFormat f, int num_layers, int kv_heads, int head_dim, int64_t capacity) {
  const FormatDesc& t = kv_traits(f);
  const int64_t per = capacity * kv_row_bytes(t, int64_t(kv_heads) * head_dim) +
                      kv_param_count(t, kv_heads, capacity) * t.param_bytes();
  return 2 * int64_t(num_layers) * per;
}

}  // namespace sinkq::lowbit
