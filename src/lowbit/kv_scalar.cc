// sinkq/lowbit/kv_scalar.cc — the scalar KvTable: plain fp32 loops, one code at a time.
#include <cstdint>
#include <vector>

#include "lowbit/kv_kernels.h"

namespace sinkq::lowbit::detail {

namespace {

void scores(const float* q, int64_t ldq, int G, const KvRows& r, int64_t n, int D, float scale, float* s,
            int64_t lds) {
  float l[kKvMaxHeadDim];
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = r.codes + j * r.ld;
    const int zc = kv_zc(r, j);
    for (int d = 0; d < D; ++d) l[d] = float(kv_code(row, d, r.bits) - zc);
    for (int i = 0; i < G; ++i) {
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += q[i * ldq + d] * l[d];
      s[i * lds + j] = scale * (r.scale[j * r.ls] * acc);
    }
  }
}

void weighted_sum(float* p, int64_t ldp, int G, const KvRows& r, int64_t n, int D, const float* alpha,
                  float* out) {
  for (int i = 0; i < G * D; ++i) out[i] = 0.0f;
  float l[kKvMaxHeadDim];
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = r.codes + j * r.ld;
    const int zc = kv_zc(r, j);
    for (int d = 0; d < D; ++d) l[d] = float(kv_code(row, d, r.bits) - zc);
    for (int i = 0; i < G; ++i) {
      const float w = p[i * ldp + j] = p[i * ldp + j] * r.scale[j * r.ls];
      for (int d = 0; d < D; ++d) out[i * D + d] += w * l[d];
    }
  }
  for (int i = 0; i < G; ++i)
    for (int d = 0; d < D; ++d) out[i * D + d] = alpha[i] * out[i * D + d];
}

}  // namespace

const KvTable& kv_table_scalar() {
  static const KvTable t{scores, weighted_sum};
  return t;
}

}  // namespace sinkq::lowbit::detail
