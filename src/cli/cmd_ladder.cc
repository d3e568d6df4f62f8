// sinkq ladder -m DIR -f TEXT --calib FILE --bits w4a4kv4|w4a8kv4|w8a8kv8 [--ctx N] [--max-windows K]
//              [--tables table6,table2,intactkv] [--prefix SPEC] [--rotate-seed S]
//              [--intactkv-prompt SPEC] [--calib-samples N] [--calib-len L] [--calib-seed S] [--json]
// The ablations of PrefixQuant and IntactKV on one model, every row scored on the same targets
// (the `prefix` protocol of eval/ppl.h) with perplexity and KLD against the full-precision model:
//   table6    PrefixQuant Table 6: RTN dynamic per-token → + rotation → + grid search (weight clip)
//             → + static (per-tensor activations, per-head KV; per-tensor at 8 bits; grid) →
//             + prefixed outliers (the --prefix tokens, full-precision KV, calibration behind them)
//   table2    PrefixQuant Table 2 analogue: W16A<a> static per-tensor and W16A16KV<kv> static
//             per-head (per-tensor at 8 bits): original / + rotation / + prefix
//   intactkv  IntactKV Table 1 / 6 analogues: W3 g128 RTN, W4A4 (dynamic) + rotation and the --bits
//             setting (dynamic per-token / per-head) + rotation, each without / with IntactKV[B]
//             (prefix [BOS]: KV from the quantized model / full precision) and, with
//             --intactkv-prompt, behind [P] (the prompt's KV from the quantized model) / IntactKV[P]
//             (the prompt's KV in full precision), after the fp model behind [P]
// A row "without a prefix" is the quantized model reading [BOS] itself: prefix [BOS] with source
// quant (quant/sim.h PrefixSim), which is exactly the plain quantized model on [BOS] + window and
// scores the same targets as the prefixed rows. The KLD reference is one and the same for every
// row: the full-precision model behind a full-precision [BOS] (= the fp model on [BOS] + window);
// for the rows behind the IntactKV[P] prompt, the fp model behind the fp prompt.
// Every row also gives its mean per-window NLL difference to the fp row with the paired standard
// error over the windows (eval/ppl.h paired_nll_diff): a difference below ~2 s.e. is noise.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/quant_flags.h"
#include "core/mmap.h"
#include "calib/calib_data.h"
#include "eval/ppl.h"
#include "calib/prefix.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

