// HF tokenizers tokenizer.json with a BPE model: the pipeline
//   raw text -> added-token split -> per text segment: normalizer -> pre-tokenizer -> BPE
// plus BOS/EOS from the post-processor template or tokenizer_config.json.
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/json_util.h"
#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace sinkq::tok {
namespace {

using nlohmann::json;

// BOS/EOS ids the post-processor puts around a single sequence.
struct Template {
  std::vector<int32_t> prefix, suffix;
};

void parse_post_processor(const json& j, const std::string& file, const std::string& field,
                          const std::function<int32_t(std::string_view)>& lookup, Template& t) {
  if (j.is_null()) return;
  SINKQ_CHECK(j.is_object(), "{}: {} is not an object", file, field);
  const std::string type = json_string(j, "type", file, field);
  if (type == "Sequence") {
    const json* list = json_find(j, "processors");
    SINKQ_CHECK(list && list->is_array(), "{}: {}.processors is missing or not an array", file, field);
    for (size_t i = 0; i < list->size(); ++i) {
      parse_post_processor((*list)[i], file, fmt::format("{}.processors[{}]", field, i), lookup, t);
    }
  } else if (type == "TemplateProcessing") {
    const json* single = json_find(j, "single");
    SINKQ_CHECK(single && single->is_array(), "{}: {}.single is missing or not an array", file, field);
    const json* specials = json_find(j, "special_tokens");
    bool after_a = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      const std::string f = fmt::format("{}.single[{}]", field, i);
      if (json_find(item, "Sequence")) {
        after_a = true;
        continue;
      }
      const json* sp = json_find(item, "SpecialToken");
      SINKQ_CHECK(sp, "{}: {} is neither SpecialToken nor Sequence", file, f);
      const std::string name = json_string(*sp, "id", file, f + ".SpecialToken");
      // The ids come from special_tokens[name].ids; fall back to the vocabulary.
      std::vector<int32_t> ids;
      if (const json* e = specials ? json_find(*specials, name.c_str()) : nullptr; e && json_find(*e, "ids")) {
        for (const json& id : (*e)["ids"]) {
          SINKQ_CHECK(id.is_number_integer(), "{}: {}.special_tokens['{}'].ids must be integers", file, field, name);
          ids.push_back(id.get<int32_t>());
        }
      } else {
        int32_t id = lookup(name);
        SINKQ_CHECK(id >= 0, "{}: {}: special token '{}' is not in the vocabulary", file, f, name);
        ids.push_back(id);
      }
      auto& dst = after_a ? t.suffix : t.prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json* v = json_find(j, key);
      SINKQ_CHECK(v && v->is_array() && v->size() == 2 && (*v)[1].is_number_integer(),
                  "{}: {}.{} must be [token, id]", file, field, key);
      (std::string(key) == "cls" ? t.prefix : t.suffix).push_back((*v)[1].get<int32_t>());
    }
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets: no tokens added
    fail("{}: {}.type '{}' is not supported", file, field, type);
  }
}

