// sinkq/tokenizer/chat_template.h — a model's own chat template (the Jinja2 text in a GGUF file's
// tokenizer.chat_template or tokenizer_config.json's chat_template), parsed once and rendered per
// conversation into the prompt text, byte for byte as Hugging Face transformers renders it.
//
// transformers compiles a chat template with jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]) plus its own {% generation %} tag, the globals
// raise_exception(msg) and strftime_now(fmt), and a tojson filter that is json.dumps (no HTML
// escaping, keys in insertion order). This is a small interpreter of the part of that language
// chat templates use, with Python's semantics for values (str/repr printing, ints and floats,
// dict order, code-point string indexing):
//  - text, {{ expr }}, {# comments #}, {% raw %}; whitespace control {%- -%} {{- -}} {#- -#} and
//    {%+ +%}; trim_blocks and lstrip_blocks.
//  - {% if/elif/else %}, {% for x in xs [if cond] %}...{% else %}...{% endfor %} with loop.index,
//    index0, revindex, revindex0, first, last, length, previtem, nextitem, cycle(); tuple unpacking
//    (for k, v in d.items()); {% break %} / {% continue %}; {% set x = ... %}, {% set a, b = ... %},
//    {% set ns.attr = ... %} on namespace(...), block {% set x %}...{% endset %}; {% macro %} (with
//    defaults, keyword arguments, recursion); {% filter %}; {% with %}; {% generation %}.
//  - literals (strings with Python escapes, ints, floats, true/false/none in either case, lists,
//    tuples, dicts); + - * / // % ** ~; == != < <= > >= (chained); and or not; in / not in;
//    x if c else y; .attr, [index], negative indices, slices [a:b:c]; calls.
//  - tests: defined undefined none boolean true false integer float number string mapping iterable
//    sequence callable odd even divisibleby eq/equalto/== ne/!= lt/< le/<= gt/> ge/>= in lower
//    upper sameas escaped.
//  - filters: abs attr capitalize center count d/default dictsort e/escape first float format indent
//    int items join last length list lower map max min reject rejectattr replace reverse round safe
//    select selectattr sort string sum title tojson trim unique upper wordcount.
//  - str methods (strip lstrip rstrip split rsplit splitlines startswith endswith upper lower title
//    capitalize replace find rfind index rindex count join format center ljust rjust zfill
//    removeprefix removesuffix partition rpartition isdigit isalpha isalnum isspace islower isupper),
//    dict methods (items keys values get copy), list methods (count index copy); globals range
//    namespace dict raise_exception strftime_now.
// Undefined is jinja2's default Undefined: a missing variable, key or index prints as "", is false,
// iterates as empty and passes `is defined` as false, but any other use (an attribute or item of
// it, arithmetic, a call, tojson) is an error, as in transformers. The safe and escape filters make
// markupsafe Markup strings, and a plain str concatenated to one is HTML-escaped (Mistral's own
// template depends on it).
// Not supported (the constructor names the line and column): {% include/import/extends/block/call %},
// recursive loops, *args/**kwargs in calls, the filters batch, groupby, slice, truncate, wordwrap,
// urlize, xmlattr, pprint, random, striptags, filesizeformat, urlencode, forceescape.
// Differences from Python that real templates do not reach: ints are 64-bit (overflow is an
// error); d.items(), range(), map(), reverse print as lists, not as views or generators.
//
// How to call it: build the template once per model, then render each conversation with the same
// variables transformers' apply_chat_template passes —
//   ChatTemplate tpl(tokenizer.chat_template(), "model.gguf: tokenizer.chat_template");
//   nlohmann::ordered_json vars = {{"messages", messages}, {"tools", nullptr}, {"documents", nullptr},
//                                  {"add_generation_prompt", true}, {"bos_token", "<s>"},
//                                  {"eos_token", "</s>"}};  // + any kwargs (enable_thinking, ...)
//   std::string prompt = tpl.render(vars);
// messages is an array of {"role", "content", ...} objects (content may also be a list of parts,
// tool_calls may be present); transformers always passes tools and documents (null when absent),
// and the tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token) by name. Prefer
// nlohmann::ordered_json: tojson prints dict keys in the order given, as Python does, and
// nlohmann::json sorts them. Errors throw sinkq::Error: "<source>:<line>:<col>: ..." for syntax
// errors, unsupported constructs and runtime errors (an undefined variable used in arithmetic,
// a TypeError, a limit), and "<source>: the chat template refused: <msg>" when the template calls
// raise_exception(msg) (e.g. roles that do not alternate). The object is immutable after
// construction: render() may be called from several threads at once.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sinkq {

class ChatTemplate {
 public:
  // Resource limits of one render (a hostile template gets a clear error, not a hang or a crash).
  struct Limits {
    size_t max_output_bytes = size_t{64} << 20;    // the prompt, and any one string built on the way
    uint64_t max_steps = 10'000'000;               // loop iterations + macro calls
    uint64_t max_work_bytes = uint64_t{1} << 30;   // bytes of strings, lists and dicts built in total
    int max_call_depth = 100;                      // nested macro calls
    int max_nesting = 256;                         // lists / dicts inside each other (variables too)
  };
  struct Options {
    std::optional<std::tm> now;  // what strftime_now() formats (default: the local time now)
    Limits limits;
  };

  // Throws sinkq::Error naming `source` with line:column for syntax errors and unsupported constructs.
  ChatTemplate(std::string_view text, std::string source);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the given variables (a JSON object: messages (array of {role, content, ...}),
  // add_generation_prompt, bos_token, eos_token, tools, anything else the caller passes).
  // raise_exception('msg') -> sinkq::Error "<source>: the chat template refused: msg".
  std::string render(const nlohmann::json& vars) const;
  std::string render(const nlohmann::ordered_json& vars) const;
  std::string render(const nlohmann::json& vars, const Options& opt) const;
  std::string render(const nlohmann::ordered_json& vars, const Options& opt) const;

  const std::string& source() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace sinkq
