// Tokenizer::load and friends, and StreamDecoder.
#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace sinkq {

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  // A GGUF file carries its tokenizer in its metadata (tokenizer.ggml.*).
  if (GgufFile::looks_like_gguf(model_dir))
    return from_gguf_metadata(GgufFile::open(model_dir)->metadata(), model_dir);
  struct stat st {};
  SINKQ_CHECK(::stat(model_dir.c_str(), &st) == 0, "{}: model directory does not exist", model_dir);
  SINKQ_CHECK(S_ISDIR(st.st_mode), "{}: not a directory nor a GGUF file (expected a model directory with "
              "tokenizer.json or tokenizer.model, or a .gguf file)", model_dir);
  const std::string json_path = model_dir + "/tokenizer.json";
  if (tok::file_exists(json_path)) return tok::make_hf_tokenizer(json_path);
  const std::string sp_path = model_dir + "/tokenizer.model";
  if (tok::file_exists(sp_path)) return tok::make_sp_tokenizer(sp_path);
  // An artifact made from a GGUF model keeps the source's tokenizer.* metadata in tokenizer.gguf.
  const std::string gguf_path = model_dir + "/tokenizer.gguf";
  if (tok::file_exists(gguf_path)) return from_gguf_metadata(GgufFile::open(gguf_path)->metadata(), gguf_path);
  fail("{}: no tokenizer found (neither {} nor {} exists)", model_dir, "tokenizer.json", "tokenizer.model");
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path) {
  SINKQ_CHECK(tok::file_exists(path), "{}: tokenizer.json not found", path);
  return tok::make_hf_tokenizer(path);
}

std::unique_ptr<Tokenizer> Tokenizer::from_sentencepiece(const std::string& path) {
  return tok::make_sp_tokenizer(path);  // checks the file itself
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_metadata(const nlohmann::json& meta, const std::string& source) {
  return tok::make_gguf_tokenizer(meta, source);
}

// ---- StreamDecoder ------------------------------------------------------------------------------
//
// Each push re-decodes the window ids_[start_:] and returns what the decoded text gained since the
// last push, minus a trailing incomplete UTF-8 sequence (held back until its bytes arrive). The
// window restarts near the end once everything is emitted, so a push costs O(window), not
// O(generated tokens). Restarting is safe because decode(window + more) starts with
// decode(window) when decode(window) is non-empty: the decoders only treat the *first* output
// specially (SentencePiece drops the leading space), and that is settled inside the window.
// At start_ == 0 the window is the whole sequence, so the leading-space rule applies exactly once,
// at the very start.

namespace {
constexpr size_t kMaxWindow = 64;   // restart the window when it grows past this many ids ...
constexpr size_t kKeepWindow = 8;   // ... keeping the last few as context
}  // namespace

void StreamDecoder::prime(const std::vector<int32_t>& context) {
  const size_t keep = std::min(context.size(), kKeepWindow);
  ids_.assign(context.end() - std::ptrdiff_t(keep), context.end());
  start_ = 0;
  emitted_ = tok_.decode_bytes(ids_, /*skip_special=*/true);
}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::vector<int32_t> window(ids_.begin() + std::ptrdiff_t(start_), ids_.end());
  const std::string text = tok_.decode_bytes(window, /*skip_special=*/true);
  std::string out;
  if (text.size() >= emitted_.size() && text.compare(0, emitted_.size(), emitted_) == 0) {
    const size_t complete = tok::utf8_complete_prefix(text);
    if (complete > emitted_.size()) {
      out = text.substr(emitted_.size(), complete - emitted_.size());
      emitted_ = text.substr(0, complete);
    }
  } else {
    // The decoder rewrote text it had produced (no supported decoder does): nothing can be
    // taken back, so resynchronise silently.
    emitted_ = text.substr(0, tok::utf8_complete_prefix(text));
  }
  if (emitted_.size() == text.size() && ids_.size() - start_ > kMaxWindow) {
    const size_t new_start = ids_.size() - kKeepWindow;
    const std::vector<int32_t> w(ids_.begin() + std::ptrdiff_t(new_start), ids_.end());
    std::string t = tok_.decode_bytes(w, /*skip_special=*/true);
    if (!t.empty() && tok::utf8_complete_prefix(t) == t.size()) {
      start_ = new_start;
      emitted_ = std::move(t);
    }
  }
  // Invalid bytes that can never complete (e.g. a stray continuation byte) are passed on as
  // U+FFFD rather than held forever.
  return tok::utf8_lossy(out);
}

std::string StreamDecoder::flush() {
  const std::vector<int32_t> window(ids_.begin() + std::ptrdiff_t(start_), ids_.end());
  const std::string text = tok_.decode_bytes(window, /*skip_special=*/true);
  std::string rest;
  if (text.size() > emitted_.size() && text.compare(0, emitted_.size(), emitted_) == 0) {
    rest = text.substr(emitted_.size());
  }
  emitted_ = text;
  return tok::utf8_lossy(rest);
}

}  // namespace sinkq
