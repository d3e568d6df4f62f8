#include "runtime/packed_linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <exception>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/uniform_int.h"
#include "kernels/ops.h"

namespace sinkq::runtime {

namespace {

using lowbit::PackedFormat;
using lowbit::PackedTensor;

// The weight format with these properties (group 0 = one scale per output channel), or nullptr.
const lowbit::FormatDesc* find_weight_format(int bits, bool symmetric, int group) {
  for (const lowbit::FormatDesc& t : lowbit::kFormats)
    if (t.role == lowbit::Role::Weight && t.bits == bits && t.symmetric == symmetric && t.group == group)
      return &t;
  return nullptr;
}

// The format of a block of `width` columns with one scale (and zero point) per row. Asymmetric
// int4 has no per-row format; one group spanning the row has the same params, so w4_g{width}_asym
// stores it when such a group size exists.
PackedFormat per_row_format(const WeightScheme& ws, int64_t width, const std::string& name, int64_t col0,
                            int64_t cols) {
  const lowbit::FormatDesc* t = find_weight_format(ws.bits, ws.symmetric, 0);
  if (!t && width <= 128) t = find_weight_format(ws.bits, ws.symmetric, int(width));
  if (!t)
    fail("{} [in = {}]: columns {}..{} form one asymmetric int4 group of {} columns per row (as the simulator "
         "quantizes them), which no packed format stores (asymmetric int4 groups are 32, 64 or 128 columns); "
         "use symmetric weights or a group that divides {}",
         name, cols, col0, col0 + width - 1, width, cols);
  return t->format;
}

// x[:, c0 : c0 + n] of an activation tensor (same scales); c0 even for 4-bit codes.
void slice_columns(const PackedTensor& x, int64_t c0, int64_t n, PackedTensor& out) {
  const lowbit::FormatDesc& t = x.info();
  SINKQ_ASSERT(c0 >= 0 && n > 0 && c0 + n <= x.cols && (t.bits == 8 || c0 % 2 == 0));
  out.format = x.format;
  out.rows = x.rows;
  out.cols = n;
  out.scales = x.scales;
  out.zeros.clear();
  const int64_t src_rb = lowbit::row_bytes(t, x.cols), rb = lowbit::row_bytes(t, n);
  const int64_t b0 = t.bits == 8 ? c0 : c0 / 2;
  out.codes.resize(size_t(x.rows * rb));
  for (int64_t i = 0; i < x.rows; ++i) {
    const uint8_t* src = x.codes.data() + i * src_rb + b0;
    uint8_t* dst = out.codes.data() + i * rb;
    std::copy(src, src + rb, dst);
    if (t.bits == 4 && n % 2 == 1) dst[rb - 1] &= 0x0F;  // the layout's zero high nibble of an odd row
  }
}

std::string sym_name(bool s) { return s ? "sym" : "asym"; }

}  // namespace

void check_weights(const WeightScheme& w, const std::string& what) {
  const std::string pre = what.empty() ? "" : what + ": ";
  SINKQ_CHECK(w.bits == 8 || w.bits == 4,
              "{}{}-bit weights cannot run: the lowbit kernels have int8 and int4 weight formats only", pre, w.bits);
  SINKQ_CHECK(w.clip > 0.0f && w.clip <= 1.0f, "{}weight clip ratio {} is outside (0, 1]", pre, w.clip);
  if (w.bits == 8) {
    SINKQ_CHECK(w.group == 0,
                "{}int8 weights in groups of {} columns cannot run: int8 weights are per output channel only "
                "(w8_per_row)", pre, w.group);
    SINKQ_CHECK(w.symmetric, "{}asymmetric int8 weights cannot run: w8_per_row is symmetric", pre);
  } else {
    SINKQ_CHECK(w.group == 0 || w.group == 32 || w.group == 64 || w.group == 128,
                "{}int4 weights in groups of {} columns cannot run: int4 groups are 32, 64 or 128 columns "
                "(or 0: per output channel)", pre, w.group);
    SINKQ_CHECK(w.group != 0 || w.symmetric,
                "{}asymmetric per-channel int4 weights cannot run: asymmetric int4 formats are per group only "
                "(w4_g32_asym, w4_g64_asym, w4_g128_asym)", pre);
  }
}

void RuntimeConfig::validate() const {
  check_weights(w);
  for (size_t i = 0; i < weight_rules.size(); ++i)
    check_weights(weight_rules[i].apply(w), fmt::format("weight_rules[{}] ({})", i, weight_rules[i].describe()));
  SINKQ_CHECK(a.bits != 16,
              "weight-only quantization (W{}A16, fp32 activations) cannot run: the lowbit kernels multiply int8 / "
              "int4 activation codes; quantize activations to 8 or 4 bits, or use the simulator", w.bits);
  SINKQ_CHECK(a.bits == 8 || a.bits == 4,
              "{}-bit activations cannot run: the lowbit kernels take int8 or int4 activations", a.bits);
  if (a.mode == ActMode::Cross) {
    SINKQ_CHECK(!a.cross.empty(),
                "CrossQuant activations need their folded static column maxima, one per layer and site (attn_in, o_in, "
                "mlp_in, down_in): an element-wise scale has no integer GEMM; calibrate with --a-cross-cols static");
    for (const quant::CrossFold& f : a.cross)
      SINKQ_CHECK(f.bits == a.bits && f.cols() > 0 && f.col_max.size() == f.b.size(),
                  "a CrossQuant fold of {} bits over {} columns does not fit A{} activations", f.bits, f.cols(), a.bits);
  } else {
    SINKQ_CHECK(a.cross.empty(), "{} CrossQuant folds were given for {} activations", a.cross.size(),
                quant::act_mode_name(a.mode));
  }
  SINKQ_CHECK(a.symmetric,
              "asymmetric activations cannot run: the lowbit kernels take symmetric activation codes only "
              "(x̂ = s·c, no activation zero point in the integer GEMM)");
  if (a.mode != ActMode::Static)
    SINKQ_CHECK(a.scales.empty(), "{} static activation scales were given for {} activations", a.scales.size(),
                quant::act_mode_name(a.mode));
  else
    SINKQ_CHECK(!a.scales.empty(),
                "static per-tensor activations need calibrated scales: one per layer and site (attn_in, o_in, "
                "mlp_in, down_in)");
}

std::string RuntimeConfig::describe() const {
  const std::string wg = w.group == 0 ? "per-channel" : fmt::format("g{}", w.group);
  std::string s = fmt::format("W{} {} {}", w.bits, wg, sym_name(w.symmetric));
  if (w.clip != 1.0f) s += fmt::format(" clip={}", w.clip);
  for (const quant::WeightRule& r : weight_rules) s += " | " + r.describe();
  const std::string am = a.mode == ActMode::Dynamic  ? std::string("dynamic per-token")
                         : a.mode == ActMode::Static ? std::string("static per-tensor")
                         : fmt::format("CrossQuant static columns alpha={}", a.cross.empty() ? 0.0f : a.cross[0].alpha);
  s += fmt::format(" | A{} {} {}", a.bits, am, sym_name(a.symmetric));
  if (head.on()) s += fmt::format(" | head {} A8", head.describe());
  return s;
}

PackedFormat activation_format(const ActScheme& a) {
  RuntimeConfig c;
  c.a = a;
  c.validate();
  const bool dyn = a.mode != ActMode::Static;  // Cross: per-token codes at the token factor's scale
  if (a.bits == 8) return dyn ? PackedFormat::A8_PerToken : PackedFormat::A8_PerTensor;
  return dyn ? PackedFormat::A4_PerToken : PackedFormat::A4_PerTensor;
}

std::vector<WeightBlock> weight_blocks(const WeightScheme& ws, int64_t cols, const std::string& name) {
  check_weights(ws, name);
  // Column blocks, as the simulator's fake_quant_weight: [0, main) with the group format, and the
  // ragged rest (or the whole row) with one scale per row.
  const int64_t G = ws.group;
  std::vector<WeightBlock> out;
  if (G <= 0 || G >= cols) {
    out.push_back({0, cols, per_row_format(ws, cols, name, 0, cols)});
  } else {
    const PackedFormat gf = find_weight_format(ws.bits, ws.symmetric, int(G))->format;  // validated above
    const int64_t main = cols / G * G;
    out.push_back({0, main, gf});
    if (main < cols) out.push_back({main, cols - main, per_row_format(ws, cols - main, name, main, cols)});
  }
  return out;
}

void PackedLinear::init_activation(PackedFormat act, quant::Params static_params,
                                   std::shared_ptr<const quant::CrossFold> cross) {
  const lowbit::FormatDesc& at = lowbit::traits(act);
  SINKQ_CHECK(at.role == lowbit::Role::Activation, "{}: {} is not an activation format", name_, at.name);
  if (cross) {
    SINKQ_CHECK(at.granularity == quant::Granularity::PerRow && cross->bits == at.bits && cross->cols() == cols_,
                "{}: a CrossQuant fold of {} bits over {} columns does not fit {} activations on {} columns", name_,
                cross->bits, cross->cols(), at.name, cols_);
    cross_ = std::move(cross);
  }
  SINKQ_CHECK(rows_ > 0 && cols_ > 0, "{}: empty weight matrix [{}, {}]", name_, rows_, cols_);
  SINKQ_CHECK(cols_ <= lowbit::kMaxCols, "{}: {} input columns exceed the integer GEMM's limit of {}", name_, cols_,
              lowbit::kMaxCols);
  if (at.granularity == quant::Granularity::PerTensor) {
    const quant::Params& p = static_params;
    SINKQ_CHECK(p.granularity == quant::Granularity::PerTensor && p.symmetric && p.bits == at.bits && p.prow == 1 &&
                    p.pcol == 1 && p.cols() == cols_ && p.scale.size() == 1,
                "{}: static activation params (int{} {} {}, {} columns) do not fit {} on {} columns (expected "
                "int{} sym per_tensor)", name_, p.bits, sym_name(p.symmetric), quant::granularity_name(p.granularity),
                p.cols(), at.name, cols_, at.bits);
    SINKQ_CHECK(p.scale[0] >= FLT_MIN && p.scale[0] <= FLT_MAX,
                "{}: static activation scale {} is not a positive normal fp32", name_, p.scale[0]);
    static_ = std::move(static_params);
  }
}

PackedLinear::PackedLinear(std::string name, const float* w, int64_t rows, int64_t cols, const WeightScheme& ws,
                           PackedFormat act, quant::Params static_params,
                           std::shared_ptr<const quant::CrossFold> cross)
    : name_(std::move(name)), rows_(rows), cols_(cols), act_(act) {
  init_activation(act, std::move(static_params), std::move(cross));
  std::vector<float> buf;
  for (const WeightBlock& b : weight_blocks(ws, cols, name_)) {
    const float* src = w;
    if (b.cols != cols) {
      buf.resize(size_t(rows * b.cols));
      for (int64_t r = 0; r < rows; ++r)
        std::copy(w + r * cols + b.col0, w + r * cols + b.col0 + b.cols, buf.data() + r * b.cols);
      src = buf.data();
    }
    const PackedTensor pt = lowbit::quantize(b.format, src, rows, b.cols, ws.clip);
    blocks_.push_back(Block{b.col0, b.cols, lowbit::repack(pt)});
  }
}

PackedLinear::PackedLinear(std::string name, int64_t rows, int64_t cols, std::vector<PlanarBlock> blocks,
                           PackedFormat act, quant::Params static_params,
                           std::shared_ptr<const quant::CrossFold> cross)
    : name_(std::move(name)), rows_(rows), cols_(cols), act_(act) {
  init_activation(act, std::move(static_params), std::move(cross));
  SINKQ_CHECK(!blocks.empty() && blocks.size() <= 2, "{}: {} weight blocks (expected 1, or 2 with a ragged last group)",
              name_, blocks.size());
  int64_t next = 0;
  for (PlanarBlock& b : blocks) {
    const lowbit::FormatDesc& t = lowbit::traits(b.w.format);
    SINKQ_CHECK(t.role == lowbit::Role::Weight, "{}: {} is not a weight format", name_, t.name);
    SINKQ_CHECK(b.col0 == next && b.w.cols > 0 && b.col0 + b.w.cols <= cols && b.w.rows == rows,
                "{}: weight block at column {} [{}, {}] does not continue the blocks of a [{}, {}] matrix at column {}",
                name_, b.col0, b.w.rows, b.w.cols, rows, cols, next);
    SINKQ_CHECK(b.col0 % 2 == 0 || t.bits == 8, "{}: a 4-bit block starts at odd column {}", name_, b.col0);
    next = b.col0 + b.w.cols;
    blocks_.push_back(Block{b.col0, b.w.cols, lowbit::repack(b.w)});  // checks the arrays against the shape
  }
  SINKQ_CHECK(next == cols, "{}: the weight blocks cover columns [0, {}) of {}", name_, next, cols);
}

namespace {
// The code of column c of a row in lowbit::repack's layout (row_base: the row's first byte in its
// 16-row block): u = c + 128 (8-bit), or u = c + 8 in the low (j < 4) / high nibble (4-bit).
int kernel_code(const lowbit::FormatDesc& t, const uint8_t* row_base, int64_t c) {
  const int step = t.bits == 4 ? 8 : 4;
  const int64_t s = c / step, j = c % step;
  const uint8_t byte = row_base[s * 64 + j % 4];
  return t.bits == 8 ? int(byte) - 128 : int((byte >> (j < 4 ? 0 : 4)) & 0xF) - 8;
}
}  // namespace

void PackedLinear::gather_rows(std::span<const int32_t> ids, float* out) const {
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t r = ids[k];
    SINKQ_CHECK(r >= 0 && r < rows_, "{}: token id {} is outside the table's {} rows", name_, r, rows_);
    float* dst = out + int64_t(k) * cols_;
    for (const Block& b : blocks_) {
      const lowbit::KernelWeights& kw = b.w;
      const lowbit::FormatDesc& t = lowbit::traits(kw.format);
      SINKQ_CHECK(t.symmetric, "{}: rows of {} weights cannot be gathered (an int8 table is symmetric)", name_, t.name);
      const int64_t blk = r / 16, i = r % 16, ng = kw.groups, per = kw.cols / ng;
      const uint8_t* src = kw.codes.data() + blk * kw.steps * 64 + i * 4;
      // x̂ = s·c, quant::dequantize's value (formats/uniform_int.h decode with zero 0).
      for (int64_t c = 0; c < kw.cols; ++c)
        dst[b.col0 + c] = formats::uniform::decode(kernel_code(t, src, c), 0,
                                                   kw.scales[size_t((blk * ng + c / per) * 16 + i)]);
    }
  }
}

