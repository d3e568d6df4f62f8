// sinkq/calib/calib_data.h — calibration samples: N sequences of L tokens drawn from a text file,
// seeded and reproducible (same file, tokenizer, options → the same token ids on every machine).
//
// Input formats (chosen by content, not by name):
//   jsonl  every non-empty line is a JSON object with a string field "text" (C4, the Pile):
//          each line is one document
//   ids    jsonl whose first line has an array field "ids": every line is one sample of token ids,
//          used verbatim (no tokenizing, no sampling, no [BOS] added): the first N lines, the first
//          L ids of each; fewer lines than N, a line shorter than L, or an id outside the
//          tokenizer's vocabulary is an error. The way to give two implementations the same
//          calibration tokens (bench/peers/). bos reports whether every sample starts with [BOS].
//   text   anything else: the whole file (CRLF read as LF) is one document (WikiText-2)
// Sampling (GPTQ's get_c4 / get_wikitext2 recipe, which PrefixQuant and the other papers reuse):
//   every document is tokenized on its own without special tokens; a sample picks a document
//   uniformly among those with at least `body` = L - (bos ? 1 : 0) tokens (with replacement),
//   then a uniform start offset, and takes `body` consecutive tokens; with bos, [BOS] is put in
//   front (PrefixQuant finds outlier tokens on sequences that start the way inference does).
// The RNG is std::mt19937_64(seed) and draws are mapped to ranges with a 64-bit modulo, so the
// result does not depend on the standard library's distribution implementations.
// Errors name the file: missing, empty, a jsonl line that is not an object with "text" (line
// number), or no document long enough (the longest one's length is given).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace sinkq {

struct CalibOptions {
  int64_t samples = 8;   // N
  int64_t len = 512;     // L, tokens per sample including [BOS] when bos
  uint64_t seed = 0;
  bool bos = true;       // put [BOS] first (ignored, with no error, when the tokenizer has no BOS:
                         // then every token is text; calib_to_json says which happened)
};

struct CalibSet {
  std::vector<std::vector<int32_t>> samples;  // N × L
  std::string file;
  std::string format;     // "jsonl" | "text"
  int64_t documents = 0;  // documents in the file
  int64_t eligible = 0;   // documents with enough tokens
  bool bos = false;       // whether samples start with [BOS]
  CalibOptions options;
};

CalibSet load_calib(const std::string& path, const Tokenizer& tok, const CalibOptions& opt);
// The documents of a file in the formats above (jsonl: one per line; text: the whole file);
// *format = "jsonl" or "text". Errors as above.
std::vector<std::string> read_documents(const std::string& path, std::string* format);

}  // namespace sinkq