class HfTokenizer final : public Tokenizer {
 public:
  // `doc` is a parsed tokenizer.json; `source` names it in errors.
  HfTokenizer(const json& doc, const SpecialConfig& sc, const std::string& source);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    return decode_impl(ids, skip_special, /*lossy=*/true);
  }
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const override {
    return decode_impl(ids, skip_special, /*lossy=*/false);
  }
  std::string token_text(int32_t id) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_; }
  int eos_id() const override { return eos_; }
  bool add_bos() const override { return !prefix_.empty(); }
  std::string kind() const override { return pre_.byte_level() ? "bpe-bytelevel" : "bpe-spm"; }
  int32_t token_to_id(std::string_view token) const override;
  bool is_special(int32_t id) const override {
    const AddedToken* t = added(id);
    return t && t->special;
  }
  std::string chat_template() const override { return chat_template_; }

 private:
  const AddedToken* added(int32_t id) const {
    auto it = added_by_id_.find(id);
    return it == added_by_id_.end() ? nullptr : &added_[it->second];
  }
  void add_token(AddedToken t);
  void encode_segment(std::string_view seg, bool at_input_start, std::vector<int32_t>& out) const;
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  std::string decode_impl(const std::vector<int32_t>& ids, bool skip_special, bool lossy) const;

  std::string path_;
  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_;
  Decoder decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  TokenMap added_by_content_;
  AddedTokenMatcher match_all_, match_plain_;  // with / without special tokens
  std::vector<int32_t> prefix_, suffix_;
  int32_t bos_ = -1, eos_ = -1, vocab_size_ = 0;
  std::string chat_template_;

  // Pre-tokenized words repeat a lot (" the"): cache their ids. Bounded; guarded for concurrent
  // encode() calls.
  static constexpr size_t kCacheMaxPiece = 64, kCacheMaxEntries = 1 << 18;
  struct Cache {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
};

HfTokenizer::HfTokenizer(const json& j, const SpecialConfig& sc, const std::string& path) : path_(path) {
  SINKQ_CHECK(j.is_object(), "{}: not a JSON object", path);
  const json* model = json_find(j, "model");
  SINKQ_CHECK(model && model->is_object(), "{}: model is missing or not an object", path);
  std::string type = json_string_or(*model, "type", "", path, "model");
  if (type.empty() && json_find(*model, "merges")) type = "BPE";  // untagged older files
  SINKQ_CHECK(type == "BPE", "{}: model.type '{}' is not supported (only BPE)", path, type);
  model_ = BpeModel::from_json(*model, path);
  normalizer_ = Normalizer::from_json(j.value("normalizer", json()), path);
  pre_ = PreTokenizer::from_json(j.value("pre_tokenizer", json()), path);
  decoder_ = Decoder::from_json(j.value("decoder", json()), path);

  if (const json* list = json_find(j, "added_tokens")) {
    SINKQ_CHECK(list->is_array(), "{}: added_tokens is not an array", path);
    for (size_t i = 0; i < list->size(); ++i) {
      const json& a = (*list)[i];
      const std::string f = fmt::format("added_tokens[{}]", i);
      const auto id = int32_t(json_int_or(a, "id", -1, path, f));
      SINKQ_CHECK(id >= 0, "{}: {}.id is missing or negative", path, f);
      add_token(added_token_from_json(a, id, path, f));
    }
  }
  chat_template_ = sc.chat_template.value_or("");
  // transformers also registers tokenizer_config.json's added_tokens_decoder entries.
  for (const AddedToken& t : sc.added_tokens_decoder) {
    if (!added_by_id_.count(t.id)) add_token(t);
  }
  match_all_ = AddedTokenMatcher(added_, /*include_special=*/true);
  match_plain_ = AddedTokenMatcher(added_, /*include_special=*/false);
  vocab_size_ = model_.vocab_size();
  for (const AddedToken& t : added_) vocab_size_ = std::max(vocab_size_, t.id + 1);

  auto lookup = [this](std::string_view s) { return token_to_id(s); };
  Template tmpl;
  parse_post_processor(j.value("post_processor", json()), path, "post_processor", lookup, tmpl);
  auto first = [](const std::vector<int32_t>& v) { return v.empty() ? std::optional<int32_t>() : v.front(); };
  bos_ = resolve_special_id(sc.bos_token, lookup, {sc.bos_id, first(tmpl.prefix)});
  eos_ = resolve_special_id(sc.eos_token, lookup, {sc.eos_id, first(tmpl.suffix)});
  // tokenizer_config.json's add_bos_token / add_eos_token override the template (transformers
  // rebuilds the post-processor from them for Llama-style tokenizers).
  prefix_ = tmpl.prefix;
  suffix_ = tmpl.suffix;
  if (sc.add_bos) prefix_ = *sc.add_bos && bos_ >= 0 ? std::vector<int32_t>{bos_} : std::vector<int32_t>{};
  if (sc.add_eos) suffix_ = *sc.add_eos && eos_ >= 0 ? std::vector<int32_t>{eos_} : std::vector<int32_t>{};
}

