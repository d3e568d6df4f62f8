#include "calib/prefix.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/chat_template.h"

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

ChatSpecials ChatSpecials::of(const Tokenizer& tok) {
  ChatSpecials sp;
  if (tok.bos_id() >= 0) sp.bos = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) sp.eos = tok.token_text(tok.eos_id());
  return sp;
}

std::string render_system_prompt(const std::string& model_dir, std::string_view system, const ChatSpecials& sp) {
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
  return render_system_prompt_with(it->get<std::string>(), path, system, sp);
}

namespace {

// The parsed template of `tpl`: parsed once per distinct text (a server renders every request with
// the same one); a few kept.
std::shared_ptr<const ChatTemplate> parsed(const std::string& tpl, const std::string& source) {
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::shared_ptr<const ChatTemplate>>> cache;
  {
    std::lock_guard lock(mu);
    for (const auto& [text, t] : cache)
      if (text == tpl) return t;
  }
  auto t = std::make_shared<const ChatTemplate>(tpl, source);
  std::lock_guard lock(mu);
  if (cache.size() >= 8) cache.erase(cache.begin());
  cache.emplace_back(tpl, t);
  return t;
}

}  // namespace

std::string render_chat(const std::string& tpl, const std::string& source, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSpecials& sp) {
  SINKQ_CHECK(!tpl.empty(), "{}: there is no chat template", source);
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  // What transformers' apply_chat_template passes (tools and documents null when absent).
  const nlohmann::ordered_json vars = {{"messages", msgs},       {"tools", nullptr},
                                       {"documents", nullptr},   {"add_generation_prompt", add_generation_prompt},
                                       {"bos_token", sp.bos},    {"eos_token", sp.eos}};
  return parsed(tpl, source)->render(vars);
}

std::string render_system_prompt_with(const std::string& tpl, const std::string& source, std::string_view system,
                                      const ChatSpecials& sp) {
  // The system message alone, when every conversation with it starts so (ChatML, Llama-3) and it
  // holds the text; else what every conversation with this system message and a first user turn
  // has in common before the user's text (Llama-2 opens its first [INST] with the system part,
  // Gemma 3 puts it inside the first user turn).
  const std::string sys(system);
  auto with_user = [&](const char* u) { return render_chat(tpl, source, {{"system", sys}, {"user", u}}, false, sp); };
  const std::string a = with_user("A"), b = with_user("B");
  std::string alone;
  try {
    alone = render_chat(tpl, source, {{"system", sys}}, false, sp);
  } catch (const Error&) {
    // a template that needs a user turn
  }
  if (!alone.empty() && alone.find(sys) != std::string::npos && a.rfind(alone, 0) == 0) return alone;
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  const std::string common = a.substr(0, n);
  SINKQ_CHECK(common.find(sys) != std::string::npos,
              "{}: the chat template renders no system part that conversations with this system prompt start with; "
              "write the prompt out with --prefix text:...",
              source);
  return common;
}

std::string chat_end_of_turn(const std::string& tpl, const ChatSpecials& sp) {
  // What the template writes right after an assistant turn: "<|im_end|>", "<|eot_id|>",
  // "<end_of_turn>", "<|end|>", " </s>" (Llama-2: the EOS) — the first markup after the reply.
  std::string r;
  try {
    r = render_chat(tpl, "the chat template", {{"user", "A"}, {"assistant", "Zq9"}}, false, sp);
  } catch (const Error&) {
    return "";
  }
  const size_t at = r.rfind("Zq9");
  if (at == std::string::npos) return "";
  size_t i = at + 3;
  while (i < r.size() && (r[i] == ' ' || r[i] == '\n')) ++i;
  size_t j = i;
  while (j < r.size() && r[j] != ' ' && r[j] != '\n') ++j;
  const std::string e = r.substr(i, j - i);
  return e.size() > 2 && e.front() == '<' && e.back() == '>' ? e : "";
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
      const ChatSpecials sp = ChatSpecials::of(tok);
      const std::string rendered = tpl.empty() ? render_system_prompt(model_dir, spec.text, sp)
                                               : render_system_prompt_with(tpl, model_dir, spec.text, sp);
      // As transformers tokenizes a rendered chat: the template writes its own begin token.
      enc.parse_special = true;
      enc.add_special = false;
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
                        const Tokenizer* tok, const std::function<void(int64_t, int64_t)>& progress,
                        std::span<const Site> sites) {
  SINKQ_CHECK(fwd.prefix_size() == 0, "find_prefix runs the samples without a prefix");
  FoundPrefix f;
  f.stats = find_outlier_tokens(fwd, samples, eta, tok, progress, sites);
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
  nlohmann::json sites = nlohmann::json::array();
  for (Site s : stats.sites) sites.push_back(site_name(s));
  j["outlier_sites"] = sites;
  j["sequences"] = stats.sequences;
  j["mean_count_per_layer"] = stats.mean_count;
  nlohmann::json counts = nlohmann::json::array();
  for (const OutlierTokenCount& c : stats.counts)
    counts.push_back({{"token_id", c.token_id}, {"text", c.text}, {"occurrences", c.occurrences},
                      {"non_initial", c.non_initial}, {"positions", c.positions},
                      {"first_site_occurrences", c.first_site_occurrences},
                      {"first_site_non_initial", c.first_site_non_initial}});
  j["counts"] = counts;
  return j;
}

std::string tokens_text(const std::vector<int32_t>& ids, const Tokenizer& tok) {
  std::string s;
  for (int32_t id : ids) s += fmt::format("{}{} {:?}", s.empty() ? "" : ", ", id, tok.token_text(id));
  return s;
}

}  // namespace sinkq
