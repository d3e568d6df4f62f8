// sinkq/tokenizer/added_tokens.h — matching added tokens ("<s>", "<|im_end|>", phi-2's runs of
// spaces) in raw text before the model runs (internal header).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sinkq::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // the match also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // see AddedTokenMatcher
};

// A piece of the input: either an added token or a span of ordinary text.
struct TextSegment {
  int32_t token_id = -1;  // >= 0: an added token
  size_t begin = 0, end = 0;  // byte span in the input (for text segments)
};

// Finds added tokens like HF's AddedVocabulary: leftmost-longest, non-overlapping matches on the
// raw text. Difference from HF, on purpose: tokens flagged `normalized` are also matched on the
// raw text rather than on normalized text. With the Llama normalizer (Prepend '▁') HF would give
// "a</s>b" -> [a, </s>, b] with no '▁' before b, while llama.cpp (whose golden vectors we match)
// and sentencepiece-era HF slow tokenizers normalize each side separately -> '▁b'.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Uses the tokens with `special` set only when include_special.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool include_special);

  bool empty() const { return nodes_.size() <= 1; }
  // Splits text into segments (text spans may be empty only when text is empty: never emitted).
  std::vector<TextSegment> split(std::string_view text) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ when a token ends here
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{1};
  std::vector<AddedToken> tokens_;
};

}  // namespace sinkq::tok