PackedTensor PackedLinear::planar(size_t b) const {
  SINKQ_ASSERT(b < blocks_.size());
  const lowbit::KernelWeights& kw = blocks_[b].w;
  const lowbit::FormatDesc& t = lowbit::traits(kw.format);
  PackedTensor pt;
  pt.format = kw.format;
  pt.rows = kw.rows;
  pt.cols = kw.cols;
  const int64_t ng = kw.groups, rb = lowbit::row_bytes(t, kw.cols);
  pt.codes.assign(size_t(kw.rows * rb), 0);
  pt.scales.resize(size_t(kw.rows * ng));
  if (!t.symmetric) pt.zeros.resize(size_t(kw.rows * ng));
  for (int64_t r = 0; r < kw.rows; ++r) {
    const int64_t blk = r / 16, i = r % 16;
    const uint8_t* src = kw.codes.data() + blk * kw.steps * 64 + i * 4;
    uint8_t* dst = pt.codes.data() + r * rb;
    for (int64_t c = 0; c < kw.cols; ++c) {
      const int code = kernel_code(t, src, c);
      if (t.bits == 8)
        dst[c] = uint8_t(int8_t(code));
      else
        dst[c / 2] = uint8_t(dst[c / 2] | ((code & 0xF) << (c % 2 == 0 ? 0 : 4)));
    }
    for (int64_t g = 0; g < ng; ++g) {
      pt.scales[size_t(r * ng + g)] = kw.scales[size_t((blk * ng + g) * 16 + i)];
      if (!t.symmetric) pt.zeros[size_t(r * ng + g)] = uint8_t(kw.zeros[size_t((blk * ng + g) * 16 + i)]);
    }
  }
  return pt;
}

