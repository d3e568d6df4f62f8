// sinkq/eval/chat_proxy.h — a chat-quality proxy for IntactKV[P] (IntactKV §5.3 judges chat models
// with GPT-4; no judge here): how far the quantized model's next-token distributions are from the
// full-precision model's over the responses of chat conversations — mean KL(p_fp ‖ p_quant) and
// top-1 agreement at every response token — run once with the system prompt inside each sequence
// (its KV quantized like the rest) and once behind `--prefix system:TEXT` (its KV from the fp
// model: IntactKV[P]). Both score the same tokens at the same positions.
//
// The set: conversation i is built from document i of a text file (C4 jsonl: one document per
// line), counted from the end of the file so that the first documents stay the calibration
// text's: system = `system`, user = "Continue the following text.\n\n" + the document's first
// `user_words` words, assistant = the following words, its first `response_tokens` tokens scored.
// Rendered by the model's own chat template (calib/prefix.h render_chat) with the system part
// tokenized on its own (so it equals the tokens of --prefix system:TEXT) and the response tokenized
// raw after the assistant header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace sinkq {

class Tokenizer;

struct ChatProxyOptions {
  std::string data;  // a text / jsonl file (calib/calib_data.h read_documents)
  int conversations = 16;
  std::string system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
  int64_t user_words = 48, response_tokens = 128;
};

struct ChatSample {
  std::vector<int32_t> tokens;   // system part + user turn + assistant header + response
  int64_t system_tokens = 0;     // the system part's
  int64_t response_begin = 0;    // index of the first response token
};
// Errors: no chat template the renderer knows, or fewer long-enough documents than asked (naming
// the file and how many there are).
std::vector<ChatSample> chat_samples(const Tokenizer& tok, const ChatProxyOptions& opt);

struct ChatProxyResult {
  int conversations = 0;
  int64_t tokens = 0;            // response tokens scored
  double kld = 0, top1 = 0;      // means over every scored token
  std::vector<double> conversation_kld;
  int64_t prefix_tokens_taken = 0;  // leading tokens of each sample the forward's prefix holds
  double seconds = 0;
  nlohmann::json to_json() const;
};
// Scores `samples` on `fwd` against `ref` (the fp model behind the same prefix tokens, e.g.
// Engine::reference()). When the samples start with `prefix` (the tokens fwd's KV prefix holds),
// those tokens are taken off each sequence: the prefix stands for them at the same positions.
ChatProxyResult run_chat_proxy(Forward& fwd, Forward& ref, const std::vector<int32_t>& prefix,
                               const std::vector<ChatSample>& samples,
                               const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sinkq
