// sinkq/quant/pipeline.cc — see pipeline.h.
#include "quant/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "calib/prefix.h"
#include "core/error.h"
#include "core/interrupt.h"

namespace sinkq::quant {

Pipeline run_pipeline(Recipe qcfg, std::shared_ptr<const Model> model, const Tokenizer& tok,
                      const PipelineOptions& opt) {
  const std::string_view log = opt.log;
  auto progress = [&opt](const std::string& what, int64_t done, int64_t total) {
    check_interrupt();  // every stage's progress report is a check point (core/interrupt.h)
    if (opt.progress) opt.progress(what, done, total);
  };
  const int64_t max_pos = model->config().max_position_embeddings;
  const bool auto_prefix = qcfg.prefix.spec == "auto";
  Pipeline out;
  out.calib_json = nullptr;
  out.prefix_json = nullptr;
  // Calibration samples, only when the configuration (or --prefix auto) uses them.
  const bool need_samples = qcfg.needs_calibration() || auto_prefix;
  const bool len_given = qcfg.calib.len != 0;
  if (need_samples) {
    if (qcfg.calib.len == 0) qcfg.calib.len = std::min<int64_t>(512, max_pos);
    SINKQ_CHECK(qcfg.calib.len <= max_pos, "--calib-len {} is longer than the model's max_position_embeddings ({})",
                qcfg.calib.len, max_pos);
    CalibOptions co;
    co.samples = qcfg.calib.samples;
    co.len = qcfg.calib.len;
    co.seed = qcfg.calib.seed;
    out.calib = load_calib(qcfg.calib.file, tok, co);
    std::fprintf(stderr, "%.*s: calibration %s: %zu samples x %lld tokens (seed %llu)\n", int(log.size()), log.data(),
                 qcfg.calib.file.c_str(), out.calib.samples.size(), (long long)co.len, (unsigned long long)co.seed);
  } else if (opt.calib_flags_given) {
    // Nothing to calibrate: the flags are ignored, and the printed configuration says so (null).
    std::fprintf(stderr, "%.*s: note: no part of this configuration is calibrated; --calib* flags are unused\n",
                 int(log.size()), log.data());
  }
  // The prefix tokens.
  if (!qcfg.prefix.spec.empty()) {
    const PrefixSpec spec = parse_prefix_spec(qcfg.prefix.spec);
    nlohmann::json pj{{"spec", qcfg.prefix.spec}};
    if (spec.kind == PrefixSpec::Kind::Auto) {
      // §5.1 on the full-precision, unrotated model: outlier tokens are a property of the model's
      // tokens (the rotation is computationally invariant and the prefix KV is recomputed in the
      // rotated basis anyway); samples start with [BOS], as inference does.
      Forward ffind(model, qcfg.calib.len);
      const std::string what = fmt::format("{}: prefix auto, sample", log);
      const FoundPrefix found = find_prefix(ffind, out.calib.samples, qcfg.prefix.eta, tok.bos_id(), &tok,
                                            [&](int64_t d, int64_t t) { progress(what, d, t); });
      qcfg.prefix.tokens = found.tokens;
      pj["how"] = fmt::format("PrefixQuant §5.1 on {} calibration samples (eta {})", out.calib.samples.size(),
                              qcfg.prefix.eta);
      pj["found"] = found.to_json(&tok);
      if (!model->whole()) {  // a pipeline stage: the first stage counted every layer (calib/outliers.h)
        pj = stage_handoff().from_first(std::move(pj));
        qcfg.prefix.tokens = pj["found"]["tokens"].get<std::vector<int32_t>>();
      }
      std::fprintf(stderr, "%.*s: prefix auto: o = %d, tokens %s\n", int(log.size()), log.data(),
                   pj["found"]["o"].get<int>(), tokens_text(qcfg.prefix.tokens, tok).c_str());
    } else {
      qcfg.prefix.tokens = prefix_tokens(spec, tok, model->dir());
      pj["how"] = spec.kind == PrefixSpec::Kind::Bos      ? "[BOS] (IntactKV[B])"
                  : spec.kind == PrefixSpec::Kind::Ids    ? "explicit token ids"
                  : spec.kind == PrefixSpec::Kind::System ? "system prompt through the chat template (IntactKV[P])"
                                                          : "text, tokenized with the tokenizer's BOS";
    }
    SINKQ_CHECK(!qcfg.prefix.tokens.empty(), "--prefix {} gives no tokens", qcfg.prefix.spec);
    qcfg.prefix.bos_id = tok.bos_id();
    const int64_t P = int64_t(qcfg.prefix.tokens.size());
    SINKQ_CHECK(P < max_pos, "--prefix {} has {} tokens: no room left in max_position_embeddings ({})",
                qcfg.prefix.spec, P, max_pos);
    std::vector<std::string> texts;
    for (int32_t id : qcfg.prefix.tokens) texts.push_back(tok.token_text(id));
    pj["tokens"] = qcfg.prefix.tokens;
    pj["texts"] = texts;
    pj["source"] = prefix_source_name(qcfg.prefix.source);
    out.prefix_json = pj;
    // Behind the prefix the body of a sample is its tokens (minus a leading [BOS] when the prefix
    // holds one); P + body must fit max_position. A default length is cut to fit; a given one is
    // build_sim's error.
    if (qcfg.needs_calibration() && !len_given) {
      const int64_t strip = qcfg.prefix.strips_bos() && out.calib.bos ? 1 : 0;
      const int64_t room = max_pos - P + strip;  // tokens a sample may keep, its [BOS] included
      SINKQ_CHECK(room >= 2 + strip, "--prefix {} ({} tokens) leaves no room for calibration samples in {} positions",
                  qcfg.prefix.spec, P, max_pos);
      if (room < qcfg.calib.len) {
        for (auto& s : out.calib.samples)
          if (int64_t(s.size()) > room) s.resize(size_t(room));
        std::fprintf(stderr, "%.*s: calibration samples cut to %lld tokens to fit behind the %lld-token prefix\n",
                     int(log.size()), log.data(), (long long)room, (long long)P);
        qcfg.calib.len = room;
      }
    }
  }
  if (qcfg.needs_calibration())
    out.calib_json = {{"file", out.calib.file},
                      {"format", out.calib.format},
                      {"documents", out.calib.documents},
                      {"eligible_documents", out.calib.eligible},
                      {"samples", out.calib.samples.size()},
                      {"len", qcfg.calib.len},
                      {"seed", out.calib.options.seed},
                      {"bos", out.calib.bos},
                      {"body_drops_leading_bos", qcfg.prefix.on() && qcfg.prefix.strips_bos()}};
  if (qcfg.any() || qcfg.rotate.on || qcfg.prefix.on())
    std::fprintf(stderr, "%.*s: quantization %s\n", int(log.size()), log.data(), qcfg.describe().c_str());
  const std::string plog(log);
  const std::span<const std::vector<int32_t>> samples =
      qcfg.needs_calibration() ? std::span<const std::vector<int32_t>>(out.calib.samples)
                               : std::span<const std::vector<int32_t>>();
  out.sim = build_sim(model, qcfg, samples, [&](std::string_view stage, int64_t done, int64_t total) {
    progress(fmt::format("{}: {}", plog, stage), done, total);
  });
  return out;
}

}  // namespace sinkq::quant