void PackedLinear::quantize_input(const float* x, int64_t T, PackedTensor& xq) const {
  static thread_local std::vector<float> tmp;
  try {
    if (cross_) {
      // CrossQuant folded (quant/crossquant.h): z = x / b and the token scales, then the per-token
      // codes at those scales.
      tmp.resize(size_t(T * cols_) + size_t(T));
      float* z = tmp.data();
      float* s = z + T * cols_;
      quant::cross_fold_scales(*cross_, x, T, cols_, z, s);
      lowbit::quantize_rows(act_, z, T, cols_, s, xq);
    } else if (lowbit::traits(act_).granularity == quant::Granularity::PerTensor)
      lowbit::quantize_static(act_, x, T, cols_, static_, xq);
    else
      lowbit::quantize_dynamic(act_, x, T, cols_, 1.0f, xq);
  } catch (const Error& e) {  // a non-finite input: say which linear's input it reached
    fail("{}: its input activations: {} (a NaN / Inf produced upstream of this linear: check the model's weights)",
         name_, e.what());
  }
}

void PackedLinear::run(const PackedTensor& xq, const float* bias, float* y) const {
  static thread_local PackedTensor part;
  static thread_local std::vector<float> tmp;
  if (blocks_.size() == 1) {
    lowbit::gemm(xq, blocks_[0].w, bias, y);
    return;
  }
  // Ragged last group: y = gemm(main columns) + bias, then + gemm(tail columns), in this order.
  slice_columns(xq, blocks_[0].col0, blocks_[0].cols, part);
  lowbit::gemm(part, blocks_[0].w, bias, y);
  tmp.resize(size_t(xq.rows * rows_));
  for (size_t b = 1; b < blocks_.size(); ++b) {
    slice_columns(xq, blocks_[b].col0, blocks_[b].cols, part);
    lowbit::gemm(part, blocks_[b].w, nullptr, tmp.data());
    for (size_t i = 0; i < tmp.size(); ++i) y[i] += tmp[i];
  }
}

