// sinkq eval -m DIR|ARTIFACT|GGUF --tasks piqa,arc_easy,...|all [--limit N] [--data DIR] [--ctx C]
//            [--samples] [--ppl NAME=FILE,..] [--ppl-ctx N] [--ppl-windows K] [--kld]
//            [--passkey L,..] [--passkey-depths D,..] [--passkey-trials N] [--passkey-seed S]
//            [--chat N] [--chat-data FILE] [--chat-system TEXT] [--json] [--out DIR]
//            + the quantization / rotation / calibration / prefix flags of cli/quant_flags.h
// Zero-shot multiple-choice accuracy as lm-evaluation-harness v0.4 computes it (eval/tasks.h;
// prompts and conventions in docs/eval.md), on the simulated model of the flags or on an
// artifact's packed runtime: every row of docs/results.md runs through here. The engine's KV
// prefix (PrefixQuant, IntactKV) sits in front of every request. --ppl adds perplexities of text
// files (as `sinkq ppl` computes them: the gptq protocol, or prefix behind a KV prefix) and --kld
// their KL divergence to the full-precision model, so one calibration serves a whole table row.
// --passkey runs passkey retrieval (eval/passkey.h) at those prompt lengths and depths; --chat the
// chat-quality proxy of IntactKV[P] (eval/chat_proxy.h: KLD and top-1 agreement with the fp model
// over chat responses; behind --prefix system:TEXT for the intact system-prompt KV).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/quant_flags.h"
#include "eval/analyze.h"
#include "eval/chat_proxy.h"
#include "eval/passkey.h"
#include "eval/svg.h"
#include "eval/tasks.h"
#include "sinkq/engine.h"

