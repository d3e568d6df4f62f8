// sinkq/tokenizer/tokenizer.h — text <-> token ids, matching HF tokenizers / sentencepiece exactly.
//
// Loading from a model directory:
//   tokenizer.json (HF tokenizers format) if present:
//     - SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Phi-3, TinyLlama, stories260K):
//       normalizer Prepend("▁") + Replace(" ", "▁"), or a Metaspace pre-tokenizer; BPE model with
//       merges; byte_fallback <0xNN> pieces; decoder Replace/ByteFallback/Fuse/Strip.
//     - byte-level BPE (GPT-2, Llama-3, Qwen2): ByteLevel pre-tokenizer (+ Split with a regex,
//       run with PCRE2 so look-aheads and \p{..} classes work), GPT-2 byte<->unicode map.
//     - added_tokens (special or not) are matched in the raw text before the model runs.
//   else tokenizer.model through the sentencepiece library.
//   tokenizer_config.json (optional): add_bos_token / add_eos_token, bos/eos token strings.
//   config.json bos/eos ids are the fallback for BOS/EOS ids.
// From a GGUF file's metadata (llama.cpp's tokenizer.ggml.* keys), see from_gguf_metadata:
//   gpt2 (byte-level BPE) vocabularies become a tokenizer.json document, llama (SentencePiece BPE
//   with scores) ones a sentencepiece model, each run by the implementation above — one code path.
// Notes (see the .cc files for the reasons):
//   - Text between added tokens is normalized on its own, so Llama's Prepend('▁') applies after
//     "</s>" too (llama.cpp / HF-slow behaviour; golden vectors depend on it).
//   - Invalid UTF-8 input becomes U+FFFD on the tokenizer.json path (as a Rust/Python string).
//   - vocab_size() counts the tokenizer's ids; a model's embedding may have more rows (padding).
//   - Implementation: src/tokenizer/{hf_tokenizer,bpe,hf_pretokenize,hf_decoder,sp_tokenizer,
//     gguf_tokenizer}.cc.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sinkq {

struct EncodeOptions {
  // Add BOS/EOS as tokenizer_config.json says (add_bos_token / add_eos_token, or the
  // post-processor template of tokenizer.json). false = raw text only.
  bool add_special = true;
  // Match special added tokens ("<s>", "<|begin_of_text|>") in the text. HF does; sentencepiece
  // and llama.cpp's tests (parse_special=false) do not.
  bool parse_special = true;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws sinkq::Error naming the file if nothing usable is found or a file is malformed.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir);
  // Loads an explicit tokenizer.json (+ optional tokenizer_config.json beside it).
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& path);
  // Loads an explicit sentencepiece tokenizer.model.
  static std::unique_ptr<Tokenizer> from_sentencepiece(const std::string& path);
  // From GGUF metadata (the `tokenizer.ggml.*` keys, as JSON: key -> scalar or array; other keys
  // are ignored). `source` names the file for error messages. gpt2 (byte-level BPE; pre-tokenizers
  // gpt2/gpt-2/default/mpt/phi-2/olmo, smollm/refact/starcoder, llama-bpe/llama3/llama-v3,
  // qwen2/deepseek-r1-qwen) and llama (SentencePiece-style) vocabularies; anything else throws.
  // Implementation and the choices it makes: src/tokenizer/gguf_tokenizer.cc.
  static std::unique_ptr<Tokenizer> from_gguf_metadata(const nlohmann::json& meta, const std::string& source);

  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const = 0;
  // Decodes ids to text; special tokens (BOS/EOS) are skipped when skip_special.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
  // Text of one token for streaming / display (the raw piece, bytes resolved; may be a partial
  // UTF-8 sequence for byte-fallback tokens).
  virtual std::string token_text(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;   // -1 if none
  virtual int eos_id() const = 0;   // -1 if none
  virtual bool add_bos() const = 0; // whether encode(add_special) prepends BOS
  virtual std::string kind() const = 0;  // "bpe-spm" | "bpe-bytelevel" | "sentencepiece"

  // ---- Additions (non-pure, so other implementations of this interface keep compiling) ----
  // Like decode() but keeps bytes that do not (yet) form valid UTF-8 instead of replacing them
  // by U+FFFD. StreamDecoder relies on it. Default: decode().
  virtual std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special = true) const {
    return decode(ids, skip_special);
  }
  // Id of a token given its vocabulary string ("<|im_end|>", "</s>", "▁the"), -1 if none.
  virtual int32_t token_to_id(std::string_view token) const { return -1; }
  // Whether decode(skip_special=true) drops this id (BOS/EOS, control and special added tokens).
  virtual bool is_special(int32_t id) const { return id >= 0 && (id == bos_id() || id == eos_id()); }
  // The Jinja chat template that came with the tokenizer (GGUF tokenizer.chat_template, or a
  // string chat_template in tokenizer_config.json); "" if none.
  virtual std::string chat_template() const { return {}; }
};

// Text from outside (a file, a prompt) must be UTF-8: error naming `what`, the byte offset of the
// first invalid sequence, its bytes, and its line and column (1-based; bytes in the line).
void require_utf8(std::string_view text, std::string_view what);

// Streams text token by token: keeps incomplete UTF-8 bytes (from byte fallback / byte-level
// tokens) until they complete; handles the SentencePiece leading-space rule.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : tok_(t) {}
  // Continues after `context` (a prompt): its text counts as already emitted, so the first pushed
  // token decodes as a continuation (SentencePiece keeps its leading space: " upon" after "Once",
  // not "upon"). Only the last few ids matter; call before the first push.
  void prime(const std::vector<int32_t>& context);
  // Returns the text that became printable after appending `id`.
  std::string push(int32_t id);
  std::string flush();
 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;  // ids_[start_:] is the window that is re-decoded on each push
  std::string emitted_;       // bytes already returned for that window
  size_t start_ = 0;
};

// Stop strings over streamed text (OpenAI's `stop`; the Python module's generate(stop=...)): push() text as it is decoded, take what may be sent.
// Text that could be the start of a stop string is held back until it is known not to be one; at
// a match the text before it is released and matched() turns true (the stop string is not part of
// the output).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `piece` and returns the text that can be sent now.
  std::string push(std::string_view piece);
  // End of generation: the held-back text (no stop string can complete any more).
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& text() const { return text_; }  // everything released so far

 private:
  std::vector<std::string> stops_;
  std::string pending_, text_;
  bool matched_ = false;
};

}  // namespace sinkq