void PackedLinear::apply(const float* x, int64_t T, const float* bias, float* y) const {
  if (T <= 0) return;
  static thread_local PackedTensor xq;  // per-thread scratch (capacity reused): apply() may run on several threads
  quantize_input(x, T, xq);
  run(xq, bias, y);
}

bool PackedLinear::same_input_quantization(const PackedLinear& o) const {
  if (o.cols_ != cols_ || o.act_ != act_) return false;
  if (lowbit::traits(act_).granularity == quant::Granularity::PerTensor &&
      (o.static_.scale != static_.scale || o.static_.zero != static_.zero))
    return false;
  if (bool(o.cross_) != bool(cross_)) return false;
  return !cross_ || o.cross_ == cross_ ||
         (o.cross_->bits == cross_->bits && o.cross_->alpha == cross_->alpha && o.cross_->col_max == cross_->col_max);
}

void PackedLinear::apply_shared(const float* x, int64_t T, std::span<const LinearImpl* const> others,
                                std::span<const float* const> bias, std::span<float* const> y) const {
  SINKQ_ASSERT(others.size() == bias.size() && others.size() == y.size() && !others.empty() && others[0] == this);
  constexpr size_t kMax = lowbit::kMaxGemmOuts;  // more members: one apply each
  const PackedLinear* pl[kMax];
  bool share = others.size() <= kMax;
  bool one_format = share;  // every member one block of one format: one GEMM dispatch
  for (size_t m = 0; share && m < others.size(); ++m) {
    pl[m] = dynamic_cast<const PackedLinear*>(others[m]);
    share = pl[m] && same_input_quantization(*pl[m]);
    one_format = share && one_format && pl[m]->blocks_.size() == 1 && pl[m]->blocks_[0].w.format == blocks_[0].w.format;
  }
  if (!share) return LinearImpl::apply_shared(x, T, others, bias, y);
  if (T <= 0) return;
  static thread_local PackedTensor xq;
  quantize_input(x, T, xq);
  if (one_format) {
    lowbit::GemmOut outs[kMax];
    for (size_t m = 0; m < others.size(); ++m) outs[m] = {&pl[m]->blocks_[0].w, bias[m], y[m]};
    lowbit::gemm_multi(xq, std::span(outs, others.size()));
    return;
  }
  for (size_t m = 0; m < others.size(); ++m) pl[m]->run(xq, bias[m], y[m]);
}

