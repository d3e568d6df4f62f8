// tests/eval/prefix_spec_test.cc — --prefix values and system prompts (calib/prefix.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "calib/prefix.h"
#include "core/mmap.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using testing::error_of;

TEST(PrefixSpec, ParsesEveryForm) {
  EXPECT_EQ(parse_prefix_spec("bos").kind, PrefixSpec::Kind::Bos);
  EXPECT_EQ(parse_prefix_spec("auto").kind, PrefixSpec::Kind::Auto);
  const PrefixSpec ids = parse_prefix_spec("ids:1,13,29889");
  EXPECT_EQ(ids.kind, PrefixSpec::Kind::Ids);
  EXPECT_EQ(ids.ids, (std::vector<int32_t>{1, 13, 29889}));
  const PrefixSpec sys = parse_prefix_spec("system:You are helpful.");
  EXPECT_EQ(sys.kind, PrefixSpec::Kind::System);
  EXPECT_EQ(sys.text, "You are helpful.");
  EXPECT_EQ(parse_prefix_spec("text:A: b").text, "A: b");
  EXPECT_EQ(parse_prefix_spec("text:Hello there").kind, PrefixSpec::Kind::Text);
  // Bare text is an error (a mistyped keyword would otherwise become a text prefix), and the
  // message shows the text: spelling.
  EXPECT_NE(error_of([] { parse_prefix_spec("wat"); }).find("text:wat"), std::string::npos);
  for (const char* bad : {"", "ids:", "ids:1,x", "ids:-3", "system:", "text:", "wat", "bso", "Hello there"})
    EXPECT_NE(error_of([&] { parse_prefix_spec(bad); }).find("--prefix"), std::string::npos) << bad;
}

TEST(PrefixSpec, TokensOfEachKind) {
  const std::string dir = testing::shared_dir() + "/models/stories260K";
  const auto tok = Tokenizer::load(dir);
  EXPECT_EQ(prefix_tokens(parse_prefix_spec("bos"), *tok, dir), (std::vector<int32_t>{1}));
  EXPECT_EQ(prefix_tokens(parse_prefix_spec("ids:1,13"), *tok, dir), (std::vector<int32_t>{1, 13}));
  EXPECT_NE(error_of([&] { prefix_tokens(parse_prefix_spec("ids:1,512"), *tok, dir); }).find("vocabulary"),
            std::string::npos);
  const auto text = prefix_tokens(parse_prefix_spec("text:Once upon a time"), *tok, dir);
  ASSERT_GT(text.size(), 1u);
  EXPECT_EQ(text[0], 1);  // the tokenizer's own BOS (add_bos_token true)
  // stories260K has no chat template: system: says so and points at text:.
  EXPECT_NE(error_of([&] { prefix_tokens(parse_prefix_spec("system:Be nice."), *tok, dir); }).find("text:"),
            std::string::npos);
}

// Llama-2-chat's tokenizer_config.json template (the one-line original; the file in
// tests/data/chat_templates is an indented copy whose whitespace renders too).
const char* const kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

std::string real_template(const std::string& name) {
  return read_file(std::string(SINKQ_SOURCE_DIR) + "/tests/data/chat_templates/" + name + ".jinja");
}

// IntactKV[P]'s system part from real templates (tests/data/chat_templates, rendered by the
// tokenizer's chat-template interpreter, itself checked against jinja2 in tests/tokenizer): the
// system message alone where conversations start with it, else their common head.
TEST(PrefixSpec, RendersTheSystemPartOfRealTemplates) {
  testing::TempDir d;
  auto write_template = [&](const std::string& tpl) {
    std::ofstream(d.file("tokenizer_config.json")) << nlohmann::json{{"chat_template", tpl}}.dump();
  };
  write_template(real_template("smollm2-135m-instruct"));
  EXPECT_EQ(render_system_prompt(d.path(), "Be brief."), "<|im_start|>system\nBe brief.<|im_end|>\n");
  const ChatSpecials llama3{"<|begin_of_text|>", "<|eot_id|>"};
  const std::string l3 = render_system_prompt_with(real_template("llama-3.1-8b-instruct"), "t", "Be brief.", llama3);
  EXPECT_EQ(l3.rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n", 0), 0u) << l3;
  EXPECT_EQ(l3.substr(l3.size() - 19), "Be brief.<|eot_id|>");
  // Llama-2 opens its first [INST] with the system part; Gemma 3 puts it in the first user turn.
  const ChatSpecials llama2{"<s>", "</s>"};
  EXPECT_EQ(render_system_prompt_with(kLlama2, "t", "Be brief.", llama2),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n");
  EXPECT_EQ(render_system_prompt_with(real_template("gemma-3-it"), "t", "Be brief.", {"<bos>", "<eos>"}),
            "<bos><start_of_turn>user\nBe brief.\n\n");
  // Gemma 2's template refuses a system role: its refusal is the error.
  EXPECT_THAT(error_of([&] { render_system_prompt_with(real_template("gemma-2-2b-it"), "t", "x", {"<bos>", ""}); }),
              ::testing::HasSubstr("System role not supported"));
  // A template that drops the system message.
  write_template("{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]{% endif %}{% endfor %}");
  EXPECT_THAT(error_of([&] { render_system_prompt(d.path(), "x"); }), ::testing::HasSubstr("no system part"));
}

// Whole conversations through real templates, and the end-of-turn markup each writes.
TEST(RenderChat, RealTemplates) {
  const std::string smol = real_template("smollm2-135m-instruct");
  // SmolLM2's default system turn when the conversation has none; a given one replaces it.
  EXPECT_EQ(render_chat(smol, "smol", {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(smol, "smol", {{"system", "S"}, {"user", "Hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  const std::vector<ChatMessage> conv = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  EXPECT_EQ(render_chat(kLlama2, "t", conv, true, {"<s>", "</s>"}),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  EXPECT_EQ(render_chat(real_template("gemma-2-2b-it"), "t", {{"user", "U"}}, true, {"<bos>", "<eos>"}),
            "<bos><start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(chat_end_of_turn(smol), "<|im_end|>");
  EXPECT_EQ(chat_end_of_turn(real_template("llama-3.1-8b-instruct"), {"<|begin_of_text|>", "<|eot_id|>"}), "<|eot_id|>");
  EXPECT_EQ(chat_end_of_turn(real_template("gemma-3-it"), {"<bos>", "<eos>"}), "<end_of_turn>");
  EXPECT_EQ(chat_end_of_turn(real_template("phi-3.5-mini-instruct"), {"<s>", "<|endoftext|>"}), "<|end|>");
  EXPECT_EQ(chat_end_of_turn(kLlama2, {"<s>", "</s>"}), "</s>");
  // A template that refuses the conversation: its own message, naming the source.
  EXPECT_THAT(error_of([&] { render_chat(kLlama2, "t", {{"assistant", "A"}}, true, {"<s>", "</s>"}); }),
              ::testing::HasSubstr("t: the chat template refused"));
}

}  // namespace
}  // namespace sinkq
