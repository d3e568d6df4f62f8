#include "calib/prefix.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/mmap.h"

namespace sinkq {

PrefixSpec parse_prefix_spec(std::string_view value) {
  PrefixSpec s;
  s.spec = std::string(value);
  SINKQ_CHECK(!value.empty(), "--prefix is empty: expected bos, auto, ids:1,2,..., system:TEXT or text:TEXT");
  auto starts = [&](std::string_view p) { return value.substr(0, p.size()) == p; };
  if (value == "bos") {
    s.kind = PrefixSpec::Kind::Bos;
  } else if (value == "auto") {
    s.kind = PrefixSpec::Kind::Auto;
  } else if (starts("ids:")) {
    s.kind = PrefixSpec::Kind::Ids;
    std::string_view rest = value.substr(4);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      int32_t id = -1;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
      SINKQ_CHECK(ec == std::errc() && end == item.data() + item.size() && id >= 0,
                  "--prefix {}: '{}' is not a token id (expected ids:1,2,...)", value, item);
      s.ids.push_back(id);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    SINKQ_CHECK(!s.ids.empty(), "--prefix {}: no token ids", value);
  } else if (starts("system:")) {
    s.kind = PrefixSpec::Kind::System;
    s.text = std::string(value.substr(7));
    SINKQ_CHECK(!s.text.empty(), "--prefix system: needs the system prompt text after the colon");
  } else if (starts("text:")) {
    s.kind = PrefixSpec::Kind::Text;
    s.text = std::string(value.substr(5));
    SINKQ_CHECK(!s.text.empty(), "--prefix text: needs text after the colon");
  } else {
    // Bare text is not taken as a prefix: a mistyped keyword ("bso", "wat") would silently become
    // a text prefix of those letters.
    fail("--prefix {}: not a prefix spec: expected bos, auto, ids:1,2,..., system:TEXT or text:TEXT (for a text "
         "prefix write text:{})", value, value);
  }
  return s;
}

std::string render_system_prompt(const std::string& model_dir, std::string_view system) {
  const std::string path = model_dir + "/tokenizer_config.json";
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  const auto it = cfg.find("chat_template");
  SINKQ_CHECK(it != cfg.end() && it->is_string(),
              "{} has no chat_template: write the system prompt out with --prefix text:... instead of system:", path);
  return render_system_prompt_with(it->get<std::string>(), path, system);
}

std::string render_system_prompt_with(const std::string& tpl, const std::string& source, std::string_view system) {
  return render_chat(tpl, source, {{"system", std::string(system)}}, false);
}

namespace {
// The system turn a ChatML template writes when the conversation has none (SmolLM2: "You are a
// helpful AI assistant named SmolLM, …"; Qwen2: "You are a helpful assistant."): the literal
// '<|im_start|>system⏎TEXT<|im_end|>' under a `messages[0]['role'] != 'system'` test, with ⏎ a
// newline or the two characters \n of a Jinja string. "" when the template has none.
std::string chatml_default_system(const std::string& tpl) {
  if (tpl.find("!= 'system'") == std::string::npos && tpl.find("!= \"system\"") == std::string::npos) return "";
  for (const char* head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t at = tpl.find(head);
    if (at == std::string::npos) continue;
    const size_t from = at + std::strlen(head), end = tpl.find("<|im_end|>", from);
    if (end == std::string::npos) return "";
    std::string text = tpl.substr(from, end - from);
    for (size_t i = 0; (i = text.find("\\n", i)) != std::string::npos;) text.replace(i, 2, "\n");
    // Jinja code inside (a variable, a tag) means the text is not a literal: none.
    if (text.find("{{") != std::string::npos || text.find("{%") != std::string::npos || text.find('\'') != std::string::npos)
      return "";
    return text;
  }
  return "";
}
}  // namespace

std::string render_chat(const std::string& tpl, const std::string& source, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    SINKQ_CHECK(r == "user" || r == "assistant" || (r == "system" && i == 0),
                "chat message {}: role '{}' (expected system first, then user / assistant)", i, r);
  }
  std::string out;
  if (tpl.find("<|start_header_id|>") != std::string::npos) {  // Llama-3
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (tpl.find("<|im_start|>") != std::string::npos) {  // ChatML (Qwen2, SmolLM2)
    if (messages.empty() || messages[0].role != "system") {
      const std::string def = chatml_default_system(tpl);
      if (!def.empty()) out = "<|im_start|>system\n" + def + "<|im_end|>\n";
    }
    for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  if (tpl.find("<<SYS>>") != std::string::npos) {  // Llama-2: BOS comes from the tokenizer
    // "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U2 [/INST]": the system text opens the
    // first user turn; every assistant turn ends with </s> and the next user turn opens with <s>.
    size_t i = 0;
    bool first = true;
    if (!messages.empty() && messages[0].role == "system") {
      out = "[INST] <<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
      i = 1;
      if (i == messages.size()) return out;  // the system part alone (IntactKV[P])
    }
    for (; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "user") {
        if (out.empty() || !first) out += (first ? "" : "<s>") + std::string("[INST] ");
        out += m.content + " [/INST]";
      } else {
        out += " " + m.content + " </s>";
      }
      first = false;
    }
    return out;
  }
  fail("{}: the chat template is not one sinkq can render (Llama-2, Llama-3, ChatML); write the prompt out with "
       "--prefix text:...",
       source);
}

std::string chat_end_of_turn(const std::string& tpl) {
  if (tpl.find("<|start_header_id|>") != std::string::npos) return "<|eot_id|>";
  if (tpl.find("<|im_start|>") != std::string::npos) return "<|im_end|>";
  return "";
}

std::vector<int32_t> prefix_tokens(const PrefixSpec& spec, const Tokenizer& tok, const std::string& model_dir) {
  EncodeOptions enc;
  switch (spec.kind) {
    case PrefixSpec::Kind::Bos:
      SINKQ_CHECK(tok.bos_id() >= 0, "--prefix bos: the tokenizer has no BOS token");
      return {int32_t(tok.bos_id())};
    case PrefixSpec::Kind::Auto:
      fail("--prefix auto is found on calibration data (find_prefix), not from the spec alone");
    case PrefixSpec::Kind::Ids:
      for (int32_t id : spec.ids)
        SINKQ_CHECK(id < tok.vocab_size(), "--prefix {}: token id {} is outside the vocabulary ({} tokens)",
                    spec.spec, id, tok.vocab_size());
      return spec.ids;
    case PrefixSpec::Kind::System: {
      // The tokenizer's own template (a GGUF file's tokenizer.chat_template, or tokenizer_config.json's).
      const std::string tpl = tok.chat_template();
      const std::string rendered = tpl.empty() ? render_system_prompt(model_dir, spec.text)
                                               : render_system_prompt_with(tpl, model_dir, spec.text);
      enc.parse_special = true;
      // Llama-3 / ChatML renderings carry their own begin token; Llama-2's comes from add_bos.
      enc.add_special = rendered.rfind("<|", 0) != 0;
      return tok.encode(rendered, enc);
    }
    case PrefixSpec::Kind::Text:
      enc.add_special = true;  // the tokenizer's own BOS, when it adds one
      enc.parse_special = false;
      return tok.encode(spec.text, enc);
  }
  fail("--prefix: unknown kind");
}

FoundPrefix find_prefix(Forward& fwd, const std::vector<std::vector<int32_t>>& samples, double eta, int bos_id,
                        const Tokenizer* tok, const std::function<void(int64_t, int64_t)>& progress) {
  SINKQ_CHECK(fwd.prefix_size() == 0, "find_prefix runs the samples without a prefix");
  FoundPrefix f;
  f.stats = find_outlier_tokens(fwd, samples, eta, tok, progress);
  f.o = f.stats.outlier_number();
  // A later pipeline stage's stats hold its own layers only: the first stage chooses (its count
  // every layer) and hands the tokens on (quant/pipeline.cc).
  if (!fwd.model().stage().first()) return f;
  int64_t non_initial = 0;
  for (const OutlierToken& t : f.stats.tokens) non_initial += t.position != 0;
  f.initial_only = !f.stats.tokens.empty() && non_initial == 0;
  if (bos_id >= 0) {
    if (f.o > 1) f.tokens = f.stats.frequent_tokens(f.o - 1);
    f.tokens.push_back(bos_id);
    return f;
  }
  // No BOS: the o most frequent non-initial outlier tokens, else the most frequent initial one.
  f.tokens = f.stats.frequent_tokens(std::max(f.o, 1));
  if (f.tokens.empty()) {
    std::map<int32_t, int64_t> initial;
    for (const OutlierToken& t : f.stats.tokens)
      if (t.position == 0) ++initial[t.token_id];
    SINKQ_CHECK(!initial.empty(),
                "no outlier token found (eta {}) and the model has no BOS: there is nothing to prefix", eta);
    const auto best = std::max_element(initial.begin(), initial.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    f.tokens.push_back(best->first);
  }
  return f;
}

nlohmann::json FoundPrefix::to_json(const Tokenizer* tok) const {
  nlohmann::json j;
  j["o"] = o;
  j["tokens"] = tokens;
  if (tok) {
    std::vector<std::string> texts;
    for (int32_t id : tokens) texts.push_back(tok->token_text(id));
    j["token_texts"] = texts;
  }
  j["initial_only"] = initial_only;
  j["eta"] = stats.eta;
  j["sequences"] = stats.sequences;
  j["mean_count_per_layer"] = stats.mean_count;
  nlohmann::json counts = nlohmann::json::array();
  for (const OutlierTokenCount& c : stats.counts)
    counts.push_back({{"token_id", c.token_id}, {"text", c.text}, {"occurrences", c.occurrences},
                      {"non_initial", c.non_initial}, {"positions", c.positions}});
  j["counts"] = counts;
  return j;
}

std::string tokens_text(const std::vector<int32_t>& ids, const Tokenizer& tok) {
  std::string s;
  for (int32_t id : ids) s += fmt::format("{}{} {:?}", s.empty() ? "" : ", ", id, tok.token_text(id));
  return s;
}

}  // namespace sinkq
