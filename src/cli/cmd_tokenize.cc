// sinkq tokenize -m DIR --text STR [--no-special] [--json]
#include <fmt/format.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_tokenize(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string text;
    bool no_special = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Text to token ids (BOS as the tokenizer config says)");
  add_model_flag(*cmd, *o);
  cmd->add_option("--text", o->text, "Text to tokenize")->required();
  cmd->add_flag("--no-special", o->no_special, "Do not add BOS/EOS and do not parse special tokens in the text");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    const auto tok = Tokenizer::load(o->model);
    EncodeOptions eo;
    eo.add_special = eo.parse_special = !o->no_special;
    const std::vector<int32_t> ids = tok->encode(o->text, eo);
    if (o->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(tok->token_text(id));
      print_json({{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}});
      return;
    }
    for (int32_t id : ids) fmt::print("{:>7}  {:?}\n", id, tok->token_text(id));
    fmt::print("{} tokens\n", ids.size());
  });
}

}  // namespace sinkq::cli
