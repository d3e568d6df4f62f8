// tests/tokenizer/chat_template_test.cc — the Jinja chat-template interpreter (tokenizer/chat_template.h)
// against Python jinja2 run the way transformers runs it.
//
// Oracles:
//  - tests/data/chat_templates/expected.json (scripts/chat_template_expectations.py): the real
//    templates of 29 model families rendered over 17 conversations (tools, tool calls, multimodal
//    parts, unicode, errors...), plus 118 one-construct snippets; every output must be byte-equal,
//    every raise_exception() message equal, every other Python error an error here too.
//  - ../shared/tokenizers/chat-templates/cases.json: 30 golden renderings of the real Qwen3 and
//    SmolVLM templates made independently (meta-pytorch/tokenizers).
// Then hand-written tests of what jinja2 cannot be asked: error messages with line:column, the
// limits against hostile templates, the API.
#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using sinkq::testing::error_of;
using ojson = nlohmann::ordered_json;

std::string data_dir() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "chat_templates").string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ojson& expectations() {
  static const ojson j = ojson::parse(read_text(data_dir() + "/expected.json"));
  return j;
}

// "2025-03-07T09:05:02" as a std::tm with the weekday and day of year filled in (as Python's
// datetime.timetuple() gives strftime).
std::tm parse_now(const std::string& iso) {
  std::tm tm{};
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

ChatTemplate::Options fixed_options() {
  ChatTemplate::Options opt;
  opt.now = parse_now(expectations()["now"].get<std::string>());
  return opt;
}

// Renders a template text with variables (ordered, as Python dicts) at the fixed time.
std::string render(const std::string& text, const ojson& vars = ojson::object(),
                   const ChatTemplate::Options& opt = fixed_options()) {
  return ChatTemplate(text, "test.jinja").render(vars, opt);
}

// The Python exception type of an "error" expectation ("UndefinedError: ..." -> "UndefinedError").
std::string python_error_type(const std::string& error) { return error.substr(0, error.find(':')); }

// What the error of a failed render must say, given what jinja2 raised: sinkq names the same
// Python exception type, except for errors Python reaches differently (its own recursion limit).
void expect_error_like(const std::string& what, const std::string& python_error, const std::string& context) {
  const std::string type = python_error_type(python_error);
  if (type == "RecursionError") {
    EXPECT_THAT(what, HasSubstr("macro calls nest deeper than")) << context;
  } else {
    EXPECT_THAT(what, HasSubstr(type + ":")) << context << "\npython: " << python_error;
  }
}

// Checks one expectation ({expected|refused|error}) against a render.
void check(const ojson& expect, const std::function<std::string()>& run, const std::string& source,
           const std::string& context) {
  if (expect.contains("expected")) {
    try {
      EXPECT_EQ(run(), expect["expected"].get<std::string>()) << context;
    } catch (const Error& e) {
      ADD_FAILURE() << context << "\nunexpected error: " << e.what();
    }
  } else if (expect.contains("refused")) {
    EXPECT_EQ(error_of(run), source + ": the chat template refused: " + expect["refused"].get<std::string>()) << context;
  } else {
    expect_error_like(error_of(run), expect["error"].get<std::string>(), context);
  }
}

// ------------------------------------------------------------------ real templates vs jinja2

std::vector<std::string> template_files() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(data_dir()))
    if (e.path().extension() == ".jinja") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class ChatTemplateFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFamilies, RendersAsJinja2Does) {
  const std::string file = GetParam();
  const std::string source = "tests/data/chat_templates/" + file;
  const ChatTemplate tpl(read_text(data_dir() + "/" + file), source);
  const ojson& all = expectations();
  const ChatTemplate::Options opt = fixed_options();
  int n = 0;
  for (const ojson& c : all["cases"]) {
    if (c["template"] != file) continue;
    ++n;
    const ojson& conv = all["conversations"][c["conversation"].get<std::string>()];
    ojson vars = ojson::object();
    vars["messages"] = conv["messages"];
    vars["tools"] = conv.contains("tools") ? conv["tools"] : ojson(nullptr);
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    for (const auto& [k, v] : all["special_tokens"][file].items()) vars[k] = v;
    for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    const std::string context = file + " / " + c["conversation"].get<std::string>() +
                                " / add_generation_prompt=" + c["add_generation_prompt"].dump() + " / kwargs " +
                                c["kwargs"].dump();
    check(c, [&] { return tpl.render(vars, opt); }, source, context);
  }
  EXPECT_GE(n, 19) << "expected.json has too few cases for " << file;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplate, ChatTemplateFamilies, ::testing::ValuesIn(template_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.size() - 6);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(ChatTemplateExpectations, CoverTenFamiliesAndHundredsOfCases) {
  EXPECT_GE(template_files().size(), 10u);
  EXPECT_GE(expectations()["cases"].size(), 500u);
  EXPECT_GE(expectations()["snippets"].size(), 100u);
}

// ---------------------------------------------------------------- one-construct snippets vs jinja2

TEST(ChatTemplateSnippets, RenderAsJinja2Does) {
  const ojson& all = expectations();
  const ChatTemplate::Options opt = fixed_options();
  for (const ojson& s : all["snippets"]) {
    const std::string name = s["name"].get<std::string>();
    const std::string text = s["template"].get<std::string>();
    const std::string context = "snippet " + name + ": " + text;
    std::unique_ptr<ChatTemplate> tpl;
    try {
      tpl = std::make_unique<ChatTemplate>(text, name);
    } catch (const Error& e) {
      ADD_FAILURE() << context << "\ndoes not parse: " << e.what();
      continue;
    }
    check(s, [&] { return tpl->render(all["snippet_vars"], opt); }, name, context);
  }
}

// ------------------------------------------------- golden renderings made by someone else

TEST(ChatTemplateSharedCases, QwenAndSmolVlmGoldens) {
  const std::string dir = sinkq::testing::shared_dir() + "/tokenizers/chat-templates";
  const ojson cases = ojson::parse(read_text(dir + "/cases.json"));
  const std::map<std::string, ChatTemplate> templates = {
      {"qwen3", ChatTemplate(read_text(data_dir() + "/qwen3.jinja"), "qwen3.jinja")},
      {"smolvlm", ChatTemplate(read_text(dir + "/smolvlm_chat_template.jinja"), "smolvlm_chat_template.jinja")},
  };
  ASSERT_EQ(cases.size(), 30u);
  for (const ojson& c : cases) {
    ojson vars = ojson::object();
    vars["messages"] = c["messages"];
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    const std::string model = c["model"].get<std::string>();
    EXPECT_EQ(templates.at(model).render(vars), c["expected"].get<std::string>())
        << model << " " << c["messages"].dump() << " " << c["kwargs"].dump();
  }
}

// ------------------------------------------------------------------------------ whitespace

TEST(ChatTemplateWhitespace, TrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("<{% if true %}\n  x\n  {% endif %}\n>"), "<  x\n>");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n  - {{ i }}\n{% endfor %}\n"), "  - 1\n  - 2\n");
  // Expressions are not lstripped; comments are.
  EXPECT_EQ(render("  {{ 'a' }}\n  {# c #}\nb"), "  a\nb");
  // '-' strips all whitespace on its side, newlines included; '+' keeps what trim/lstrip would drop.
  EXPECT_EQ(render("a\n\n  {%- if true -%}\n\n  b  \n  {%- endif %}"), "ab");
  EXPECT_EQ(render("  {%+ if true +%}\nx{% endif %}"), "  \nx");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("a {#- c -#} b"), "ab");
}