namespace {

struct Row {
  std::string table, name;
  quant::Recipe cfg;
  // The prefix of the row: none = [BOS] computed by the quantized model itself (plain model).
  // Bos / Prompt: IntactKV[B] / [P], the [BOS] / --intactkv-prompt KV from the fp model; Found: the
  // --prefix tokens in fp; PromptQuant: the prompt's KV computed by the quantized model (the
  // baseline of IntactKV[P]).
  enum class Prefix { Inline, Bos, Found, Prompt, PromptQuant } prefix = Prefix::Inline;
  bool behind_prompt() const { return prefix == Prefix::Prompt || prefix == Prefix::PromptQuant; }
};

struct Bits {
  int w = 4, a = 4, kv = 4;
};

Bits parse_ladder_bits(const std::string& s) {
  if (s == "w4a4kv4") return {4, 4, 4};
  if (s == "w4a8kv4") return {4, 8, 4};
  if (s == "w8a8kv8") return {8, 8, 8};
  fail("unknown --bits '{}': expected w4a4kv4, w4a8kv4 or w8a8kv8", s);
}

void set_static(quant::Recipe& c, bool acts, bool kv) {
  if (acts) {
    c.a.mode = quant::ActMode::Static;
    c.a.clip_grid = true;
  }
  if (kv) {
    c.kv.mode = quant::KvMode::Static;
    c.kv.granularity = c.kv.bits == 8 ? quant::KvGranularity::Tensor : quant::KvGranularity::Head;
    c.kv.clip_grid = true;
  }
}

std::vector<Row> ladder_rows(const Bits& b, const std::vector<std::string>& tables, uint64_t seed, bool prompt) {
  auto want = [&](const char* t) { return std::find(tables.begin(), tables.end(), t) != tables.end(); };
  std::vector<Row> rows;
  quant::Recipe fp;
  rows.push_back({"fp", "full precision", fp, Row::Prefix::Inline});
  if (want("table6")) {
    quant::Recipe c;
    c.w.bits = b.w;
    c.a.bits = b.a;
    c.kv.bits = b.kv;
    rows.push_back({"table6", "RTN, dynamic per-token", c, Row::Prefix::Inline});
    c.rotate.on = true;
    c.rotate.seed = seed;
    rows.push_back({"table6", "+ rotation", c, Row::Prefix::Inline});
    c.w.clip_grid = true;
    rows.push_back({"table6", "+ grid search", c, Row::Prefix::Inline});
    set_static(c, true, true);
    rows.push_back({"table6", "+ static per-tensor", c, Row::Prefix::Inline});
    rows.push_back({"table6", "+ prefixed outliers", c, Row::Prefix::Found});
  }
  if (want("table2")) {
    for (int part = 0; part < 2; ++part) {
      quant::Recipe c;
      std::string what;
      if (part == 0) {
        c.a.bits = b.a;
        set_static(c, true, false);
        what = fmt::format("W16A{} static", b.a);
      } else {
        c.kv.bits = b.kv;
        set_static(c, false, true);
        what = fmt::format("W16A16KV{} static", b.kv);
      }
      rows.push_back({"table2", what + ": original", c, Row::Prefix::Inline});
      c.rotate.on = true;
      c.rotate.seed = seed;
      rows.push_back({"table2", what + ": + rotation", c, Row::Prefix::Inline});
      rows.push_back({"table2", what + ": + prefix", c, Row::Prefix::Found});
    }
  }
  if (want("intactkv")) {
    quant::Recipe c;
    c.w.bits = 3;
    c.w.group = 128;
    c.w.symmetric = false;  // IntactKV's weight-only RTN baseline is asymmetric g128 (AWQ / GPTQ convention)
    if (prompt) rows.push_back({"intactkv", "full precision behind [P]", quant::Recipe{}, Row::Prefix::Prompt});
    auto three = [&](const std::string& name, const quant::Recipe& cfg) {
      rows.push_back({"intactkv", name, cfg, Row::Prefix::Inline});
      rows.push_back({"intactkv", name + " + IntactKV[B]", cfg, Row::Prefix::Bos});
      if (!prompt) return;
      rows.push_back({"intactkv", name + " behind [P]", cfg, Row::Prefix::PromptQuant});
      rows.push_back({"intactkv", name + " + IntactKV[P]", cfg, Row::Prefix::Prompt});
    };
    three("W3 g128 RTN", c);
    quant::Recipe d;
    d.w.bits = 4;
    d.a.bits = 4;
    d.rotate.on = true;
    d.rotate.seed = seed;
    three("W4A4 + rotation", d);
    d.w.bits = b.w;
    d.a.bits = b.a;
    d.kv.bits = b.kv;
    three(fmt::format("W{}A{}KV{} + rotation", b.w, b.a, b.kv), d);
  }
  return rows;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

void register_ladder(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string file, calib, bits = "w4a4kv4", prefix = "auto", tables = "table6,table2,intactkv", prompt;
    int64_t ctx = 0, max_windows = 0, calib_samples = 8, calib_len = 0, calib_search_samples = 0;
    int calib_refine = 0;
    std::string calib_grid;
    uint64_t calib_seed = 0, rotate_seed = 0;
    double eta = 64.0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "ladder", "PrefixQuant Table 6 / Table 2 and IntactKV ablations: ppl and KLD per row, same targets");
  add_model_flag(*cmd, *o);
  cmd->add_option("-f,--file", o->file, "Text to score (e.g. WikiText-2 test)")->required();
  cmd->add_option("--calib", o->calib, "Calibration text (jsonl with \"text\", or plain text)")->required();
  cmd->add_option("--bits", o->bits, "Table 6 bit widths: w4a4kv4 | w4a8kv4 | w8a8kv8 (Table 2 uses its A and KV bits)")
      ->capture_default_str();
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx, "Window length (default: min(2048, max_position_embeddings - prefix length))")
      ->check(decimal_in(2, INT32_MAX));
  cmd->add_option("--max-windows", o->max_windows, "Score at most K windows (0 = all)")
      ->capture_default_str()
      ->check(decimal_in(0, INT32_MAX));
  cmd->add_option("--tables", o->tables, "Which tables, comma-separated: table6, table2, intactkv")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "The prefix of the '+ prefix' rows: auto (PrefixQuant §5.1) | bos | ids:.. | text:..")
      ->capture_default_str();
  cmd->add_option("--prefix-eta", o->eta, "--prefix auto: outlier threshold eta")->capture_default_str();
  cmd->add_option("--intactkv-prompt", o->prompt,
                  "The [P] of the IntactKV[P] rows, a --prefix spec (e.g. system:TEXT, the chat template's system "
                  "turn; text:..; ids:..); none: no [P] rows");
  cmd->add_option("--rotate-seed", o->rotate_seed, "Seed of the random Hadamard signs")->capture_default_str();
  cmd->add_option("--calib-samples", o->calib_samples, "Calibration samples N")->capture_default_str();
  cmd->add_option("--calib-len", o->calib_len, "Tokens per calibration sample incl. BOS (default min(512, max positions))");
  cmd->add_option("--calib-seed", o->calib_seed, "Calibration sampling seed")->capture_default_str();
  cmd->add_option("--calib-grid", o->calib_grid, "Clip ratios of every grid search, comma-separated in (0, 1] (default 1.0 ... 0.5)");
  cmd->add_option("--calib-search-samples", o->calib_search_samples,
                  "Static searches: score the candidates on the first N samples (default 0 = all)");
  cmd->add_option("--calib-refine", o->calib_refine, "Every grid search: N more ratios within +-0.05 of the best (default 0)");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    const Bits bits = parse_ladder_bits(o->bits);
    const std::vector<std::string> tables = split_list(o->tables);
    SINKQ_CHECK(!tables.empty(), "--tables is empty: expected table6, table2 and/or intactkv");
    for (const auto& t : tables)
      SINKQ_CHECK(t == "table6" || t == "table2" || t == "intactkv", "unknown --tables entry '{}': expected table6, table2 or intactkv", t);
    SINKQ_CHECK(o->max_windows >= 0, "--max-windows must be >= 0 (got {})", o->max_windows);
    SINKQ_CHECK(o->calib_samples >= 1, "--calib-samples must be >= 1, got {}", o->calib_samples);
    SINKQ_CHECK(o->calib_search_samples >= 0, "--calib-search-samples must be >= 0 (0 = all), got {}",
                o->calib_search_samples);
    SINKQ_CHECK(o->calib_refine >= 0 && o->calib_refine <= 64, "--calib-refine must be in 0..64, got {}", o->calib_refine);
    const std::vector<float> grid =
        o->calib_grid.empty() ? quant::default_clip_grid() : parse_number_list("--calib-grid", o->calib_grid, 0.0, 1.0, true);
    SINKQ_CHECK(o->eta > 0, "--prefix-eta must be > 0 (got {})", o->eta);
    const PrefixSpec pspec = parse_prefix_spec(o->prefix);
    std::optional<PrefixSpec> prompt_spec;
    if (!o->prompt.empty()) {
      prompt_spec = parse_prefix_spec(o->prompt);
      SINKQ_CHECK(prompt_spec->kind != PrefixSpec::Kind::Auto,
                  "--intactkv-prompt {}: the prompt is given, not found (system:TEXT, text:.., ids:.. or bos)", o->prompt);
    }
    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    SINKQ_CHECK(tok->bos_id() >= 0, "the ladder compares rows behind a [BOS] prefix, and this tokenizer has no BOS");
    const int64_t max_pos = model->config().max_position_embeddings;
    const int64_t len = o->calib_len > 0 ? o->calib_len : std::min<int64_t>(512, max_pos);
    SINKQ_CHECK(len >= 2 && len <= max_pos, "--calib-len must be 2..{} (max_position_embeddings), got {}", max_pos, len);
    CalibOptions co;
    co.samples = o->calib_samples;
    co.len = len;
    co.seed = o->calib_seed;
    const CalibSet calib = load_calib(o->calib, *tok, co);
    std::fprintf(stderr, "ladder: calibration %s: %zu samples x %lld tokens\n", o->calib.c_str(), calib.samples.size(),
                 (long long)len);

    // The prefix of the "+ prefix" rows, found / resolved once.
    std::vector<int32_t> found;
    nlohmann::json prefix_json{{"spec", o->prefix}};
    if (pspec.kind == PrefixSpec::Kind::Auto) {
      Forward ff(model, len);
      const FoundPrefix fp = find_prefix(ff, calib.samples, o->eta, tok->bos_id(), tok.get(),
                                         [](int64_t d, int64_t t) { progress("ladder: prefix auto, sample", d, t); });
      found = fp.tokens;
      prefix_json["found"] = fp.to_json(tok.get());
    } else {
      found = prefix_tokens(pspec, *tok, o->model);
    }
    SINKQ_CHECK(!found.empty(), "--prefix {} gives no tokens", o->prefix);
    std::vector<int32_t> prompt;
    if (prompt_spec) {
      prompt = prefix_tokens(*prompt_spec, *tok, o->model);
      SINKQ_CHECK(!prompt.empty(), "--intactkv-prompt {} gives no tokens", o->prompt);
      prefix_json["intactkv_prompt"] = {{"spec", o->prompt}, {"tokens", prompt}, {"text", tokens_text(prompt, *tok)}};
      std::fprintf(stderr, "ladder: IntactKV[P] %s: %zu tokens\n", o->prompt.c_str(), prompt.size());
    }
    prefix_json["tokens"] = found;
    prefix_json["text"] = tokens_text(found, *tok);
    std::fprintf(stderr, "ladder: prefix %s: %s\n", o->prefix.c_str(), tokens_text(found, *tok).c_str());
    const int64_t Pmax = std::max<int64_t>({1, int64_t(found.size()), int64_t(prompt.size())});
    const int64_t ctx = o->ctx > 0 ? o->ctx : std::min<int64_t>(2048, max_pos - Pmax);
    SINKQ_CHECK(ctx >= 2, "--ctx must be at least 2 (got {})", ctx);
    SINKQ_CHECK(ctx + Pmax <= max_pos,
                "--ctx {} plus the {}-token prefix exceeds the model's max_position_embeddings ({}): use --ctx {} or less",
                ctx, Pmax, max_pos, max_pos - Pmax);

    PplOptions po = ppl_options(*tok, ctx, PplProtocol::Prefix, o->max_windows);
    const std::vector<int32_t> toks = scoring_tokens(o->file, *tok, ppl_tokens_needed(po));

    // The one KLD reference: the fp model behind an fp [BOS].
    Forward ref(model, ctx);
    ref.set_prefix(KvPrefix::compute(model, {int32_t(tok->bos_id())}));
    // The rows behind [P] against the fp model behind the same [P].
    std::unique_ptr<Forward> ref_prompt;
    if (!prompt.empty()) {
      ref_prompt = std::make_unique<Forward>(model, ctx);
      ref_prompt->set_prefix(KvPrefix::compute(model, prompt));
    }

    const std::vector<Row> rows = ladder_rows(bits, tables, o->rotate_seed, !prompt.empty());
    nlohmann::json jrows = nlohmann::json::array();
    struct Printed {
      std::string table, name, desc;
      double ppl, kld;
      PairedDiff diff;
    };
    // The references of the NLL differences: rows[0] (fp behind [BOS]), and for the rows behind
    // [P] the fp model behind [P] (the prompt changes the text's context, in fp too).
    PplResult fp_result, fp_prompt_result;
    std::vector<Printed> printed;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      quant::Recipe cfg = row.cfg;
      cfg.calib.file = o->calib;
      cfg.calib.samples = o->calib_samples;
      cfg.calib.len = len;
      cfg.calib.seed = o->calib_seed;
      cfg.calib.grid = grid;
      cfg.calib.search_samples = o->calib_search_samples;
      cfg.calib.refine_steps = o->calib_refine;
      cfg.prefix.bos_id = tok->bos_id();
      if (row.prefix == Row::Prefix::Found || row.behind_prompt()) {
        cfg.prefix.spec = row.behind_prompt() ? o->prompt : o->prefix;
        cfg.prefix.tokens = row.behind_prompt() ? prompt : found;
        cfg.prefix.source = row.prefix == Row::Prefix::PromptQuant && cfg.any() ? quant::PrefixSim::Source::Quant
                                                                                 : quant::PrefixSim::Source::Fp;
      } else {
        cfg.prefix.spec = "bos";
        cfg.prefix.tokens = {int32_t(tok->bos_id())};
        cfg.prefix.source = row.prefix == Row::Prefix::Bos || !cfg.any() ? quant::PrefixSim::Source::Fp
                                                                         : quant::PrefixSim::Source::Quant;
      }
      // Samples cut to fit behind the prefix when the default length is used (as run_quant_pipeline).
      std::vector<std::vector<int32_t>> samples;
      if (cfg.needs_calibration()) {
        samples = calib.samples;
        const int64_t room = max_pos - int64_t(cfg.prefix.tokens.size()) + (cfg.prefix.strips_bos() ? 1 : 0);
        if (o->calib_len == 0)
          for (auto& s : samples)
            if (int64_t(s.size()) > room) s.resize(size_t(room));
      }
      std::fprintf(stderr, "ladder: [%zu/%zu] %s: %s\n", i + 1, rows.size(), row.name.c_str(), cfg.describe().c_str());
      const std::string stage_prefix = fmt::format("ladder: [{}/{}] ", i + 1, rows.size());
      const quant::SimModel sim = quant::build_sim(model, cfg, samples, [&](std::string_view stage, int64_t d, int64_t t) {
        progress(stage_prefix + std::string(stage), d, t);
      });
      Forward fwd(sim.model, ctx);
      sim.attach(fwd);
      po.progress = [&](int64_t d, int64_t t, double p) {
        progress(stage_prefix + "window", d, t, fmt::format("ppl {:.4f}", p));
      };
      const PplResult r = perplexity(fwd, toks, po, row.behind_prompt() ? ref_prompt.get() : &ref);
      const std::string desc = sim.describe();
      if (i == 0) fp_result = r;
      if (row.behind_prompt() && !cfg.any()) fp_prompt_result = r;
      const bool vs_prompt = row.behind_prompt() && !fp_prompt_result.window_nll.empty();
      const PairedDiff diff = paired_nll_diff(r, vs_prompt ? fp_prompt_result : fp_result);
      printed.push_back({row.table, row.name, cfg.describe(), r.ppl, r.kld, diff});
      jrows.push_back({{"table", row.table},
                       {"name", row.name},
                       {"ppl", r.ppl},
                       {"mean_nll", r.mean_nll},
                       {"kld", r.kld},
                       {"tokens_scored", r.tokens_scored},
                       {"windows", r.windows},
                       {"window_nll", r.window_nll},
                       {"delta_nll_vs_fp", diff.mean},
                       {"delta_nll_se", diff.se},
                       {"delta_reference", vs_prompt ? "full precision behind [P]" : "full precision"},
                       {"describe", desc},
                       {"config", sim.to_json()}});
    }
    if (o->json) {
      print_json({{"model", o->model},
                  {"file", o->file},
                  {"bits", o->bits},
                  {"ctx", ctx},
                  {"protocol", "prefix"},
                  {"kld_reference", "full-precision model behind a full-precision [BOS]"},
                  {"prefix", prefix_json},
                  {"calibration", {{"file", calib.file}, {"samples", calib.samples.size()}, {"len", len}, {"seed", o->calib_seed}}},
                  {"rows", jrows}});
      return;
    }
    fmt::print("model {}  text {}  ctx {}  protocol prefix (same targets in every row)  windows {}\n", o->model, o->file,
               ctx, jrows.empty() ? 0 : jrows[0]["windows"].get<int64_t>());
    fmt::print("prefix {}: {}  (KLD vs the fp model behind an fp [BOS])\n", o->prefix, tokens_text(found, *tok));
    std::string last;
    for (const Printed& p : printed) {
      if (p.table != last) {
        const char* title = p.table == "fp"       ? "reference"
                            : p.table == "table6" ? "PrefixQuant Table 6 ladder"
                            : p.table == "table2" ? "PrefixQuant Table 2 analogue"
                                                  : "IntactKV (Table 1 / 6 analogues)";
        fmt::print("\n{} ({})\n{:<44} {:>10} {:>10} {:>20}  config\n", title, o->bits, "row", "ppl", "KLD",
                   "dNLL vs fp +- s.e.");
        last = p.table;
      }
      fmt::print("{:<44} {:>10.4f} {:>10.5f} {:>+11.4f} +- {:<6.4f}  {}\n", p.name, p.ppl, p.kld, p.diff.mean,
                 p.diff.se, p.desc);
    }
  });
}

}  // namespace sinkq::cli
