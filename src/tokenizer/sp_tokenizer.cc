// sentencepiece tokenizer.model through the sentencepiece library.
#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace sinkq::tok {
namespace {

constexpr std::string_view kSpace = "\u2581";
constexpr std::string_view kUnknownSurface = " \u2047 ";  // sentencepiece's default unk surface

class SpTokenizer final : public Tokenizer {
 public:
  // `source` names the model in errors; load() / load_proto() must run before init().
  explicit SpTokenizer(std::string source) : path_(std::move(source)) {}
  void load_file();
  void load_proto(std::string_view serialized);
  void init(const SpecialConfig& sc);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const override;
  std::string token_text(int32_t id) const override;
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return bos_; }
  int eos_id() const override { return eos_; }
  bool add_bos() const override { return add_bos_ && bos_ >= 0; }
  std::string kind() const override { return "sentencepiece"; }
  int32_t token_to_id(std::string_view token) const override {
    int id = sp_.PieceToId(token);
    return id == sp_.unk_id() && token != sp_.IdToPiece(id) ? -1 : id;  // PieceToId maps misses to unk
  }
  bool is_special(int32_t id) const override { return valid(id) && sp_.IsControl(id); }
  std::string chat_template() const override { return chat_template_; }

 private:
  bool valid(int32_t id) const { return id >= 0 && id < sp_.GetPieceSize(); }
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  AddedTokenMatcher specials_;  // control + unknown pieces, matched when parse_special
  bool strip_dummy_space_ = true;  // decode drops the '▁' of the first piece (add_dummy_prefix)
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_ = true, add_eos_ = false;
  std::string chat_template_;
};

void SpTokenizer::load_file() {
  SINKQ_CHECK(file_exists(path_), "{}: sentencepiece model not found", path_);
  // Read by sinkq (read_file refuses a FIFO or a directory; sentencepiece's own ifstream would
  // block on a FIFO), parsed by sentencepiece.
  load_proto(read_file(path_));
}

void SpTokenizer::load_proto(std::string_view serialized) {
  sentencepiece::util::Status st;
  try {
    st = sp_.LoadFromSerializedProto(serialized);
  } catch (const std::exception& e) {
    // libsentencepiece throws from its trie builder (darts: "failed to insert key: zero-length
    // key" for an empty piece; a fuzz finding that escaped as a bare library exception).
    fail("{}: not a valid sentencepiece model: {}", path_, e.what());
  }
  SINKQ_CHECK(st.ok(), "{}: not a valid sentencepiece model: {}", path_, st.ToString());
}

void SpTokenizer::init(const SpecialConfig& sc) {
  std::vector<AddedToken> specials;
  for (int id = 0; id < sp_.GetPieceSize(); ++id) {
    if (sp_.IsControl(id) || sp_.IsUnknown(id)) {
      AddedToken t;
      t.id = id;
      t.content = sp_.IdToPiece(id);
      t.special = true;
      specials.push_back(std::move(t));
    }
  }
  specials_ = AddedTokenMatcher(specials, /*include_special=*/true);

  // The library exposes no normalizer spec: detect add_dummy_prefix's decode rule by decoding a
  // piece made of '▁' and then a non-'▁' character (e.g. "▁t").
  for (int id = 0; id < sp_.GetPieceSize(); ++id) {
    const std::string& p = sp_.IdToPiece(id);
    if (p.size() > kSpace.size() && p.compare(0, kSpace.size(), kSpace) == 0 &&
        p.compare(kSpace.size(), kSpace.size(), kSpace) != 0 && !sp_.IsControl(id) && !sp_.IsUnknown(id) &&
        !sp_.IsByte(id)) {
      strip_dummy_space_ = sp_.DecodeIds({id}).front() != ' ';
      break;
    }
  }

  // LlamaTokenizer defaults: add BOS, no EOS; tokenizer_config.json beside the model may say
  // otherwise. Ids: the token strings from tokenizer_config.json, else the model's, else
  // config.json's.
  auto lookup = [this](std::string_view s) { return token_to_id(s); };
  bos_ = resolve_special_id(sc.bos_token, lookup, {sp_.bos_id(), sc.bos_id});
  eos_ = resolve_special_id(sc.eos_token, lookup, {sp_.eos_id(), sc.eos_id});
  add_bos_ = sc.add_bos.value_or(true);
  add_eos_ = sc.add_eos.value_or(false);
  chat_template_ = sc.chat_template.value_or("");
}

void SpTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  const auto st = sp_.Encode(text, &ids);
  SINKQ_CHECK(st.ok(), "{}: sentencepiece encode failed: {}", path_, st.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> SpTokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<int32_t> out;
  if (opt.add_special && add_bos()) out.push_back(bos_);
  if (opt.parse_special && !specials_.empty()) {
    // Like HF's slow LlamaTokenizer: text between special pieces is encoded separately (each part
    // gets sentencepiece's dummy-prefix '▁').
    for (const TextSegment& s : specials_.split(text)) {
      if (s.token_id >= 0) out.push_back(s.token_id);
      else encode_text(text.substr(s.begin, s.end - s.begin), out);
    }
  } else {
    encode_text(text, out);
  }
  if (opt.add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string SpTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  if (!skip_special) return utf8_lossy(decode_bytes(ids, false));
  std::vector<int> v;
  v.reserve(ids.size());
  for (int32_t id : ids) {
    if (valid(id)) v.push_back(id);
  }
  return sp_.DecodeIds(v);  // the library's own rules (control pieces are always invisible)
}

std::string SpTokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  // Mirrors SentencePieceProcessor::Decode, keeping byte pieces raw: the '▁' of the first piece
  // is dropped while nothing has been output yet and no such space was consumed before.
  std::string out;
  bool bos_ws_seen = false, is_bos_ws = strip_dummy_space_;
  for (int32_t id : ids) {
    if (!valid(id)) continue;
    if (sp_.IsByte(id)) {
      out += token_text(id);
      continue;
    }
    if (bos_ws_seen || !out.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (sp_.IsControl(id)) {
      if (!skip_special) out += sp_.IdToPiece(id);
      continue;
    }
    if (sp_.IsUnknown(id)) {
      out += kUnknownSurface;
      continue;
    }
    std::string_view p = sp_.IdToPiece(id);
    if (is_bos_ws && p.compare(0, kSpace.size(), kSpace) == 0) {
      p.remove_prefix(kSpace.size());
      bos_ws_seen = true;
    }
    for (size_t hit; (hit = p.find(kSpace)) != std::string_view::npos; p.remove_prefix(hit + kSpace.size())) {
      out.append(p.substr(0, hit));
      out += ' ';
    }
    out.append(p);
  }
  return out;
}

std::string SpTokenizer::token_text(int32_t id) const {
  if (!valid(id)) return "";
  const std::string& p = sp_.IdToPiece(id);
  if (sp_.IsByte(id) && p.size() == 6) return std::string(1, char(std::strtol(p.substr(3, 2).c_str(), nullptr, 16)));
  if (sp_.IsControl(id)) return p;
  std::string out;
  std::string_view v = p;
  for (size_t hit; (hit = v.find(kSpace)) != std::string_view::npos; v.remove_prefix(hit + kSpace.size())) {
    out.append(v.substr(0, hit));
    out += ' ';
  }
  out.append(v);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& path) {
  auto t = std::make_unique<SpTokenizer>(path);
  t->load_file();
  t->init(read_special_config(dir_of(path)));
  return t;
}

std::unique_ptr<Tokenizer> make_sp_tokenizer_from_proto(std::string_view serialized, const SpecialConfig& sc,
                                                        const std::string& source) {
  auto t = std::make_unique<SpTokenizer>(source);
  t->load_proto(serialized);
  t->init(sc);
  return t;
}

}  // namespace sinkq::tok