TEST(ChatTemplateWhitespace, NewlinesAndRaw) {
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");  // \r\n normalised, one trailing newline dropped
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("{% raw %}{{ not }} {% evaluated %}{% endraw %}"), "{{ not }} {% evaluated %}");
}

// ---------------------------------------------------------------------------- values, API

TEST(ChatTemplateValues, NoneIsNotUndefined) {
  const ojson vars = {{"a", nullptr}};
  EXPECT_EQ(render("{{ a is none }} {{ a is defined }} {{ b is defined }} {{ b is none }} [{{ a }}] [{{ b }}]", vars),
            "True True False False [None] []");
}

TEST(ChatTemplateValues, KeyOrderFollowsTheVariables) {
  // Python dicts keep insertion order and transformers' tojson does not sort: with ordered_json the
  // order is the caller's; nlohmann::json has already sorted its keys.
  const std::string tpl = "{{ t | tojson }}|{% for k, v in t.items() %}{{ k }}{% endfor %}";
  ojson ordered = ojson::object();
  ordered["t"] = ojson::parse(R"({"zeta": 1, "alpha": 2})");
  EXPECT_EQ(render(tpl, ordered), R"({"zeta": 1, "alpha": 2}|zetaalpha)");
  const nlohmann::json sorted = {{"t", {{"zeta", 1}, {"alpha", 2}}}};
  EXPECT_EQ(ChatTemplate(tpl, "t").render(sorted), R"({"alpha": 2, "zeta": 1}|alphazeta)");
}