namespace sinkq::cli {

namespace {

std::string fmt_stderr(double x) { return std::isfinite(x) ? fmt::format("{:.4f}", x) : "n/a"; }

nlohmann::json nan_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

nlohmann::json task_json(const McTaskResult& r, bool items) {
  nlohmann::json j{{"task", r.info.name},       {"display", r.info.display},
                   {"n", r.n},                  {"acc", nan_null(r.acc)},
                   {"acc_stderr", nan_null(r.acc_stderr)},
                   {"seconds", r.seconds},      {"tokens", r.tokens}};
  if (r.info.acc_norm) {
    j["acc_norm"] = nan_null(r.acc_norm);
    j["acc_norm_stderr"] = nan_null(r.acc_norm_stderr);
  }
  if (items) {
    nlohmann::json a = nlohmann::json::array();
    for (const McItemResult& it : r.items)
      a.push_back({{"index", it.index}, {"gold", it.gold}, {"pred", it.pred}, {"pred_norm", it.pred_norm},
                   {"ll", it.ll}, {"greedy", it.greedy}, {"chars", it.chars}, {"tokens", it.tokens}});
    j["items"] = std::move(a);
  }
  return j;
}

// The table every output shows: one row per task, then the unweighted average of acc.
std::string markdown_table(const std::vector<McTaskResult>& rs, double avg) {
  std::string s = "| task | n | acc | ± | acc_norm | ± | s |\n|---|---:|---:|---:|---:|---:|---:|\n";
  for (const McTaskResult& r : rs)
    s += fmt::format("| {} | {} | {:.4f} | {} | {} | {} | {:.1f} |\n", r.info.display, r.n, r.acc,
                     fmt_stderr(r.acc_stderr), r.info.acc_norm ? fmt::format("{:.4f}", r.acc_norm) : "",
                     r.info.acc_norm ? fmt_stderr(r.acc_norm_stderr) : "", r.seconds);
  s += fmt::format("| average (acc) | | {:.4f} | | | | |\n", avg);
  return s;
}

}  // namespace

void register_eval(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string tasks, data = "../shared/data/commonsense", out;
    int64_t limit = 0, ctx = 0;
    bool samples = false, kld = false;
    std::vector<std::string> ppl;
    int64_t ppl_ctx = 512, ppl_windows = 16;
    std::vector<std::string> passkey;
    std::vector<std::string> passkey_depths = {"0", "0.25", "0.5", "0.75", "1"};
    int passkey_trials = 3;
    uint64_t passkey_seed = 0;
    ChatProxyOptions chat{.data = "../shared/data/c4/c4_train_00000_first1000.jsonl", .conversations = 0};
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Evaluation suite: zero-shot PIQA / ARC / WinoGrande / BoolQ / OBQA / SIQA as lm-eval-harness scores them, "
              "perplexity + KLD, passkey retrieval, the IntactKV[P] chat proxy");
  add_model_flag(*cmd, *o);
  cmd->add_option("--tasks", o->tasks,
                  "Comma-separated: piqa, arc_easy, arc_challenge, winogrande, boolq, openbookqa, social_iqa, or all");
  cmd->add_option("--limit", o->limit, "The first N items of each task (0 = all)")
      ->capture_default_str()
      ->check(decimal_in(0, INT32_MAX));
  cmd->add_option("--data", o->data, "The commonsense data directory (LLM-Adapters layout: <task>/test.json)")
      ->capture_default_str();
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx, "Positions of the session (default: min(2048, what the model leaves after its prefix))")
      ->check(decimal_in(2, INT32_MAX));
  cmd->add_flag("--samples", o->samples, "With --json: every item's log-likelihoods, prediction and gold");
  cmd->add_option("--ppl", o->ppl, "Also perplexity of text files, NAME=FILE (comma-separated or repeated)")
      ->delimiter(',');
  cmd->add_option("--ppl-ctx", o->ppl_ctx, "Window length of --ppl")->capture_default_str()->check(decimal_in(2, INT32_MAX));
  cmd->add_option("--ppl-windows", o->ppl_windows, "Windows of --ppl (0 = all)")
      ->capture_default_str()
      ->check(decimal_in(0, INT32_MAX));
  cmd->add_flag("--kld", o->kld, "With --ppl: KL(p_fp || p) on the same windows (runs the fp model too)");
  cmd->add_option("--passkey", o->passkey, "Passkey retrieval at these prompt lengths in tokens (comma-separated)")
      ->delimiter(',');
  cmd->add_option("--passkey-depths", o->passkey_depths, "Depths of the key in the filler, each in [0, 1]")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--passkey-trials", o->passkey_trials, "Keys per (length, depth)")
      ->capture_default_str()
      ->check(decimal_in(1, 1000000));
  cmd->add_option("--passkey-seed", o->passkey_seed, "Seed of the keys")->capture_default_str()->check(decimal_u64());
  cmd->add_option("--chat", o->chat.conversations,
                  "Chat-quality proxy over N conversations: KLD and top-1 agreement with the fp model on the responses")
      ->check(decimal_in(1, 100000));
  cmd->add_option("--chat-data", o->chat.data, "Documents the conversations are built from (jsonl with \"text\", or text)")
      ->capture_default_str();
  cmd->add_option("--chat-system", o->chat.system, "The conversations' system prompt (give the same to --prefix system:)")
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Also write results.json (with every item), results.csv, results.md, acc.svg and passkey.svg into "
                  "this new (or empty) directory, atomically");
  const std::shared_ptr<QuantFlags> qf = add_quant_flags(*cmd);
  add_output_flags(*cmd, *o);
  cmd->callback([o, qf] {
    apply_threads(*o);
    if (qf->dump_if_asked()) return;
    const std::vector<McTaskInfo> tasks = o->tasks.empty() ? std::vector<McTaskInfo>{} : parse_mc_tasks(o->tasks);
    SINKQ_CHECK(!tasks.empty() || !o->ppl.empty() || !o->passkey.empty() || o->chat.conversations > 0,
                "nothing to evaluate: give --tasks, --ppl, --passkey and/or --chat");
    PasskeyOptions pk;
    for (const std::string& l : o->passkey) pk.lengths.push_back(parse_decimal(l, 1, INT32_MAX, "--passkey"));
    for (const std::string& d : o->passkey_depths) {
      char* end = nullptr;
      const double v = std::strtod(d.c_str(), &end);
      SINKQ_CHECK(!d.empty() && end == d.c_str() + d.size() && v >= 0 && v <= 1,
                  "--passkey-depths: '{}' is not a number in [0, 1]", d);
      pk.depths.push_back(v);
    }
    pk.trials = o->passkey_trials;
    pk.seed = o->passkey_seed;
    SINKQ_CHECK(!o->kld || !o->ppl.empty(), "--kld needs --ppl (the KL divergence is taken over its windows)");
    std::vector<std::pair<std::string, std::string>> ppl_files;
    for (const std::string& a : o->ppl) {
      const size_t eq = a.find('=');
      SINKQ_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < a.size(), "--ppl '{}': expected NAME=FILE", a);
      ppl_files.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    }
    if (!o->out.empty()) {
      try {
        check_output_dir(o->out);
      } catch (const Error& e) {
        throw Error(fmt::format("--out: {}", e.what()));
      }
    }
    SINKQ_CHECK(tasks.empty() || std::filesystem::is_directory(o->data),
                "--data '{}' is not a directory (the commonsense data: <task>/test.json, e.g. ../shared/data/commonsense)",
                o->data);
    // Every task file read and parsed before anything slow (calibration).
    std::vector<std::vector<McItem>> items;
    for (const McTaskInfo& t : tasks) items.push_back(load_mc_task(t, o->data, o->limit));

    OpenOptions oo;
    if (!qf->model_is_artifact(o->model, "eval")) oo.recipe = qf->config();
    oo.pipeline = pipeline_options(*qf, "eval");
    // The texts of --ppl tokenized and checked before the (possibly slow) calibration.
    const Engine::Preview pv = Engine::preview(o->model, oo);
    const PplProtocol protocol = pv.has_prefix ? PplProtocol::Prefix : PplProtocol::Gptq;
    std::vector<std::vector<int32_t>> ppl_tokens;
    for (const auto& [name, file] : ppl_files) {
      try {
        ppl_tokens.push_back(scoring_tokens(file, *pv.tokenizer, o->ppl_windows * o->ppl_ctx));
        check_ppl_text(ppl_tokens.back(), ppl_options(*pv.tokenizer, o->ppl_ctx, protocol, o->ppl_windows));
      } catch (const Error& e) {
        throw Error(fmt::format("--ppl {}: {}", name, e.what()));
      }
    }
    std::vector<ChatSample> chat;
    if (o->chat.conversations > 0) {
      try {
        chat = chat_samples(*pv.tokenizer, o->chat);
      } catch (const Error& e) {
        throw Error(fmt::format("--chat: {}", e.what()));
      }
    }
    oo.tokenizer = pv.tokenizer;
    const std::shared_ptr<const Engine> engine = Engine::open(o->model, oo);
    // Every session's length checked against what the model leaves after its prefix, one message.
    auto check_fits = [&](int64_t n, const std::string& what) {
      SINKQ_CHECK(n <= engine->max_context(), "{} does not fit: the model leaves {} positions{}", what,
                  engine->max_context(),
                  engine->prefix_size() ? fmt::format(" after its {}-token prefix", engine->prefix_size()) : "");
    };
    const int64_t ctx = o->ctx > 0 ? o->ctx : std::min<int64_t>(2048, engine->max_context());
    check_fits(ctx, fmt::format("--ctx {}", ctx));
    const std::unique_ptr<Session> session = engine->new_session(ctx);
    // The tokenizer's own BOS, as lm-eval's HFLM encodes (since v0.4.9.2), unless the engine's
    // prefix already holds it (the rule of Engine::encode_prompt).
    const bool add_bos = engine->tokenizer().add_bos() && !engine->prefix_has_bos();

    std::vector<McTaskResult> results;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string what = fmt::format("eval: {}", tasks[i].name);
      results.push_back(run_mc_task(session->forward(), engine->tokenizer(), add_bos, tasks[i], items[i],
                                    [&](int64_t done, int64_t total) { progress(what, done, total); }));
      const McTaskResult& r = results.back();
      std::fprintf(stderr, "eval: %s acc %.4f ± %s%s (%lld items, %.1f s)\n", r.info.name, r.acc,
                   fmt_stderr(r.acc_stderr).c_str(),
                   r.info.acc_norm ? fmt::format(", acc_norm {:.4f}", r.acc_norm).c_str() : "", (long long)r.n,
                   r.seconds);
    }
    double avg = 0, seconds = 0;
    for (const McTaskResult& r : results) avg += r.acc / double(results.size()), seconds += r.seconds;

    nlohmann::json passkey_json;
    std::string passkey_md;
    svg::Heatmap passkey_map;
    if (!pk.lengths.empty()) {
      int64_t longest = 0;
      for (int64_t L : pk.lengths) longest = std::max(longest, L);
      check_fits(longest + 8, fmt::format("--passkey {} + 8 answer tokens", longest));
      pk.add_bos = add_bos;
      pk.stop_ids = engine->stop_ids();
      const std::unique_ptr<Session> ks = engine->new_session(longest + 8);
      const PasskeyResult r = run_passkey(ks->forward(), engine->tokenizer(), pk,
                                          [](int64_t done, int64_t total) { progress("eval: passkey", done, total); });
      seconds += r.seconds;
      passkey_json = r.to_json();
      passkey_md = "\n| passkey: tokens \\ depth |";
      std::string rule = "\n|---:|";
      passkey_map.title = fmt::format("passkey retrieval: {}", engine->describe());
      passkey_map.x_label = "depth of the key";
      passkey_map.y_label = "prompt tokens";
      for (double d : pk.depths) {
        passkey_md += fmt::format(" {:g} |", d);
        rule += "---:|";
        passkey_map.cols.push_back(fmt::format("{:g}", d));
      }
      passkey_md += rule + "\n";
      for (size_t li = 0; li < pk.lengths.size(); ++li) {
        passkey_md += fmt::format("| {} |", pk.lengths[li]);
        passkey_map.rows.push_back(std::to_string(pk.lengths[li]));
        passkey_map.values.emplace_back();
        for (size_t di = 0; di < pk.depths.size(); ++di) {
          const PasskeyCell& c = r.cells[li * pk.depths.size() + di];
          passkey_md += fmt::format(" {}/{} |", c.correct, c.trials);
          passkey_map.values.back().push_back(double(c.correct) / double(c.trials));
        }
        passkey_md += "\n";
      }
      std::fprintf(stderr, "eval: passkey accuracy %.3f (%.1f s)\n", r.accuracy, r.seconds);
    }

    nlohmann::json chat_json;
    std::string chat_md;
    if (!chat.empty()) {
      int64_t longest = 0;
      for (const ChatSample& c : chat) longest = std::max<int64_t>(longest, int64_t(c.tokens.size()));
      SINKQ_CHECK(longest <= engine->max_context(), "--chat: a conversation of {} tokens does not fit the {} positions left",
                  longest, engine->max_context());
      const std::unique_ptr<Session> cs = engine->new_session(longest);
      const std::unique_ptr<Session> cref = engine->reference()->new_session(longest);
      const ChatProxyResult r =
          run_chat_proxy(cs->forward(), cref->forward(), engine->prefix_tokens(), chat,
                         [](int64_t done, int64_t total) { progress("eval: chat", done, total); });
      seconds += r.seconds;
      chat_json = r.to_json();
      chat_json["system"] = o->chat.system;
      chat_json["data"] = o->chat.data;
      chat_md = fmt::format(
          "\n| chat proxy: conversations | response tokens | system-prompt KV | KLD vs fp | top-1 agreement |\n"
          "|---:|---:|---|---:|---:|\n| {} | {} | {} | {:.5f} | {:.4f} |\n",
          r.conversations, r.tokens,
          r.prefix_tokens_taken == 0 ? std::string("quantized (in the sequence)")
                                     : fmt::format("first {} tokens from the fp prefix", r.prefix_tokens_taken),
          r.kld, r.top1);
      std::fprintf(stderr, "eval: chat proxy KLD %.5f, top-1 %.4f (%.1f s)\n", r.kld, r.top1, r.seconds);
    }

    nlohmann::json ppl_json = nlohmann::json::array();
    std::string ppl_md;
    if (!ppl_files.empty()) {
      check_fits(o->ppl_ctx, fmt::format("--ppl-ctx {}", o->ppl_ctx));
      const std::unique_ptr<Session> ps = engine->new_session(o->ppl_ctx);
      std::unique_ptr<Session> ref = o->kld ? engine->reference()->new_session(o->ppl_ctx) : nullptr;
      ppl_md = "\n| text | protocol | ctx | windows | tokens scored | ppl | KLD | s |\n|---|---|---:|---:|---:|---:|---:|---:|\n";
      for (size_t i = 0; i < ppl_files.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        PplOptions po = ppl_options(engine->tokenizer(), o->ppl_ctx, protocol, o->ppl_windows);
        const std::string what = fmt::format("eval: ppl {}", ppl_files[i].first);
        po.progress = [&](int64_t done, int64_t total, double ppl) {
          progress(what, done, total, fmt::format("ppl {:.4f}", ppl));
        };
        const PplResult r = ps->perplexity(ppl_tokens[i], po, ref.get());
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        seconds += sec;
        nlohmann::json j{{"name", ppl_files[i].first}, {"file", ppl_files[i].second},
                         {"protocol", ppl_protocol_name(protocol)}, {"ctx", o->ppl_ctx},
                         {"windows", r.windows}, {"tokens_scored", r.tokens_scored},
                         {"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"window_nll", r.window_nll}, {"seconds", sec}};
        if (r.has_kld) j["kld"] = r.kld, j["window_kld"] = r.window_kld;
        ppl_json.push_back(j);
        ppl_md += fmt::format("| {} | {} | {} | {} | {} | {:.4f} | {} | {:.1f} |\n", ppl_files[i].first,
                              ppl_protocol_name(protocol), o->ppl_ctx, r.windows, r.tokens_scored, r.ppl,
                              r.has_kld ? fmt::format("{:.5f}", r.kld) : "", sec);
        std::fprintf(stderr, "eval: ppl %s %.4f%s (%.1f s)\n", ppl_files[i].first.c_str(), r.ppl,
                     r.has_kld ? fmt::format(", KLD {:.5f}", r.kld).c_str() : "", sec);
      }
    }

    auto summary = [&](bool with_items) {
      nlohmann::json tj = nlohmann::json::array();
      for (const McTaskResult& r : results) tj.push_back(task_json(r, with_items));
      return nlohmann::json{{"model", o->model},
                            {"runtime", engine->runtime_name()},
                            {"describe", engine->describe()},
                            {"prefix", engine->prefix_json()},
                            {"limit", o->limit},
                            {"data", o->data},
                            {"tasks", tj},
                            {"average_acc", results.empty() ? nlohmann::json(nullptr) : nlohmann::json(avg)},
                            {"ppl", ppl_json},
                            {"passkey", passkey_json},
                            {"chat", chat_json},
                            {"seconds", seconds},
                            {"config", engine->config_json()}};
    };
    if (!o->out.empty()) {
      std::string csv = "task,n,acc,acc_stderr,acc_norm,acc_norm_stderr,seconds,tokens\n";
      svg::BarChart chart;
      chart.title = fmt::format("zero-shot accuracy: {}", engine->describe());
      chart.x_label = "task";
      chart.y_label = "accuracy";
      chart.series = {{"acc", {}}, {"acc_norm", {}}};
      for (const McTaskResult& r : results) {
        csv += fmt::format("{},{},{},{},{},{},{:.3f},{}\n", r.info.name, r.n, r.acc, r.acc_stderr,
                           r.info.acc_norm ? fmt::format("{}", r.acc_norm) : "",
                           r.info.acc_norm ? fmt::format("{}", r.acc_norm_stderr) : "", r.seconds, r.tokens);
        chart.groups.push_back(r.info.display);
        chart.series[0].values.push_back(r.acc);
        chart.series[1].values.push_back(r.info.acc_norm ? r.acc_norm : std::nan(""));
      }
      const std::string md = fmt::format("# sinkq eval: {}\n\n{} ({} runtime)\n\n{}{}", o->model, engine->describe(),
                                         engine->runtime_name(), results.empty() ? "" : markdown_table(results, avg),
                                         ppl_md + passkey_md + chat_md);
      std::vector<std::pair<std::string, std::string>> files;
      if (!pk.lengths.empty()) files.emplace_back("passkey.svg", svg::render(passkey_map));
      if (!results.empty()) files.emplace_back("acc.svg", svg::render(chart));
      try {
        files.insert(files.begin(), {{"results.json", summary(true).dump(2, ' ', false,
                                                                      nlohmann::json::error_handler_t::replace) + "\n"},
                                  {"results.csv", csv},
                                  {"results.md", md}});
        write_output_dir(o->out, files);
      } catch (const Error& e) {
        throw Error(fmt::format("--out: {}", e.what()));
      }
      std::fprintf(stderr, "eval: wrote %s (results.json, results.csv, results.md and the plots)\n", o->out.c_str());
    }
    if (o->json) {
      print_json(summary(o->samples));
      return;
    }
    fmt::print("{} ({} runtime){}\n", engine->describe(), engine->runtime_name(),
               engine->prefix_size() ? fmt::format(", {}-token KV prefix", engine->prefix_size()) : "");
    if (!results.empty()) fmt::print("{}", markdown_table(results, avg));
    fmt::print("{}{}{}", ppl_md, passkey_md, chat_md);
    std::fflush(stdout);
  });
}

}  // namespace sinkq::cli
