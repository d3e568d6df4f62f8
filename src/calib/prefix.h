// sinkq/calib/prefix.h — which tokens go into the full-precision KV prefix (model/kv_prefix.h).
//
// --prefix values (parse_prefix_spec):
//   bos            [BOS] alone: IntactKV[B]
//   auto           PrefixQuant §5.1 on calibration samples (find_prefix below)
//   ids:1,29889    explicit token ids
//   system:TEXT    a system prompt rendered through the model's chat template: IntactKV[P]
//   text:TEXT      literal text, tokenized with the tokenizer's own BOS in front (when it adds one)
//   anything else  the same as text:
//
// PrefixQuant §5.1, as implemented (find_prefix); decisions where the paper is open:
//   * Outlier token (eq. 3): at down_in of each layer, token-wise max / median of the sequence's
//     token-wise maxima > η (default 64) — or the same at the residual stream (the block output),
//     where a sink that the norms flatten at every linear input still shows (calib/outliers.h
//     kOutlierSites says why). Counted once per layer, per sequence (eval/analyze.h).
//   * o = ⌈max over layers of the mean outlier count per sequence⌉. The count includes the initial
//     token when it is an outlier, so o is the total prefix length: Table 1 lists Llama-2-7B as
//     3 tokens ".", "\n", [BOS] and Llama-3-8B as 1 ([BOS], its outliers sit only at the initial
//     token), which is o = 3 and o = 1 with the initial token counted.
//   * Content: the (o − 1) token ids with the most outlier hits at non-initial positions (the
//     paper's footnote: frequencies ignore the initial token), most frequent first, then [BOS]
//     last (Table 1 and Fig. 4c write the prefix as ".\n[BOS]"). Only [BOS] when every outlier
//     sits at the initial token, or o ≤ 1.
//   * No outlier at all (o = 0): the prefix is [BOS] anyway — the initial token is where a sink
//     forms in every model the paper studies, and a [BOS] prefix costs one KV row; the report says
//     that no outlier was found.
//   * A model without BOS: the (o) most frequent non-initial outlier tokens, without [BOS]; if
//     there are none, the most frequent outlier token at the initial position (any token there is
//     a sink). Nothing found at all → sinkq::Error: there is nothing to prefix.
//   * Calibration samples start with [BOS] (calib/calib_data.h), as inference does. With the prefix
//     in place, the body must not start with a second [BOS]: it would become an outlier token again
//     (a new initial-like sink inside the body). The prefix protocol (eval/ppl.h) feeds text
//     without BOS, and generate() encodes the prompt without BOS when the prefix has one.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "calib/outliers.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

struct PrefixSpec {
  enum class Kind { Bos, Auto, Ids, System, Text };
  Kind kind = Kind::Bos;
  std::string text;           // System / Text
  std::vector<int32_t> ids;   // Ids
  std::string spec;           // the value as given
};
// Throws sinkq::Error naming --prefix for an empty value, or bad ids.
PrefixSpec parse_prefix_spec(std::string_view value);

// The tokens of a non-Auto spec. ids are checked against the vocabulary; system: needs a chat
// template with a system role that render_system_prompt knows.
std::vector<int32_t> prefix_tokens(const PrefixSpec& spec, const Tokenizer& tok, const std::string& model_dir);

// Chats are rendered by the model's own chat template (tokenizer/chat_template.h: the Jinja
// subset real templates use, byte for byte as transformers' apply_chat_template renders them),
// with the tokenizer's special tokens by name; the text is tokenized as transformers does it
// (special tokens parsed, no BOS added: the template writes its own).
struct ChatMessage {
  std::string role, content;
};
struct ChatSpecials {
  std::string bos, eos;  // bos_token / eos_token as the template sees them ("" when none)
  static ChatSpecials of(const Tokenizer& tok);
};
// A conversation rendered by template `tpl` (`source` names it in errors: syntax, a construct it
// does not support, raise_exception), with the assistant's header after it when
// add_generation_prompt.
std::string render_chat(const std::string& tpl, const std::string& source, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecials& sp = {});

// The system part of a chat (IntactKV[P]'s prefix): the system message rendered alone when every
// conversation with it starts with that text and it holds the system prompt (ChatML, Llama-3);
// else the text every conversation with this system message has before its first user's words
// (Llama-2's "<s>[INST] <<SYS>>…<</SYS>>⏎⏎", Gemma 3's first user turn head). sinkq::Error when
// neither holds the prompt, suggesting --prefix text:....
std::string render_system_prompt_with(const std::string& tpl, const std::string& source, std::string_view system,
                                      const ChatSpecials& sp = {});
// The same with `model_dir`/tokenizer_config.json's template (a tokenizer that carries none).
std::string render_system_prompt(const std::string& model_dir, std::string_view system, const ChatSpecials& sp = {});

// The markup the template writes right after an assistant's reply ("<|im_end|>", "<|eot_id|>",
// "<end_of_turn>", "<|end|>", "</s>"); "" when there is none or the template refuses the probe.
std::string chat_end_of_turn(const std::string& tpl, const ChatSpecials& sp = {});

struct FoundPrefix {
  std::vector<int32_t> tokens;
  int o = 0;                      // ⌈max_l mean count_l⌉
  bool initial_only = false;      // every outlier hit sits at position 0
  OutlierStats stats;
  nlohmann::json to_json(const Tokenizer* tok) const;
};
// PrefixQuant §5.1 on `samples` run through `fwd` (the full-precision model the body will run on;
// no quantization hooks). See the decisions above.
// `sites`: where outlier tokens are measured (calib/outliers.h kOutlierSites; {down_in} is the paper's).
FoundPrefix find_prefix(Forward& fwd, const std::vector<std::vector<int32_t>>& samples, double eta, int bos_id,
                        const Tokenizer* tok = nullptr, const std::function<void(int64_t, int64_t)>& progress = {},
                        std::span<const Site> sites = kOutlierSites);

// "id 'text', id 'text'" of a token list (for printed prefixes).
std::string tokens_text(const std::vector<int32_t>& ids, const Tokenizer& tok);

}  // namespace sinkq
