// sinkq generate -m DIR -p STR -n N [--temp T] [--top-k K] [--top-p P] [--seed S] [--json]
//                [--chat [--system TEXT]] [--prefix SPEC [--prefix-source fp|quant]] + the quantization
//                flags (cli/quant_flags.h)
// --chat: -p is a user message, rendered with the model's own chat template (calib/prefix.h
// render_chat) behind the --system message if given; generation stops at the template's end of turn.
// With a prefix, the prefix KV sits in front of the prompt (positions continue after it); when the
// prefix holds [BOS] the prompt is encoded without BOS (a second [BOS] would be a new sink).
// -m may be a sinkq artifact: it runs on the packed runtime with its stored prefix.
#include <fmt/format.h>

#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/quant_flags.h"
#include "sinkq/engine.h"
#include "eval/generate.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_generate(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string prompt;
    int64_t n = 64;
    SamplerOptions s;
    bool stop_on_bos = false;
    int64_t ctx = 0;
    bool chat = false;
    std::string system;
  };
  auto o = std::make_shared<Opts>();
  o->s.temperature = 0.8f;
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  add_model_flag(*cmd, *o);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (BOS is added as the tokenizer config says)")->required();
  cmd->add_option("-n,--n-predict", o->n, "Maximum number of new tokens")->capture_default_str()->check(decimal_in(0, INT32_MAX));
  cmd->add_option("--temp", o->s.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->s.top_k, "Keep the K most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->s.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("-s,--seed", o->s.seed, "Random seed")->capture_default_str()->check(decimal_u64());
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx, "KV cache size in tokens (default: prompt + n)")->check(decimal_in(1, INT32_MAX));
  cmd->add_flag("--chat", o->chat,
                "-p is a user message: render it with the model's own chat template and stop at its end of turn");
  cmd->add_option("--system", o->system, "With --chat: a system message before the user's");
  cmd->add_flag("--stop-on-bos", o->stop_on_bos,
                "Also stop when the model predicts BOS (llama2.c-trained models such as stories260K end stories that way)");
  const std::shared_ptr<QuantFlags> qf = add_quant_flags(*cmd);
  add_output_flags(*cmd, *o);
  cmd->callback([o, qf] {
    apply_threads(*o);
    if (qf->dump_if_asked()) return;
    validate(o->s);
    SINKQ_CHECK(o->n >= 0, "-n must be >= 0 (got {})", o->n);
    // -m: a model directory / GGUF file (simulated quantization from the flags) or a sinkq
    // artifact (the packed runtime with its stored prefix; quantization flags do not apply to it).
    OpenOptions oo;
    if (!qf->model_is_artifact(o->model, "generate")) oo.recipe = qf->config();  // bad flags fail fast
    oo.pipeline = pipeline_options(*qf, "generate");
    const std::shared_ptr<const Engine> engine = Engine::open(o->model, oo);
    const Tokenizer& tok = engine->tokenizer();
    const int64_t P = engine->prefix_size();
    const std::string prefix_name =
        engine->runtime() == Engine::Runtime::Packed ? "of the artifact" : "--prefix " + engine->recipe().prefix.spec;
    require_utf8(o->prompt, "the prompt (-p)");
    SINKQ_CHECK(o->chat || o->system.empty(), "--system needs --chat (a system message is part of a chat)");
    std::vector<ChatMessage> messages;
    if (!o->system.empty()) messages.push_back({"system", o->system});
    messages.push_back({"user", o->prompt});
    const std::vector<int32_t> prompt = o->chat ? engine->encode_chat(messages) : engine->encode_prompt(o->prompt);
    SINKQ_CHECK(!prompt.empty(), "the prompt (-p) is empty{}: nothing to condition on",
                P ? " (behind a [BOS] prefix it gets no BOS of its own)" : " and the tokenizer adds no BOS");
    const int64_t need = int64_t(prompt.size()) + o->n;
    const int64_t max_pos = engine->config().max_position_embeddings;
    if (P > 0)
      SINKQ_CHECK(P + need <= max_pos, "the {}-token prefix ({}) + prompt ({} tokens) + -n {} = {} exceeds the model's {} positions",
                  P, prefix_name, prompt.size(), o->n, P + need, max_pos);
    else
      SINKQ_CHECK(need <= max_pos, "prompt ({} tokens) + -n {} = {} exceeds the model's {} positions",
                  prompt.size(), o->n, need, max_pos);
    const int64_t ctx = o->ctx > 0 ? o->ctx : need;
    SINKQ_CHECK(ctx >= need, "--ctx {} is smaller than prompt + -n = {}", ctx, need);
    if (P > 0)
      SINKQ_CHECK(ctx + P <= max_pos, "--ctx {} plus the {}-token prefix ({}) exceeds the model's {} positions: use --ctx {} or less",
                  ctx, P, prefix_name, max_pos, max_pos - P);
    else  // (was "plus the 0-token prefix (--prefix )" when no prefix was given)
      SINKQ_CHECK(ctx <= max_pos, "--ctx {} exceeds the model's {} positions", ctx, max_pos);
    const std::unique_ptr<Session> session = engine->new_session(ctx);
    GenerateOptions go;
    go.max_new_tokens = o->n;
    go.sampler = o->s;
    go.stop_ids = engine->stop_ids();
    if (o->stop_on_bos && tok.bos_id() >= 0) go.stop_ids.push_back(tok.bos_id());
    if (o->chat && engine->end_of_turn_id() >= 0) go.stop_ids.push_back(engine->end_of_turn_id());

    StreamDecoder stream(tok);
    stream.prime(prompt);  // "Once" + " upon", not "Onceupon"
    if (!o->json && !o->chat) {  // a chat prints the reply alone
      fmt::print("{}", o->prompt);
      std::fflush(stdout);
    }
    const GenerateResult r = session->generate(prompt, go, [&](int32_t id, const TokenLogprob*) {
      if (o->json) return true;
      const std::string piece = stream.push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    const double dec_tps = r.generated.size() > 1 ? double(r.generated.size() - 1) / r.decode_seconds : 0.0;
    const double pre_tps = r.prefill_seconds > 0 ? double(prompt.size()) / r.prefill_seconds : 0.0;  // -n 0: no prefill
    if (o->json) {
      print_json({{"prompt_ids", prompt},
                  {"prefix", engine->prefix_json()},
                  {"runtime", engine->runtime_name()},
                  {"config", engine->config_json()},
                  {"generated_ids", r.generated},
                  {"text", tok.decode(r.generated)},
                  {"stopped", r.stopped},
                  {"prefill_tokens_per_s", pre_tps},
                  {"decode_tokens_per_s", dec_tps}});
      return;
    }
    const std::string tail = stream.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "[%zu prompt tokens, %zu generated%s; prefill %.1f tok/s, decode %.1f tok/s]\n",
                 prompt.size(), r.generated.size(), r.stopped ? (o->chat ? ", stopped at the end of the turn" : ", stopped at EOS") : "",
                 pre_tps, dec_tps);
  });
}

}  // namespace sinkq::cli
