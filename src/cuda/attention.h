// sinkq/cuda/attention.h — attention over [fp32 prefix; packed int8 / int4 KV body] on a CUDA
// device: a layer of lowbit::PackedKvCache held in device memory as the CPU holds it, and causal
// GQA attention over it with the shared fp32 prefix in front (PrefixQuant / IntactKV), a sliding
// window and Gemma's soft-cap, as lowbit::attention_packed computes it (its double oracle,
// lowbit::ref::attention_packed, is the device test's reference). Flash-decoding: the visible keys
// of each (token, kv head) in splits of 128 rows, one thread block each, merged in order
// (cuda/attention_kernels.cu); rows are stored on the device (dynamic formats) or uploaded from the
// CPU cache. The codebook (KVQuant's nuqX) body likewise (DeviceCbLayer, attention_codebook: rows
// decoded into shared memory with their outliers and RoPE). Not yet: the int8 recent window, fp16
// prefix storage, a device store for codebook rows.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/linear.h"
#include "kernels/ops.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/kv_kernels.h"

namespace sinkq::cuda {

// One layer's K and V body on the device (all `capacity` rows of the CPU cache's arrays).
class DeviceKvLayer {
 public:
  // Throws sinkq::Error for a layer out of range or a device error.
  DeviceKvLayer(const lowbit::PackedKvCache& c, int layer);
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t capacity() const { return capacity_; }
  size_t bytes() const;
  // Quantizes k, v [T, kv_heads·head_dim] (device memory) into rows [row0, row0 + T), exactly as
  // lowbit::PackedKvCache::store does on the CPU (the same codes, scales and zero points; static
  // formats with the calibrated params uploaded with the layer, codes only). Dynamic formats refuse
  // a non-finite value with its row and column (the call's rows are then not valid, as after the
  // CPU store's error); static ones clamp it as quant::quantize_to_int does.
  void store(int64_t row0, const float* k, const float* v, int64_t T);
  // The layer's K (value = false) or V arrays back on the host, as PackedKvCache holds them.
  struct HostArrays {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    std::vector<uint8_t> zeros;
  };
  HostArrays download(bool value) const;

 private:
  friend void attention_packed(const AttnShape&, const float*, const float*, const float*, int64_t,
                               const DeviceKvLayer&, int64_t, int64_t, float*, DeviceBuffer&);
  struct Side {
    DeviceBuffer codes, scales, zeros;
    int64_t ld = 0, ls = 0, head_step = 0;
    int bits = 8;
  };
  Side k_, v_;
  DeviceBuffer bad_;
  bool dynamic_ = true, symmetric_ = true, per_head_ = true;
  int kv_heads_ = 0, head_dim_ = 0;
  int64_t capacity_ = 0;
};

// One layer's K and V codebook body (KVQuant's nuqX: lowbit::CodebookKvCache) on the device: the
// rows written so far, uploaded as the CPU holds them (index streams, levels, channel or row ranges,
// the outliers' CSR). Rows are appended on the CPU and uploaded (no device store for codebooks yet).
class DeviceCbLayer {
 public:
  // A layer's arrays in host memory, as lowbit::CbRows describes head 0 of them (codes with
  // lowbit::detail::kCodeSlack bytes readable past the last row; levels padded to 16; channel
  // ranges [kv_dim + 16] or row ranges [rows][2]; row_ptr [rows + 1]; col / val [row_ptr[rows]]).
  struct Part {
    const uint8_t* codes = nullptr;
    int64_t ld = 0;
    int bits = 4;
    const float* levels = nullptr;
    const float* ch_scale = nullptr;
    const float* ch_zero = nullptr;
    const float* row_sz = nullptr;
    const uint32_t* row_ptr = nullptr;
    const uint16_t* col = nullptr;
    const uint16_t* val = nullptr;
  };
  // Rows [0, c.rows_written(layer)) of a layer. Throws sinkq::Error for a bad layer or a head_dim
  // whose slices are not whole bytes.
  DeviceCbLayer(const lowbit::CodebookKvCache& c, int layer, int head_dim);
  // From arrays built elsewhere (the benchmark's synthetic million-row bodies).
  DeviceCbLayer(int kv_heads, int head_dim, int64_t rows, const Part& k, const Part& v);
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t rows() const { return rows_; }
  size_t bytes() const;

 private:
  friend void attention_codebook(const AttnShape&, const float*, const float*, const float*, const float*, int64_t,
                                 const DeviceCbLayer&, int64_t, int64_t, const float*, float*, DeviceBuffer&);
  struct Side {
    DeviceBuffer codes, levels, ch_scale, ch_zero, row_sz, row_ptr, col, val;
    int64_t ld = 0;
    int bits = 4;
  };
  void upload(Side& side, const Part& p);
  Side k_, v_;
  int kv_heads_ = 0, head_dim_ = 0;
  int64_t rows_ = 0;
};

// out [T, n_heads, head_dim] = attention of q [T, n_heads, head_dim] over the prefix (P rows of
// prefix_k / prefix_v [P, n_kv_heads, head_dim]; P = 0: none) and body rows [0, n_past + T) of
// `body` (the T new ones stored). Every pointer is device memory; scratch holds the split partials
// (grown as needed). Synchronous; throws sinkq::Error on a shape the kernels do not take (more than
// 16 query heads per kv head, head_dim above 256) or rows beyond the body.
void attention_packed(const AttnShape& s, const float* q, const float* prefix_k, const float* prefix_v, int64_t P,
                      const DeviceKvLayer& body, int64_t n_past, int64_t T, float* out, DeviceBuffer& scratch);

// The same over a codebook body, as lowbit::attention_codebook: prefix keys scored with q, body keys
// with q_body (null: q; a rotated model's body keys carry no R3, so the caller un-rotates q); cs
// null when the body keys were stored after RoPE, else [rows, head_dim] cos | sin rows (device)
// rotating body row b's key by cs + b·head_dim (KVQuant's pre-RoPE keys). Body rows are decoded 64
// at a time into shared memory (outliers patched, keys rotated) per split of 128 keys; the splits
// merged as attention_packed's. Synchronous; throws sinkq::Error as attention_packed does, and for
// an odd head_dim or a group × head_dim needing more shared memory than the device gives a block.
void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const float* prefix_k,
                        const float* prefix_v, int64_t P, const DeviceCbLayer& body, int64_t n_past, int64_t T,
                        const float* cs, float* out, DeviceBuffer& scratch);

}  // namespace sinkq::cuda
