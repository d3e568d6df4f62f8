#include "cli/runnable.h"

#include <algorithm>

#include "core/mmap.h"
#include "runtime/artifact.h"

namespace sinkq::cli {

Runnable load_runnable(const std::string& dir) {
  Runnable r;
  std::shared_ptr<const Tokenizer> tok = Tokenizer::load(dir);
  r.tokenizer = tok;
  if (!runtime::is_artifact(dir)) {
    r.model = Model::load(dir);
    r.attach = [](Forward&) {};
    r.description = "model " + dir;
    return r;
  }
  auto qm = std::make_shared<const runtime::QuantizedModel>(runtime::load_artifact(dir));
  r.model = qm->model;
  r.prefix = qm->prefix;
  r.is_artifact = true;
  r.attach = [qm](Forward& f) { qm->attach(f); };
  r.description = "artifact " + dir + ": " + qm->describe();
  r.recipe = nlohmann::json::parse(read_file(dir + "/sinkq_recipe.json"));
  if (qm->prefix) {
    const auto& t = qm->prefix->tokens();
    r.prefix_has_bos = tok->bos_id() >= 0 && std::find(t.begin(), t.end(), tok->bos_id()) != t.end();
  }
  return r;
}

}  // namespace sinkq::cli
