#include "tokenizer/pcre_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace sinkq::tok {
namespace {

// The JIT machine stack defaults to 32 KiB, which `\s+(?!\S)` over a long run of spaces can
// exhaust; each thread gets its own larger stack (PCRE2 stacks must not be shared concurrently).
struct ThreadMatchContext {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchContext() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchContext() {
    if (stack) pcre2_jit_stack_free(stack);
    if (ctx) pcre2_match_context_free(ctx);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf), size_t(n));
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, const std::string& where) : pattern_(pattern), where_(where) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // PCRE2_LITERAL admits only a few other options (UCP is not one of them, nor needed).
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts,
                                   &err, &err_off, nullptr);
  if (!code) {
    fail("{}: invalid regex '{}' at offset {}: {}", where, pattern, size_t(err_off), pcre2_message(err));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // failure is fine: the interpreter is used then
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  thread_local ThreadMatchContext tmc;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  SINKQ_CHECK(md != nullptr, "out of memory creating PCRE2 match data");
  std::vector<std::pair<size_t, size_t>> out;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The caller guarantees valid UTF-8, so skip PCRE2's O(n) check on every call.
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, tmc.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("{}: regex '{}' failed on the input at byte {} of {} (the text being tokenized): {}", where_, pattern_,
           pos, text.size(), pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {  // empty match: step over one whole UTF-8 character
      pos = b + 1;
      while (pos < text.size() && (uint8_t(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace sinkq::tok