std::string PackedLinear::describe() const {
  std::string w;
  for (const Block& b : blocks_) {
    if (!w.empty()) w += " + ";
    w += std::string(lowbit::traits(b.w.format).name);
    if (blocks_.size() > 1) w += fmt::format("[{}:{}]", b.col0, b.col0 + b.cols);
  }
  return fmt::format("{} [{}, {}]: {} x {}{}", name_, rows_, cols_, w, lowbit::traits(act_).name,
                     cross_ ? fmt::format(" (CrossQuant folded, alpha {})", cross_->alpha) : "");
}

size_t PackedLinear::bytes() const {
  size_t n = 0;
  for (const Block& b : blocks_) n += b.w.bytes();
  return n;
}

PackedFormat head_act_format() {
  const quant::QuantSpec s = quant::HeadSim{}.activations();
  return activation_format(ActScheme{.bits = s.bits, .symmetric = s.symmetric, .mode = ActMode::Dynamic, .scales = {}, .cross = {}});
}

void pack_head(ModelWeights& w, const std::function<std::shared_ptr<const LinearImpl>(const Mat& m)>& make, bool first,
               bool last) {
  const bool tied = w.tied();  // (a middle pipeline stage holds neither table: nothing to pack)
  if (last || (tied && first)) w.lm_head_impl = make(w.lm_head);
  if (first) w.embed_impl = tied ? w.lm_head_impl : make(w.embed);
  for (Mat* m : {&w.embed, &w.lm_head}) {
    m->data = nullptr;
    m->dtype = DType::F32;
  }
}

