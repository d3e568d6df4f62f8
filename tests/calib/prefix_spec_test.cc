// tests/eval/prefix_spec_test.cc — --prefix values and system prompts (calib/prefix.h).
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

TEST(PrefixSpec, RendersTheSystemTurnOfKnownTemplates) {
  testing::TempDir d;
  auto write_template = [&](const std::string& tpl) {
    std::ofstream(d.file("tokenizer_config.json")) << nlohmann::json{{"chat_template", tpl}}.dump();
  };
  write_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
  EXPECT_EQ(render_system_prompt(d.path(), "Be brief."), "<|im_start|>system\nBe brief.<|im_end|>\n");
  write_template("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>...");
  EXPECT_EQ(render_system_prompt(d.path(), "Be brief."),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>");
  write_template("{% if messages[0]['role'] == 'system' %}<<SYS>>\n{% endif %}[INST] ...");
  EXPECT_EQ(render_system_prompt(d.path(), "Be brief."), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n");
  write_template("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");  // Mistral: no system role
  EXPECT_NE(error_of([&] { render_system_prompt(d.path(), "x"); }).find("not one sinkq can render"), std::string::npos);
}

// Whole conversations: the ChatML cases of ../shared/tokenizers/chat-templates/cases.json (Qwen3's
// template rendered by transformers; the plain ones, without thinking switches) exactly, and the
// Llama-2 / Llama-3 layouts as their templates write them.
// A ChatML template's default system turn is written when the conversation has none, as
// transformers renders SmolLM2's template (its GGUF's text, newline literal) and Qwen2's (the
// Jinja escape \n); a given system message replaces it; a template without one adds nothing.
TEST(RenderChat, ChatMLDefaultSystemTurn) {
  const std::string smol =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(render_chat(smol, "smol", {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(smol, "smol", {{"system", "S"}, {"user", "Hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  const std::string qwen2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
      "You are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
  EXPECT_EQ(render_chat(qwen2, "qwen2", {{"user", "Hi"}}, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(chat_end_of_turn(qwen2), "<|im_end|>");
  EXPECT_EQ(chat_end_of_turn("<|start_header_id|>"), "<|eot_id|>");
  EXPECT_EQ(chat_end_of_turn("<<SYS>>"), "");
}

TEST(RenderChat, ConversationsOfKnownTemplates) {
  const nlohmann::json cases =
      nlohmann::json::parse(read_file(testing::shared_dir() + "/tokenizers/chat-templates/cases.json"));
  int checked = 0;
  for (const nlohmann::json& c : cases) {
    if (c["model"] != "qwen3" || !c["kwargs"].empty()) continue;
    std::vector<ChatMessage> msgs;
    for (const nlohmann::json& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
    EXPECT_EQ(render_chat("<|im_start|>", "qwen3", msgs, c["add_generation_prompt"]), c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  const std::vector<ChatMessage> conv = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  EXPECT_EQ(render_chat("<<SYS>>", "t", conv, true), "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  EXPECT_EQ(render_chat("<<SYS>>", "t", {{"user", "U"}}, true), "[INST] U [/INST]");
  EXPECT_EQ(render_chat("<|start_header_id|>", "t", {{"user", "U"}}, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
  EXPECT_NE(error_of([&] { render_chat("<|im_start|>", "t", {{"user", "U"}, {"system", "S"}}, false); }).find("role 'system'"),
            std::string::npos);
}

}  // namespace
}  // namespace sinkq
