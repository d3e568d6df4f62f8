// A sinkq serve on a free port of 127.0.0.1 for the server tests, and the models they serve.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <memory>
#include <string>

#include "server/server.h"
#include "sinkq/engine.h"
#include "util/testutil.h"

namespace sinkq::server {

using nlohmann::json;

inline std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
inline std::string smol() { return testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }

inline const std::shared_ptr<const Engine>& stories_engine() {
  static const auto e = Engine::open(stories());
  return e;
}
inline const std::shared_ptr<const Engine>& smol_engine() {
  static const auto e = Engine::open(smol());
  return e;
}

// A server on a free port, serving on its own thread until destroyed.
struct Running {
  std::unique_ptr<Server> srv;
  int port = 0;
  std::future<void> done;
  Running(std::shared_ptr<const Engine> e, ServerOptions o) {
    o.port = 0;
    o.log_requests = false;
    srv = std::make_unique<Server>(std::move(e), o);
    port = srv->bind();
    done = std::async(std::launch::async, [s = srv.get()] { s->run(); });
  }
  ~Running() {
    srv->stop();
    done.wait();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120);
    return c;
  }
  json post(const std::string& path, const json& body, int want_status = 200) const {
    auto r = client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body);
  }
  json get(const std::string& path) const {
    auto r = client().Get(path.c_str());
    EXPECT_TRUE(r && r->status == 200) << path;
    return r && r->get_header_value("Content-Type") == "application/json" ? json::parse(r->body) : json(r ? r->body : "");
  }
};

}  // namespace sinkq::server