TEST(ChatTemplateValues, StrftimeNowUsesTheGivenTime) {
  ChatTemplate::Options opt;
  opt.now = parse_now("2024-07-26T13:14:15");
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y %H:%M %A') }}", ojson::object(), opt), "26 Jul 2024 13:14 Friday");
  // Without a time given it is today's date.
  char today[32];
  const std::time_t t = std::time(nullptr);
  std::tm now{};
  localtime_r(&t, &now);
  std::strftime(today, sizeof today, "%Y-%m-%d", &now);
  EXPECT_EQ(ChatTemplate("{{ strftime_now('%Y-%m-%d') }}", "t").render(ojson::object()), today);
}

TEST(ChatTemplateApi, CopiesShareTheParsedTemplateAndRenderConcurrently) {
  const ChatTemplate a("{% for m in messages %}{{ m.content }}{% endfor %}", "a");
  const ChatTemplate b = a;
  EXPECT_EQ(b.source(), "a");
  const ojson vars = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) ok += (i % 2 ? a : b).render(vars) == "x";
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 800);
}

TEST(ChatTemplateApi, VariablesMustBeAnObject) {
  EXPECT_THAT(error_of([] { ChatTemplate("x", "t").render(ojson::array()); }), HasSubstr("must be a JSON object"));
}

// ---------------------------------------------------------------------------------- errors

TEST(ChatTemplateErrors, SyntaxErrorsNameSourceLineAndColumn) {
  EXPECT_THAT(error_of([] { ChatTemplate("line one\n  {% if %}x{% endif %}", "model.gguf"); }),
              StartsWith("model.gguf:2:9: syntax error: expected an expression"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ a | nosuchfilter }}", "t"); }),
              StartsWith("t:1:8: syntax error: no filter named 'nosuchfilter'"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ a is nosuchtest }}", "t"); }), StartsWith("t:1:9: syntax error: no test named"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ a | groupby('x') }}", "t"); }),
              StartsWith("t:1:8: syntax error: the 'groupby' filter is not supported"));
  EXPECT_THAT(error_of([] { ChatTemplate("é\n\n{% include 'x' %}", "t"); }),
              StartsWith("t:3:4: syntax error: the 'include' tag is not supported"));
  EXPECT_THAT(error_of([] { ChatTemplate("a\n{% for x in y %}\nno end", "t"); }),
              StartsWith("t:2:1: syntax error: this 'for' tag is never closed"));
  EXPECT_THAT(error_of([] { ChatTemplate("{# open", "t"); }), StartsWith("t:1:1: syntax error: missing end of comment"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ 'abc }}", "t"); }), StartsWith("t:1:4: syntax error: unterminated string"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ (1 }}", "t"); }), HasSubstr("t:1:7: syntax error: unexpected '}'"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ 1 is == 1 }}", "t"); }), StartsWith("t:1:9: syntax error: expected a name"));
  EXPECT_THAT(error_of([] { ChatTemplate("{% break %}", "t"); }), StartsWith("t:1:4: syntax error: 'break' outside a for loop"));
  EXPECT_THAT(error_of([] { ChatTemplate("{% endif %}", "t"); }), StartsWith("t:1:4: syntax error: unknown tag 'endif'"));
  EXPECT_THAT(error_of([] { ChatTemplate("{% set true = 1 %}", "t"); }), HasSubstr("cannot assign to 'true'"));
  EXPECT_THAT(error_of([] { ChatTemplate("{{ x", "t"); }), HasSubstr("expected '}}'"));
  EXPECT_THAT(error_of([] { ChatTemplate(std::string("{{ '\xff' }}"), "t"); }), HasSubstr("t: the chat template is not valid UTF-8"));
}

