// sinkq/model/kv_store.h — where a Forward keeps its KV cache body when it is not the fp32
// KVCache: an abstract store the runtime fills in (runtime/packed_kv.h: int8 / int4 packed), so
// the model layer stays below the kernels that store and read packed rows.
//
// Protocol, per layer and chunk of T tokens (model.cc Forward::layer): the projections write the
// new K (after RoPE) and V rows into fp32 scratch [T, kv_dim]; the site hooks at k and v see and
// may change them (online rotations, observers); then write() stores them at body rows
// [row0, row0 + T) and attention() runs the T queries against [prefix; body rows 0..row0+T-1].
// The prefix (kv_prefix.h) is passed in as an fp32 segment every call: a store never holds it.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/ops.h"

namespace sinkq {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual int num_layers() const = 0;
  virtual int64_t kv_dim() const = 0;
  virtual int64_t capacity() const = 0;  // body rows
  virtual size_t bytes() const = 0;      // memory held for the body (every layer, K and V)
  virtual std::string describe() const = 0;
  // Whether write() takes K before RoPE (KVQuant's pre-RoPE keys): the rows after the k_pre_rope
  // site hooks. Forward then forms no post-RoPE keys and runs no k site; attention() applies RoPE
  // (and the R3 rotation a k-site hook would have) itself. Default: after RoPE and the k site.
  virtual bool keys_before_rope() const { return false; }
  // Whether write() may start again at an earlier row than the last one written (a rewind: the
  // rows from there on are dropped). False for a store whose state depends on the rows in order
  // (the int8 ring of --kv-recent); Forward::truncate refuses such a store.
  virtual bool rewindable() const { return true; }
  // Stores k, v [T, kv_dim] fp32 at body rows [row0, row0 + T) of `layer` (overwriting).
  virtual void write(int layer, int64_t row0, const float* k, const float* v, int64_t T) = 0;
  // Causal attention of q [T, n_heads, head_dim] at body rows n_past.. (absolute positions
  // prefix.rows + n_past + t) against [prefix; body rows 0..n_past+t]: out [T, n_heads, head_dim],
  // as kernels/ops.h attention.
  virtual void attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix,
                         int64_t n_past, int64_t T, float* out) const = 0;
};

}  // namespace sinkq
