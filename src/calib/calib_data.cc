#include "calib/calib_data.h"

#include <nlohmann/json.hpp>

#include <random>
#include <string_view>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/mmap.h"

namespace sinkq {

namespace {

// True when the first non-blank line parses as a JSON object: the file is jsonl.
bool looks_like_jsonl(std::string_view text) {
  size_t b = text.find_first_not_of(" \t\n");
  if (b == std::string_view::npos || text[b] != '{') return false;
  size_t e = text.find('\n', b);
  auto j = nlohmann::json::parse(text.substr(b, e == std::string_view::npos ? text.size() - b : e - b),
                                 nullptr, /*allow_exceptions=*/false);
  return j.is_object();
}

// Calls f(object, line number) for every non-blank line of a jsonl text; a line that is not a JSON
// object is an error naming the file and the line.
template <class F>
void for_each_object_line(const std::string& path, std::string_view text, F&& f) {
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SINKQ_CHECK(j.is_object(), "calibration file '{}' line {}: not a JSON object (jsonl expected)", path, line_no);
    f(j, line_no);
  }
}

// True when the first non-blank line is a JSON object with an "ids" field: a file of token ids.
bool looks_like_ids(std::string_view text) {
  if (!looks_like_jsonl(text)) return false;
  size_t b = text.find_first_not_of(" \t\n");
  size_t e = text.find('\n', b);
  auto j = nlohmann::json::parse(text.substr(b, e == std::string_view::npos ? text.size() - b : e - b));
  return j.contains("ids");
}

// The "ids" format (header): the first opt.samples lines, the first opt.len ids of each, verbatim.
void read_id_samples(const std::string& path, std::string_view text, const Tokenizer& tok, const CalibOptions& opt,
                     CalibSet& set) {
  set.format = "ids";
  bool all_bos = true;
  for_each_object_line(path, text, [&](const nlohmann::json& j, int64_t line_no) {
    auto it = j.find("ids");
    SINKQ_CHECK(it != j.end() && it->is_array(), "calibration file '{}' line {}: no array field \"ids\"", path,
                line_no);
    ++set.documents;
    SINKQ_CHECK(int64_t(it->size()) >= opt.len,
                "calibration file '{}' line {}: {} token ids, fewer than the {} a sample needs (--calib-len)", path,
                line_no, it->size(), opt.len);
    if (int64_t(set.samples.size()) == opt.samples) return;  // counted, not used
    std::vector<int32_t> s;
    s.reserve(size_t(opt.len));
    for (const auto& v : *it) {
      if (int64_t(s.size()) == opt.len) break;
      SINKQ_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < tok.vocab_size(),
                  "calibration file '{}' line {}: ids[{}] = {} is not a token id of this tokenizer (0..{})", path,
                  line_no, s.size(), v.dump(), tok.vocab_size() - 1);
      s.push_back(int32_t(v.get<int64_t>()));
    }
    all_bos = all_bos && tok.bos_id() >= 0 && s.front() == tok.bos_id();
    set.samples.push_back(std::move(s));
  });
  SINKQ_CHECK(int64_t(set.samples.size()) == opt.samples,
              "calibration file '{}' holds {} samples of token ids; --calib-samples asks for {}", path,
              set.samples.size(), opt.samples);
  set.eligible = set.documents;
  set.bos = all_bos;
}

}  // namespace

// The documents of a file's text (read_documents, after reading).
static std::vector<std::string> documents_of(const std::string& path, const std::string& raw, std::string* format) {
  require_utf8(raw, fmt::format("calibration file '{}'", path));
  const std::string text = lf_text(raw);
  SINKQ_CHECK(!text.empty(), "calibration file '{}' is empty", path);
  std::vector<std::string> docs;
  if (looks_like_jsonl(text)) {
    *format = "jsonl";
    for_each_object_line(path, text, [&](const nlohmann::json& j, int64_t line_no) {
      auto it = j.find("text");
      SINKQ_CHECK(it != j.end() && it->is_string(), "calibration file '{}' line {}: no string field \"text\"", path,
                  line_no);
      docs.push_back(it->get<std::string>());
    });
  } else {
    *format = "text";
    docs.push_back(text);
  }
  return docs;
}

std::vector<std::string> read_documents(const std::string& path, std::string* format) {
  return documents_of(path, read_file(path), format);
}

CalibSet load_calib(const std::string& path, const Tokenizer& tok, const CalibOptions& opt) {
  SINKQ_CHECK(opt.samples >= 1, "calibration: the number of samples must be >= 1 (got {})", opt.samples);
  SINKQ_CHECK(opt.len >= 2, "calibration: the sample length must be >= 2 tokens (got {})", opt.len);
  CalibSet set;
  set.file = path;
  set.options = opt;
  const std::string bytes = read_file(path);  // read once: the ids format or the documents
  if (const std::string text = lf_text(bytes); looks_like_ids(text)) {
    read_id_samples(path, text, tok, opt, set);
    return set;
  }
  set.bos = opt.bos && tok.bos_id() >= 0;
  std::vector<std::string> docs = documents_of(path, bytes, &set.format);
  set.documents = int64_t(docs.size());

  EncodeOptions raw;
  raw.add_special = false;
  raw.parse_special = false;
  const int64_t body = opt.len - (set.bos ? 1 : 0);
  std::vector<std::vector<int32_t>> eligible;
  size_t longest = 0;
  for (const std::string& d : docs) {
    check_interrupt();  // (core/interrupt.h) tokenizing every document takes seconds
    std::vector<int32_t> ids = tok.encode(d, raw);
    longest = std::max(longest, ids.size());
    if (int64_t(ids.size()) >= body) eligible.push_back(std::move(ids));
  }
  set.eligible = int64_t(eligible.size());
  SINKQ_CHECK(!eligible.empty(),
              "calibration file '{}': no document has the {} tokens a sample needs (longest: {} tokens); "
              "use shorter samples",
              path, body, longest);

  std::mt19937_64 rng(opt.seed);
  set.samples.reserve(size_t(opt.samples));
  for (int64_t i = 0; i < opt.samples; ++i) {
    const auto& ids = eligible[size_t(rng() % uint64_t(eligible.size()))];
    const uint64_t starts = uint64_t(int64_t(ids.size()) - body + 1);
    const size_t start = size_t(rng() % starts);
    std::vector<int32_t> s;
    s.reserve(size_t(opt.len));
    if (set.bos) s.push_back(int32_t(tok.bos_id()));
    s.insert(s.end(), ids.begin() + std::ptrdiff_t(start), ids.begin() + std::ptrdiff_t(start + size_t(body)));
    set.samples.push_back(std::move(s));
  }
  return set;
}

}  // namespace sinkq