void HfTokenizer::add_token(AddedToken t) {
  added_by_content_.emplace(t.content, t.id);
  added_by_id_[t.id] = added_.size();
  added_.push_back(std::move(t));
}

int32_t HfTokenizer::token_to_id(std::string_view token) const {
  auto it = added_by_content_.find(token);
  return it != added_by_content_.end() ? it->second : model_.token_to_id(token);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  // HF works on Rust strings (always valid UTF-8); invalid input bytes become U+FFFD here.
  std::string fixed;
  if (!is_valid_utf8(text)) {
    fixed = utf8_lossy(text);
    text = fixed;
  }
  std::vector<int32_t> out;
  if (opt.add_special) out = prefix_;
  const AddedTokenMatcher& m = opt.parse_special ? match_all_ : match_plain_;
  if (m.empty()) {
    encode_segment(text, true, out);
  } else {
    for (const TextSegment& s : m.split(text)) {
      if (s.token_id >= 0) {
        out.push_back(s.token_id);
      } else {
        encode_segment(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
      }
    }
  }
  if (opt.add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void HfTokenizer::encode_segment(std::string_view seg, bool at_input_start, std::vector<int32_t>& out) const {
  // Each segment between added tokens is normalized on its own, so the Llama normalizer's
  // Prepend('▁') applies after every added token too (llama.cpp's and HF-slow's behaviour).
  const std::string norm = normalizer_.apply(seg);
  if (pre_.empty()) {  // the whole segment is one BPE piece (heap merge keeps it O(n log n))
    model_.encode(norm, /*byte_level=*/false, out);
    return;
  }
  std::vector<std::string> pieces;
  pre_.apply(norm, at_input_start, pieces);
  for (const std::string& p : pieces) encode_piece(p, out);
}

void HfTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  if (piece.size() > kCacheMaxPiece) {
    model_.encode(piece, pre_.byte_level(), out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->map.find(piece);
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  model_.encode(piece, pre_.byte_level(), ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->map.size() >= kCacheMaxEntries) cache_->map.clear();
  cache_->map.emplace(piece, std::move(ids));
}

std::string HfTokenizer::decode_impl(const std::vector<int32_t>& ids, bool skip_special, bool lossy) const {
  std::vector<std::string_view> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = added(id)) {
      if (!(skip_special && t->special)) toks.push_back(t->content);
      continue;
    }
    const std::string& s = model_.id_to_token(id);
    if (!s.empty()) toks.push_back(s);  // ids outside the vocabulary are dropped
  }
  return decoder_.decode(toks, lossy);
}

std::string HfTokenizer::token_text(int32_t id) const {
  if (const AddedToken* t = added(id)) return t->content;
  const std::string& s = model_.id_to_token(id);
  std::string out;
  if (decoder_.byte_level()) {
    append_byte_level(s, out);
    return out;
  }
  // SentencePiece-style: <0xNN> is that byte, '▁' a space (no leading-space strip here).
  if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && std::isxdigit(uint8_t(s[3])) &&
      std::isxdigit(uint8_t(s[4]))) {
    return std::string(1, char(std::strtol(s.substr(3, 2).c_str(), nullptr, 16)));
  }
  return replace_all(s, "\u2581", " ");
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path) {
  const json doc = parse_json_file_text(read_file(path), path);
  return make_hf_tokenizer_from_json(doc, read_special_config(dir_of(path)), path);
}

std::unique_ptr<Tokenizer> make_hf_tokenizer_from_json(const json& doc, const SpecialConfig& sc,
                                                       const std::string& source) {
  return std::make_unique<HfTokenizer>(doc, sc, source);
}

}  // namespace sinkq::tok
