// sinkq/train/fisher.cc — the Fisher information of K and V (fisher.h), streamed sample by sample.
#include "train/fisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "train/grad_model.h"

namespace sinkq::train {

std::string fisher_tensor(int64_t sample, int layer, const char* what) {
  return fmt::format("sample.{:05}.layer.{:03}.{}", sample, layer, what);
}

FisherSample fisher_sample(const ModelConfig& c, const Params<float>& p, const std::vector<int32_t>& toks,
                           const PrefixKv<float>* prefix, const std::function<void(int, std::vector<float>&)>& v_basis) {
  SINKQ_CHECK(toks.size() >= 2, "fisher: a sample needs at least 2 tokens, got {}", toks.size());
  std::vector<int32_t> targets(toks.begin() + 1, toks.end());
  targets.push_back(-1);
  Gradients<float> g = loss_and_grad(c, p, toks, targets, prefix, /*param_grads=*/false);
  // loss_and_grad differentiates the mean over n targets: × n gives the summed NLL's gradient.
  const float n = float(toks.size() - 1);
  FisherSample f;
  f.k = std::move(g.k_pre);
  f.v = std::move(g.v);
  if (v_basis)
    for (int l = 0; l < c.num_layers; ++l) v_basis(l, f.v[size_t(l)]);
  for (auto* per_layer : {&f.k, &f.v})
    for (auto& t : *per_layer)
      for (float& x : t) x = (x * n) * (x * n);
  f.k_values = std::move(g.k_pre_values);
  f.v_values = std::move(g.v_values);
  f.loss = double(g.loss);
  return f;
}

FisherResult write_fisher(const Model& m, const std::vector<std::vector<int32_t>>& samples, const std::string& out,
                          const std::map<std::string, std::string>& metadata,
                          const std::function<void(int64_t, int64_t)>& progress) {
  const ModelConfig& c = m.config();
  SINKQ_CHECK(!samples.empty(), "fisher: no calibration samples");
  for (size_t s = 0; s < samples.size(); ++s)
    SINKQ_CHECK(samples[s].size() >= 2 && int64_t(samples[s].size()) <= c.max_position_embeddings,
                "fisher: sample {} has {} tokens (2..{} needed)", s, samples[s].size(), c.max_position_embeddings);
  const int64_t KV = c.kv_dim();
  std::vector<SafetensorsStreamWriter::TensorSpec> specs;
  for (size_t s = 0; s < samples.size(); ++s)
    for (int l = 0; l < c.num_layers; ++l)
      for (const char* w : {"k_pre_rope", "k_fisher", "v", "v_fisher"})
        specs.push_back({fisher_tensor(int64_t(s), l, w), DType::F32, {int64_t(samples[s].size()), KV}});
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "sinkq-fisher";
  meta["layers"] = std::to_string(c.num_layers);
  meta["kv_dim"] = std::to_string(KV);
  meta["samples"] = std::to_string(samples.size());
  meta["definition"] = "F = (d l_s / d a)^2, l_s = summed next-token NLL of sample s; a = K before RoPE or V";
  SafetensorsStreamWriter w(out, std::move(specs), meta);
  const Params<float> p = Params<float>::from_model(m);
  FisherResult r;
  r.mean_k.assign(size_t(c.num_layers), 0.0);
  r.mean_v.assign(size_t(c.num_layers), 0.0);
  auto bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span(v)); };
  for (size_t s = 0; s < samples.size(); ++s) {
    const std::vector<int32_t>& toks = samples[s];
    const FisherSample f = fisher_sample(c, p, toks);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::vector<float>&fk = f.k[size_t(l)], &fv = f.v[size_t(l)];
      for (float x : fk) r.mean_k[size_t(l)] += x;
      for (float x : fv) r.mean_v[size_t(l)] += x;
      // Data order within a sample and layer is the names' order: k_fisher, k_pre_rope, v, v_fisher.
      w.write(fisher_tensor(int64_t(s), l, "k_fisher"), bytes(fk));
      w.write(fisher_tensor(int64_t(s), l, "k_pre_rope"), bytes(f.k_values[size_t(l)]));
      w.write(fisher_tensor(int64_t(s), l, "v"), bytes(f.v_values[size_t(l)]));
      w.write(fisher_tensor(int64_t(s), l, "v_fisher"), bytes(fv));
    }
    r.loss.push_back(f.loss);
    r.tokens += int64_t(toks.size());
    if (progress) progress(int64_t(s) + 1, int64_t(samples.size()));
  }
  w.commit();
  for (int l = 0; l < c.num_layers; ++l) {
    r.mean_k[size_t(l)] /= double(r.tokens * KV);
    r.mean_v[size_t(l)] /= double(r.tokens * KV);
  }
  r.samples = int64_t(samples.size());
  std::error_code ec;
  r.bytes = std::filesystem::file_size(out, ec);
  return r;
}

}  // namespace sinkq::train