std::shared_ptr<const Model> pack_model(std::shared_ptr<const Model> base, const RuntimeConfig& cfg) {
  SINKQ_ASSERT(base != nullptr);
  cfg.validate();
  const PackedFormat act = activation_format(cfg.a);
  const ModelWeights& src = base->weights();
  const int L = int(src.layers.size());
  quant::check_rule_layers(cfg.weight_rules, L);
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < kNumLinearRoles; ++i)
      SINKQ_CHECK(!src.layers[size_t(l)].impl_of(i), "pack_model: layer {} already runs packed linears (pack the "
                  "unpacked model)", l);
  // Static scales: exactly one per (layer, site).
  std::vector<const quant::Params*> table(size_t(L) * 4, nullptr);
  if (cfg.a.mode == ActMode::Static) {
    for (const StaticActScale& e : cfg.a.scales) {
      const int slot = linear_input_index(e.site);
      SINKQ_CHECK(slot >= 0, "static activation scale for site {}: only the linear inputs attn_in, o_in, mlp_in "
                  "and down_in are quantized", site_name(e.site));
      SINKQ_CHECK(e.layer >= 0 && e.layer < L, "static activation scale for layer {}: the model has {} layers",
                  e.layer, L);
      const quant::Params*& t = table[size_t(e.layer) * 4 + size_t(slot)];
      SINKQ_CHECK(t == nullptr, "two static activation scales for layer {} site {}", e.layer, site_name(e.site));
      t = &e.params;
    }
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < 4; ++i)
        SINKQ_CHECK(table[size_t(l) * 4 + size_t(i)] != nullptr,
                    "static per-tensor activations: no calibrated scale for layer {} site {}", l,
                    site_name(kLinearInputSites[i]));
  }

  // CrossQuant: one fold per (layer, site), shared by the linears the site feeds.
  std::vector<std::shared_ptr<const quant::CrossFold>> folds;
  if (cfg.a.mode == ActMode::Cross) {
    SINKQ_CHECK(cfg.a.cross.size() == size_t(L) * 4, "CrossQuant activations: {} folds for {} layers (one per layer "
                "and site: {})", cfg.a.cross.size(), L, size_t(L) * 4);
    for (const quant::CrossFold& f : cfg.a.cross) folds.push_back(std::make_shared<const quant::CrossFold>(f));
  }

  ModelWeights w;  // empty store: every borrowed pointer points into `base`, kept alive
  w.embed = src.embed;
  w.lm_head = src.lm_head;
  w.final_norm = src.final_norm;
  w.layers = src.layers;
  // m widened to fp32 (and folded with CrossQuant's b) and packed under ws (the linears and the
  // int8 head alike).
  auto pack = [](const Mat& m, const WeightScheme& ws, PackedFormat a, const quant::Params& sp,
                 std::shared_ptr<const quant::CrossFold> fold) -> std::shared_ptr<const LinearImpl> {
    std::vector<float> f32(size_t(m.rows * m.cols));
    to_f32(m.dtype, m.data, f32.data(), f32.size());
    if (fold) quant::cross_fold_weight(*fold, f32.data(), m.rows, m.cols);
    return std::make_shared<const PackedLinear>(m.name, f32.data(), m.rows, m.cols, ws, a, sp, std::move(fold));
  };
  pack_linears(w, [&](int l, int i, const Mat& m) {
    const size_t slot = size_t(l) * 4 + size_t(kLinearRoles[i].input);
    const quant::Params* sp = table[slot];
    return pack(m, cfg.weights(l, i, L), act, sp ? *sp : quant::Params{}, folds.empty() ? nullptr : folds[slot]);
  });
  if (cfg.head.on())
    pack_head(w, [&](const Mat& m) { return pack(m, cfg.head.weights(), head_act_format(), {}, nullptr); });
  return Model::with_weights(std::move(base), std::move(w));
}

void pack_linears(ModelWeights& w,
                  const std::function<std::shared_ptr<const LinearImpl>(int l, int i, const Mat& m)>& make,
                  LayerRange held) {
  const int64_t jobs = int64_t(w.layers.size()) * kNumLinearRoles;
  std::vector<std::shared_ptr<const LinearImpl>> packed(static_cast<size_t>(jobs));
  std::vector<std::exception_ptr> errors(packed.size());  // the first matrix's error is reported
  // Matrices are independent: packed in parallel (the lowbit calls inside run single-threaded).
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
  for (int64_t j = 0; j < jobs; ++j) {
    try {
      const int l = int(j / kNumLinearRoles), i = int(j % kNumLinearRoles);
      if (held.holds(l, int(w.layers.size()))) packed[size_t(j)] = make(l, i, w.layers[size_t(l)].mat(i));
    } catch (...) {
      errors[size_t(j)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (int64_t j = 0; j < jobs; ++j)
    w.layers[size_t(j / kNumLinearRoles)].impl_of(int(j % kNumLinearRoles)) = std::move(packed[size_t(j)]);
}

}  // namespace sinkq::runtime