TEST(ChatTemplateErrors, RaiseExceptionIsARefusal) {
  const ChatTemplate tpl(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user message') }}{% endif %}ok",
      "gemma.gguf: tokenizer.chat_template");
  EXPECT_EQ(tpl.render(ojson{{"messages", {{{"role", "user"}}}}}), "ok");
  EXPECT_EQ(error_of([&] { tpl.render(ojson{{"messages", {{{"role", "assistant"}}}}}); }),
            "gemma.gguf: tokenizer.chat_template: the chat template refused: Conversation must start with a user message");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheExpression) {
  EXPECT_EQ(error_of([] { render("{{ 1 }}\n  {{ 'a' + 1 }}"); }),
            "test.jinja:2:10: TypeError: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of([] { render("{{ nope.attr }}"); }), "test.jinja:1:8: UndefinedError: 'nope' is undefined");
  EXPECT_EQ(error_of([] { render("{{ messages[0].role }}", ojson{{"messages", ojson::array()}}); }),
            "test.jinja:1:15: UndefinedError: list object has no element 0");
  EXPECT_EQ(error_of([] { render("{% for x in 3 %}{% endfor %}"); }), "test.jinja:1:13: TypeError: 'int' object is not iterable");
  EXPECT_EQ(error_of([] { render("{{ [1].append(2) }}"); }),
            "test.jinja:1:14: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
}

// ---------------------------------------------------------------------------------- limits

ChatTemplate::Options small_limits() {
  ChatTemplate::Options opt = fixed_options();
  opt.limits.max_output_bytes = 1 << 20;
  opt.limits.max_steps = 100'000;
  opt.limits.max_work_bytes = 64 << 20;
  return opt;
}

TEST(ChatTemplateLimits, OutputSize) {
  EXPECT_THAT(error_of([] { render("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", ojson::object(), small_limits()); }),
              HasSubstr("the output would exceed 1048576 bytes (the limit)"));
  EXPECT_THAT(error_of([] { render("{{ 'abc' * 1000000000000 }}", ojson::object(), small_limits()); }),
              HasSubstr("a string longer than 1048576 bytes"));
  // A %-format width is padding the template asks for: the same limit, before any allocation.
  EXPECT_THAT(error_of([] { render("{{ '%999999999999s' % 'x' }}", ojson::object(), small_limits()); }),
              HasSubstr("a string longer than 1048576 bytes"));
  // The default limit is 64 MiB: doubling a string runs into it quickly.
  EXPECT_THAT(error_of([] {
                render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
              }),
              HasSubstr("a string longer than 67108864 bytes"));
}

TEST(ChatTemplateLimits, LoopIterations) {
  // 10^10 iterations if let run; stopped at the step limit.
  EXPECT_THAT(error_of([] {
                render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ojson::object(),
                       small_limits());
              }),
              HasSubstr("more than 100000 loop iterations and macro calls (the limit)"));
}

TEST(ChatTemplateLimits, QuadraticWork) {
  // Each step copies a growing string: 100000 steps of ~1 MB would be 10^11 bytes of copying.
  EXPECT_THAT(error_of([] {
                render("{% set ns = namespace(s='x' * 500000) %}{% for i in range(90000) %}{% set ns.s = ns.s[1:] + 'y' %}{% endfor %}",
                       ojson::object(), small_limits());
              }),
              HasSubstr("bytes of strings and lists (the limit)"));
  EXPECT_THAT(error_of([] {
                render("{% set ns = namespace(l=[]) %}{% for i in range(90000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                       ojson::object(), small_limits());
              }),
              HasSubstr("(the limit)"));
  // Scans build nothing but are charged too: 90000 searches of a 1 MB string would be 9*10^10 bytes.
  EXPECT_THAT(error_of([] {
                render("{% set s = 'x' * 1000000 %}{% for i in range(90000) %}{{ 'y' in s }}{% endfor %}", ojson::object(),
                       small_limits());
              }),
              HasSubstr("bytes of strings and lists (the limit)"));
  EXPECT_THAT(error_of([] {
                render("{% set l = range(90000) | list %}{% for i in range(90000) %}{{ l.count(5) }}{% endfor %}",
                       ojson::object(), small_limits());
              }),
              HasSubstr("bytes of strings and lists (the limit)"));
  // unique is a hash set, not a quadratic scan.
  EXPECT_EQ(render("{{ range(100000) | unique | list | length }}|{{ [1, 1.0, true, '1', 2.5, 2.5] | unique | list }}"),
            "100000|[1, '1', 2.5]");
}

TEST(ChatTemplateLimits, RecursionDepth) {
  EXPECT_THAT(error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }),
              HasSubstr("macro calls nest deeper than 100 (the limit)"));
  // Nesting in the source text.
  EXPECT_THAT(error_of([] { ChatTemplate("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "t"); }),
              HasSubstr("nests deeper than"));
  EXPECT_THAT(error_of([] {
                std::string t;
                for (int i = 0; i < 5000; ++i) t += "{% if true %}";
                ChatTemplate(t, "t");
              }),
              HasSubstr("nests deeper than"));
  // Nesting in values: lists, through namespaces, and in the variables.
  EXPECT_THAT(error_of([] {
                render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}");
              }),
              HasSubstr("nest deeper than 256 levels"));
  EXPECT_THAT(error_of([] {
                render("{% set ns = namespace(n=none) %}{% for i in range(100000) %}{% set ns.n = namespace(n=ns.n) %}{% endfor %}{{ ns }}");
              }),
              HasSubstr("nests deeper than 512 levels to print"));
  ojson deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ojson::array({deep});
  EXPECT_THAT(error_of([&] { render("{{ x }}", ojson{{"x", deep}}); }), HasSubstr("the variables nest deeper than 256"));
  // A namespace that holds itself prints like Python's reprlib guard and is freed after the render.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"), "<Namespace {'me': [<Namespace {...}>]}>");
}

TEST(ChatTemplateLimits, RealTemplatesStayFarBelowThem) {
  // A long conversation through a template that loops over messages twice and over its tools.
  ojson messages = ojson::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message " + std::to_string(i)}});
  const ChatTemplate tpl(read_text(data_dir() + "/qwen3.jinja"), "qwen3.jinja");
  const std::string out = tpl.render(ojson{{"messages", messages}, {"add_generation_prompt", true}});
  EXPECT_THAT(out, HasSubstr("message 1999<|im_end|>\n<|im_start|>assistant\n"));
}

// ------------------------------------------------------------------------------ robustness

// A cheap fuzzer: real templates cut, spliced and byte-flipped, rendered with a tool-calling
// conversation and small limits, must render or throw sinkq::Error — never crash, hang or throw
// anything else (scripts/sanitize.sh runs this under ASan/UBSan).
TEST(ChatTemplateRobustness, MutatedRealTemplatesFailCleanly) {
  std::vector<std::string> texts;
  for (const std::string& f : template_files()) texts.push_back(read_text(data_dir() + "/" + f));
  const ojson& all = expectations();
  ojson vars = ojson::object();
  vars["messages"] = all["conversations"]["tool_calls"]["messages"];
  vars["tools"] = all["conversations"]["tool_calls"]["tools"];
  vars["add_generation_prompt"] = true;
  vars["bos_token"] = "<s>";
  ChatTemplate::Options opt = fixed_options();
  opt.limits.max_output_bytes = 1 << 16;
  opt.limits.max_steps = 20'000;
  opt.limits.max_work_bytes = 8 << 20;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto rnd = [&](size_t n) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<size_t>(state % n);
  };
  static constexpr const char* kPieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"",
                                            "|", ".", ",", " if ", " endif ", " for x in ", "loop.", "ns.", "\n"};
  int rendered = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = texts[rnd(texts.size())];
    const int edits = 1 + static_cast<int>(rnd(4));
    for (int e = 0; e < edits && !t.empty(); ++e) {
      const size_t at = rnd(t.size());
      switch (rnd(5)) {
        case 0: t.erase(at, 1 + rnd(20)); break;
        case 1: t.insert(at, kPieces[rnd(std::size(kPieces))]); break;
        case 2: t[at] = static_cast<char>(rnd(128)); break;
        case 3: t = t.substr(0, at); break;
        default: {
          const std::string& other = texts[rnd(texts.size())];
          const size_t from = rnd(other.size());
          t.insert(at, other.substr(from, rnd(200)));
        }
      }
    }
    try {
      ChatTemplate tpl(t, "mutant");
      tpl.render(vars, opt);
      ++rendered;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_EQ(rendered + refused, 3000);
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace sinkq
