#include "cli/quant_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "calib/prefix.h"
#include "runtime/artifact.h"

namespace sinkq::cli {

namespace {
bool was_given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }
}  // namespace

std::shared_ptr<QuantFlags> add_quant_flags(CLI::App& cmd) {
  auto o = std::make_shared<QuantFlags>();
  QuantFlags::Given& g = o->given;
  std::string presets;
  for (const auto& n : quant::SimConfig::preset_names()) presets += (presets.empty() ? "" : "|") + n;
  g.preset = cmd.add_option("--preset", o->preset, "Quantization preset (" + presets + "); flags below override it")
                 ->capture_default_str();
  g.w_bits = cmd.add_option("--w-bits", o->w_bits, "Weight bits: 2..8, 16 = full precision");
  g.w_group = cmd.add_option("--w-group", o->w_group, "Weight group size along the input (0 = per output channel)");
  g.w_asym = cmd.add_flag("--w-asym", o->w_asym, "Asymmetric weight quantization (default symmetric)");
  g.w_clip = cmd.add_option("--w-clip", o->w_clip,
                            "Weight clip ratio in (0, 1] (default 1), or 'grid': per output channel / group, "
                            "searched on the layer output (needs --calib)");
  g.a_bits = cmd.add_option("--a-bits", o->a_bits, "Bits of the linear layers' inputs: 2..8, 16 = full precision");
  g.a_quant = cmd.add_option("--a-quant", o->a_quant,
                             "dynamic (per-token) | cross (CrossQuant) | static (per-tensor, calibrated: needs --calib)");
  g.a_asym = cmd.add_flag("--a-asym", o->a_asym, "Asymmetric activation quantization (dynamic or static; default symmetric)");
  g.a_clip = cmd.add_option("--a-clip", o->a_clip,
                            "Static activations: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  g.a_alpha = cmd.add_option("--a-alpha", o->a_alpha, "CrossQuant alpha in [0, 1] (default 0.15)");
  g.a_cross_cols = cmd.add_option("--a-cross-cols", o->a_cross_cols,
                                  "CrossQuant column maxima: per_call (default, the paper's) | running_max (causal)");
  g.kv_bits = cmd.add_option("--kv-bits", o->kv_bits, "KV cache bits: 2..8, 16 = full precision");
  g.kv_quant = cmd.add_option("--kv-quant", o->kv_quant, "KV scales: dynamic (default) | static (calibrated: needs --calib)");
  g.kv_gran = cmd.add_option("--kv-gran", o->kv_gran,
                             "KV scale granularity: token (dynamic only) | head (default) | tensor (static only)");
  g.kv_clip = cmd.add_option("--kv-clip", o->kv_clip,
                             "Static KV: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  g.rotate = cmd.add_flag("--rotate", o->rotate, "Hadamard rotation (QuaRot R1-R4, computationally invariant) before quantizing");
  g.rotate_seed = cmd.add_option("--rotate-seed", o->rotate_seed, "Seed of the random Hadamard signs (default 0)");
  g.calib = cmd.add_option("--calib", o->calib,
                           "Calibration text (jsonl with \"text\" per line, e.g. C4, or plain text) for --w-clip grid, "
                           "--a-quant static, --kv-quant static, --prefix auto");
  g.calib_samples = cmd.add_option("--calib-samples", o->calib_samples, "Calibration samples N (default 8)");
  g.calib_len = cmd.add_option("--calib-len", o->calib_len,
                               "Tokens per calibration sample incl. BOS (default min(512, max_position_embeddings))");
  g.calib_seed = cmd.add_option("--calib-seed", o->calib_seed, "Seed of the calibration sampling (default 0)");
  g.prefix = cmd.add_option("--prefix", o->prefix,
                            "Full-precision KV prefix in front of every sequence: bos (IntactKV[B]) | auto (PrefixQuant "
                            "§5.1 on --calib) | ids:1,2 | text:TEXT | system:TEXT (IntactKV[P]) | none");
  g.prefix_source = cmd.add_option("--prefix-source", o->prefix_source,
                                   "Who computes the prefix KV: fp (default; IntactKV on) | quant (the quantized model "
                                   "itself; IntactKV off baseline)");
  g.prefix_eta = cmd.add_option("--prefix-eta", o->prefix_eta,
                                "--prefix auto: outlier threshold eta, token-wise max / median at down_proj's input (default 64)");
  return o;
}

bool QuantFlags::calib_flags_given() const {
  return was_given(given.calib) || was_given(given.calib_samples) || was_given(given.calib_len) || was_given(given.calib_seed);
}

std::string QuantFlags::first_given() const {
  const CLI::Option* all[] = {given.preset, given.w_bits, given.w_group, given.w_asym, given.w_clip, given.a_bits,
                              given.a_quant, given.a_asym, given.a_clip, given.a_alpha, given.a_cross_cols,
                              given.kv_bits, given.kv_quant, given.kv_gran, given.kv_clip, given.rotate,
                              given.rotate_seed, given.calib, given.calib_samples, given.calib_len, given.calib_seed,
                              given.prefix, given.prefix_source, given.prefix_eta};
  for (const CLI::Option* o : all)
    if (was_given(o)) return o->get_name();
  return "";
}

bool QuantFlags::model_is_artifact(const std::string& dir, std::string_view command) const {
  if (!runtime::is_artifact(dir)) return false;
  const std::string g = first_given();
  SINKQ_CHECK(g.empty(),
              "-m {} is a sinkq artifact (already quantized), so {} does not apply: quantization flags go to "
              "'sinkq quantize', or to 'sinkq {}' on the source model",
              dir, g, command);
  return true;
}

quant::SimConfig QuantFlags::config() const {
  const Given& g = given;
  quant::SimConfig c = quant::SimConfig::from_preset(preset);
  if (was_given(g.w_bits)) c.w.bits = quant::parse_bits("--w-bits", w_bits);
  if (was_given(g.w_group)) {
    SINKQ_CHECK(w_group >= 0, "--w-group must be >= 0 (0 = per output channel), got {}", w_group);
    c.w.group = w_group;
  }
  if (was_given(g.w_asym)) c.w.symmetric = !w_asym;
  if (was_given(g.w_clip)) {
    const quant::ClipSetting cs = quant::parse_clip("--w-clip", w_clip);
    c.w.clip_grid = cs.grid;
    c.w.clip = cs.ratio;
  }
  if (was_given(g.a_bits)) c.a.bits = quant::parse_bits("--a-bits", a_bits);
  if (was_given(g.a_quant)) c.a.mode = quant::parse_act_mode(a_quant);
  if (was_given(g.a_asym)) c.a.symmetric = !a_asym;
  if (was_given(g.a_clip)) {
    SINKQ_CHECK(c.a.mode == quant::ActMode::Static, "--a-clip applies to --a-quant static only");
    const quant::ClipSetting cs = quant::parse_clip("--a-clip", a_clip);
    c.a.clip_grid = cs.grid;
    c.a.clip = cs.ratio;
  }
  if (was_given(g.a_alpha)) c.a.alpha = a_alpha;
  if (was_given(g.a_cross_cols)) {
    SINKQ_CHECK(a_cross_cols == "per_call" || a_cross_cols == "running_max",
                "unknown --a-cross-cols '{}': expected per_call or running_max", a_cross_cols);
    c.a.cross_columns = quant::parse_column_mode(a_cross_cols);
  }
  if (was_given(g.kv_bits)) c.kv.bits = quant::parse_bits("--kv-bits", kv_bits);
  if (was_given(g.kv_quant)) c.kv.mode = quant::parse_kv_mode(kv_quant);
  if (was_given(g.kv_gran)) c.kv.granularity = quant::parse_kv_granularity(kv_gran);
  if (was_given(g.kv_clip)) {
    SINKQ_CHECK(c.kv.mode == quant::KvMode::Static, "--kv-clip applies to --kv-quant static only");
    const quant::ClipSetting cs = quant::parse_clip("--kv-clip", kv_clip);
    c.kv.clip_grid = cs.grid;
    c.kv.clip = cs.ratio;
  }
  if (was_given(g.rotate_seed)) SINKQ_CHECK(rotate || c.rotate.on, "--rotate-seed needs --rotate");
  if (was_given(g.rotate)) c.rotate.on = c.rotate.on || rotate;
  if (was_given(g.rotate_seed)) c.rotate.seed = rotate_seed;
  if (was_given(g.calib)) c.calib.file = calib;
  c.calib.samples = calib_samples;
  c.calib.len = calib_len;  // 0: min(512, max_position_embeddings), set once the model is known
  c.calib.seed = calib_seed;
  if (was_given(g.prefix)) {
    if (prefix == "none") {
      c.prefix = quant::PrefixSim{};
    } else {
      parse_prefix_spec(prefix);  // fail fast on a malformed value (errors name --prefix)
      c.prefix.spec = prefix;
    }
  }
  if (was_given(g.prefix_source)) {
    SINKQ_CHECK(!c.prefix.spec.empty(), "--prefix-source needs a prefix (--prefix bos|auto|ids:..|text:..|system:..)");
    c.prefix.source = quant::parse_prefix_source(prefix_source);
  }
  if (was_given(g.prefix_eta)) {
    SINKQ_CHECK(c.prefix.spec == "auto", "--prefix-eta applies to --prefix auto only");
    SINKQ_CHECK(prefix_eta > 0, "--prefix-eta must be > 0 (got {})", prefix_eta);
  }
  c.validate();
  // Fail before loading anything when calibration is needed but no data was named.
  if (c.needs_calibration())
    SINKQ_CHECK(!c.calib.file.empty(), "{} needs calibration data: give --calib FILE",
                c.w.on() && c.w.clip_grid ? "--w-clip grid"
                : c.act_static()          ? "--a-quant static"
                                          : "--kv-quant static");
  if (c.prefix.spec == "auto")
    SINKQ_CHECK(!c.calib.file.empty(), "--prefix auto finds the outlier tokens on calibration data: give --calib FILE");
  return c;
}

std::string tokens_text(const std::vector<int32_t>& ids, const Tokenizer& tok) {
  std::string s;
  for (int32_t id : ids) s += fmt::format("{}{} {:?}", s.empty() ? "" : ", ", id, tok.token_text(id));
  return s;
}

QuantPipeline run_quant_pipeline(const QuantFlags& f, std::shared_ptr<const Model> model, const Tokenizer& tok,
                                 std::string_view log) {
  quant::SimConfig qcfg = f.config();
  const int64_t max_pos = model->config().max_position_embeddings;
  const bool auto_prefix = qcfg.prefix.spec == "auto";
  QuantPipeline out;
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
  } else if (f.calib_flags_given()) {
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
      const FoundPrefix found = find_prefix(ffind, out.calib.samples, f.prefix_eta, tok.bos_id(), &tok,
                                            [&](int64_t d, int64_t t) { progress(what, d, t); });
      qcfg.prefix.tokens = found.tokens;
      pj["how"] = fmt::format("PrefixQuant §5.1 on {} calibration samples (eta {})", out.calib.samples.size(),
                              f.prefix_eta);
      pj["found"] = found.to_json(&tok);
      std::fprintf(stderr, "%.*s: prefix auto: o = %d, tokens %s\n", int(log.size()), log.data(), found.o,
                   tokens_text(found.tokens, tok).c_str());
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
    pj["source"] = quant::prefix_source_name(qcfg.prefix.source);
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
  out.sim = quant::build_sim(model, qcfg, samples, [&plog](std::string_view stage, int64_t done, int64_t total) {
    progress(fmt::format("{}: {}", plog, stage), done, total);
  });
  return out;
}

}  // namespace sinkq::cli
