// The library API (include/sinkq/engine.h): one Engine over a model directory (simulated), a GGUF
// file and an artifact (packed); several sessions over one engine — interleaved and on two threads
// at once — give exactly the logits of one session alone; logprobs are the teacher-forced
// log-softmax; generation streams, stops on request, and equals eval::generate on a bare Forward.
#include "sinkq/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "runtime/artifact.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using ::testing::HasSubstr;
using testing::bit_equal;
using testing::error_of;
using testing::prompt;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string smol_gguf() { return testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }

std::vector<float> last_logits(Session& s, const std::vector<int32_t>& toks) {
  s.reset();
  const auto l = s.eval(toks);
  return {l.begin(), l.end()};
}

// A simulated W4A8KV4 + [BOS] prefix engine and its packed artifact; the same with the int8 head
// (quant/recipe.h HeadSim).
struct Engines {
  std::shared_ptr<const Engine> sim, packed, sim_head, packed_head;
  testing::TempDir tmp;
  Engines() {
    for (const bool head : {false, true}) {
      OpenOptions oo;
      oo.recipe = quant::Recipe::from_preset(head ? "w4a8kv4-head8" : "w4a8kv4");
      oo.recipe->prefix.spec = "bos";
      const std::string art = tmp.file(head ? "art-head" : "art");
      (head ? sim_head : sim) = Engine::open(stories(), oo);
      runtime::write_artifact((head ? sim_head : sim)->pack(), stories(), art);
      (head ? packed_head : packed) = Engine::open(art);
    }
  }
};
Engines& engines() {
  static Engines e;
  return e;
}

TEST(Engine, OpensModelsAndArtifacts) {
  const Engines& e = engines();
  EXPECT_EQ(e.sim->runtime(), Engine::Runtime::Simulated);
  EXPECT_EQ(e.packed->runtime(), Engine::Runtime::Packed);
  EXPECT_EQ(e.sim->prefix_tokens(), std::vector<int32_t>{1});
  EXPECT_EQ(e.packed->prefix_tokens(), e.sim->prefix_tokens());
  EXPECT_TRUE(e.sim->prefix_has_bos());
  // Behind a [BOS] prefix a prompt gets no BOS of its own; without one it does.
  EXPECT_NE(e.sim->encode_prompt("Once upon a time").front(), 1);
  EXPECT_EQ(Engine::open(stories())->encode_prompt("Once upon a time").front(), 1);
  EXPECT_EQ(e.packed->recipe().describe(), e.sim->recipe().describe());
  EXPECT_THAT(e.packed->describe(), HasSubstr("artifact"));
  EXPECT_EQ(e.packed->config_json().at("recipe").at("format"), "sinkq-artifact");
  EXPECT_TRUE(e.sim->config_json().contains("weights"));
  // An artifact takes no recipe; a session must fit behind the prefix.
  OpenOptions oo;
  oo.recipe = quant::Recipe::from_preset("w8a8");
  EXPECT_THAT(error_of([&] { Engine::open(e.tmp.file("art"), oo); }), HasSubstr("already quantized"));
  EXPECT_THAT(error_of([&] { e.sim->new_session(e.sim->config().max_position_embeddings); }),
              HasSubstr("and a 1-token prefix"));
  const Engine::Preview pv = Engine::preview(e.tmp.file("art"));
  EXPECT_TRUE(pv.artifact);
  EXPECT_EQ(pv.prefix_min, 1);
  // A GGUF file opens like a directory.
  const auto g = Engine::open(smol_gguf());
  EXPECT_EQ(g->config().num_layers, 30);
  EXPECT_EQ(Engine::preview(smol_gguf()).max_position, g->config().max_position_embeddings);
}

// Sessions share the weights and nothing else: interleaving two sessions, or running them on two
// threads at once, gives bit for bit the logits of a session that ran alone.
TEST(Engine, SessionsAreIndependent) {
  for (const auto& eng : {engines().sim, engines().packed}) {
    SCOPED_TRACE(eng->runtime_name());
    const auto a = prompt(24, 1), b = prompt(31, 2);
    // Alone: each prompt whole (for the threads below) and token by token (for the interleaving:
    // a prompt and single tokens run different kernels — sgemm against the GEMV above gemv_max_t
    // tokens — whose summation orders differ, which a 4-bit code can turn into a visible change).
    std::vector<float> want_a, want_b, step_a, step_b;
    auto token_by_token = [](Session& s, const std::vector<int32_t>& p) {
      s.reset();
      std::span<const float> l;
      for (size_t i = 0; i < p.size(); ++i) l = s.eval(std::span(&p[i], 1));
      return std::vector<float>(l.begin(), l.end());
    };
    {
      auto s = eng->new_session(64);
      want_a = last_logits(*s, a);
      want_b = last_logits(*s, b);
      step_a = token_by_token(*s, a);
      step_b = token_by_token(*s, b);
    }
    // One token at a time and a whole prompt sum in different orders: loosely equal. Measured
    // <= 1e-4 until a 4-bit KV code flips at a rounding boundary; one flip moved b's logits by
    // 0.038 of the largest (AVX2 path). 0.1 still fails a session that lost or mixed its cache.
    EXPECT_LE(testing::rel_diff(step_a, want_a), 0.1);
    EXPECT_LE(testing::rel_diff(step_b, want_b), 0.1);
    {
      auto s = eng->new_session(64);  // b's last token without its context: far outside that bound
      EXPECT_GT(testing::rel_diff(token_by_token(*s, {b.back()}), step_b), 0.1);
    }
    auto s1 = eng->new_session(64), s2 = eng->new_session(64);
    // Interleaved, token by token: exactly what each got alone.
    s1->reset();
    s2->reset();
    std::span<const float> l1, l2;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size()) l1 = s1->eval(std::span(&a[i], 1));
      if (i < b.size()) l2 = s2->eval(std::span(&b[i], 1));
    }
    EXPECT_EQ(s1->n_past(), int64_t(a.size()));
    EXPECT_TRUE(bit_equal(std::vector<float>(l1.begin(), l1.end()), step_a));
    EXPECT_TRUE(bit_equal(std::vector<float>(l2.begin(), l2.end()), step_b));
    // Two threads, each its own session, at the same time.
    std::vector<float> got_a, got_b;
    std::thread t1([&] { got_a = last_logits(*s1, a); });
    std::thread t2([&] { got_b = last_logits(*s2, b); });
    t1.join();
    t2.join();
    EXPECT_TRUE(bit_equal(got_a, want_a));
    EXPECT_TRUE(bit_equal(got_b, want_b));
  }
}

// Forward::step_batch (continuous batching in sinkq serve): one decode step of several sessions
// together gives each the logits it gets stepping alone — on the plain fp32 model, the simulated
// W4A8KV4 engine (per-sequence fake-quant hooks on each row, a [BOS] prefix) and its artifact
// (packed linears, packed KV store, prefix), each also with the int8 head (its head_in hook per
// row; the packed W8A8 head over the batch) — whichever sessions are in the batch, and leaves the
// caches where stepping alone would. Bit for bit: each row of the batched linears is computed in
// the same order as alone (packed GEMM: exact int32 sums; fp32: the multi-token GEMV, T <=
// gemv_max_t, keeps every token's summation order).
TEST(Engine, BatchedDecodeStepEqualsEachAlone) {
  const auto fp = Engine::open(stories());
  for (const auto& eng : {fp, engines().sim, engines().packed, engines().sim_head, engines().packed_head}) {
    SCOPED_TRACE(eng->describe());
    const std::vector<std::vector<int32_t>> prompts = {prompt(5, 1), prompt(17, 2), prompt(9, 3)};
    const size_t B = prompts.size();
    std::vector<std::unique_ptr<Session>> batched, alone;
    std::vector<int32_t> next(B);
    for (size_t b = 0; b < B; ++b) {
      batched.push_back(eng->new_session(64));
      alone.push_back(eng->new_session(64));
      batched[b]->eval(prompts[b]);
      const auto l = alone[b]->eval(prompts[b]);
      next[b] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    // Members change between steps as in a server: all three, then two, one, all three again.
    const std::vector<std::vector<size_t>> steps = {{0, 1, 2}, {0, 1, 2}, {2, 0}, {1}, {0, 1, 2}, {1, 2, 0}};
    for (const auto& members : steps) {
      std::vector<Forward*> seqs;
      std::vector<int32_t> toks;
      for (size_t b : members) {
        seqs.push_back(&batched[b]->forward());
        toks.push_back(next[b]);
      }
      Forward::step_batch(seqs, toks);
      for (size_t b : members) {
        const auto want = alone[b]->eval(std::span(&next[b], 1));
        const auto got = batched[b]->forward().logits();
        ASSERT_TRUE(bit_equal(std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end())))
            << "sequence " << b << " after " << alone[b]->n_past() << " tokens";
        EXPECT_EQ(batched[b]->n_past(), alone[b]->n_past());
        next[b] = int32_t(std::max_element(want.begin(), want.end()) - want.begin());
      }
    }
    // Errors name what is wrong; nothing is fed.
    Forward* f0 = &batched[0]->forward();
    const int64_t n0 = batched[0]->n_past();
    const std::vector<Forward*> dup = {f0, f0};
    EXPECT_THAT(error_of([&] { Forward::step_batch(dup, std::vector<int32_t>{1, 2}); }), HasSubstr("is also sequence"));
    EXPECT_THAT(error_of([&] { Forward::step_batch(std::vector<Forward*>{f0}, std::vector<int32_t>{1, 2}); }),
                HasSubstr("2 tokens for 1 sequences"));
    EXPECT_EQ(batched[0]->n_past(), n0);
  }
  // A sequence with no room left is refused before anything runs.
  auto a = fp->new_session(4), b = fp->new_session(8);
  a->eval(prompt(4, 1));
  b->eval(prompt(2, 2));
  const std::vector<Forward*> full = {&b->forward(), &a->forward()};
  EXPECT_THAT(error_of([&] { Forward::step_batch(full, std::vector<int32_t>{1, 1}); }),
              HasSubstr("sequence 1: 1 token after 4 already in the cache exceeds the context of 4 tokens"));
  EXPECT_EQ(b->n_past(), 2);
}

// A batch that mixes prompt chunks with decode rows (sinkq serve's prefills riding in the decode
// steps): each sequence's logits are exactly its own step(chunk)'s, bit for bit, on every path.
// Chunks of 1, 5 (a linear group with a decode row: the row-wise GEMV) and 70 tokens (above
// matmul_rowwise_rows on every ISA: its own call, step()'s sgemm), in several orders, one of them
// led by the long chunk (its buffers are the batch's workspace).
TEST(Engine, BatchedStepEqualsEachAlone) {
  const auto fp = Engine::open(stories());
  for (const auto& eng : {fp, engines().sim, engines().packed, engines().packed_head}) {
    SCOPED_TRACE(eng->describe());
    const size_t B = 4;
    std::vector<std::unique_ptr<Session>> batched, alone;
    std::vector<std::vector<int32_t>> next(B);
    for (size_t b = 0; b < B; ++b) {
      batched.push_back(eng->new_session(192));
      alone.push_back(eng->new_session(192));
    }
    // Round 1: sequence 0 and 3 get prompts alone first and then decode; 1 and 2 start with chunks.
    for (size_t b : {size_t(0), size_t(3)}) {
      batched[b]->eval(prompt(3, int(b) + 1));
      const auto l = alone[b]->eval(prompt(3, int(b) + 1));
      next[b] = {int32_t(std::max_element(l.begin(), l.end()) - l.begin())};
    }
    next[1] = prompt(5, 11);
    next[2] = prompt(70, 12);
    const std::vector<std::vector<size_t>> rounds = {{0, 1, 2, 3}, {2, 0, 3, 1}, {2, 1, 0}};
    for (size_t r = 0; r < rounds.size(); ++r) {
      std::vector<Forward*> seqs;
      std::vector<std::span<const int32_t>> chunks;
      for (size_t b : rounds[r]) {
        seqs.push_back(&batched[b]->forward());
        chunks.emplace_back(next[b]);
      }
      Forward::step_batch(seqs, chunks);
      for (size_t b : rounds[r]) {
        const auto want = alone[b]->eval(next[b]);
        const auto got = batched[b]->forward().logits();
        ASSERT_TRUE(bit_equal(std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end())))
            << "round " << r << ", sequence " << b << " (a chunk of " << next[b].size() << ") after "
            << alone[b]->n_past() - int64_t(next[b].size()) << " tokens";
        EXPECT_EQ(batched[b]->n_past(), alone[b]->n_past());
        // Next round: 0 and 3 decode; 1 and 2 alternate between another chunk and a decode token.
        const int32_t top = int32_t(std::max_element(want.begin(), want.end()) - want.begin());
        next[b] = (b == 1 || b == 2) && next[b].size() == 1 ? prompt(b == 1 ? 5 : 70, int(20 + r + b))
                                                             : std::vector<int32_t>{top};
      }
    }
  }
  // Refused before anything runs: a chunk longer than its sequence's max_batch, rows beyond the
  // first sequence's buffers, a chunk past the context.
  auto a = fp->new_session(16), b = fp->new_session(64), c = fp->new_session(20);
  a->eval(prompt(2, 1));
  const std::vector<int32_t> p17 = prompt(17, 2), p10 = prompt(10, 3), p19 = prompt(19, 4);
  auto run = [](std::vector<Forward*> s, std::vector<std::span<const int32_t>> ch) { Forward::step_batch(s, ch); };
  EXPECT_THAT(error_of([&] { run({&b->forward(), &a->forward()}, {p10, p17}); }),
              HasSubstr("sequence 1: a chunk of 17 tokens (1..16: its max_batch)"));
  EXPECT_THAT(error_of([&] { run({&a->forward(), &b->forward()}, {p10, p10}); }),
              HasSubstr("20 rows, the first sequence's buffers hold 16"));
  c->eval(prompt(2, 5));
  EXPECT_THAT(error_of([&] { run({&b->forward(), &c->forward()}, {p10, p19}); }),
              HasSubstr("sequence 1: 19 tokens after 2 already in the cache exceed the context of 20 tokens"));
  EXPECT_EQ(a->n_past(), 2);
  EXPECT_EQ(b->n_past(), 0);
  EXPECT_EQ(c->n_past(), 2);
}

// logprobs(tokens, from) = log_softmax of the logits after tokens[0..i) at tokens[i], as eval()
// gives them one prefix at a time (tolerance: one step vs many sum in another order, 1e-4 rel).
TEST(Engine, LogprobsAreTeacherForced) {
  const auto& eng = engines().packed;
  auto s = eng->new_session(64);
  const auto toks = prompt(12, 3);
  const std::vector<double> lp = s->logprobs(toks, 4);
  ASSERT_EQ(lp.size(), toks.size() - 4);
  const int64_t V = eng->config().vocab_size;
  for (size_t i = 4; i < toks.size(); ++i) {
    const std::vector<float> l = last_logits(*s, std::vector<int32_t>(toks.begin(), toks.begin() + long(i)));
    const double want = -token_nll(l.data(), V, toks[i]);
    EXPECT_NEAR(lp[i - 4], want, 1e-4 * std::max(1.0, std::abs(want))) << i;
    EXPECT_LT(lp[i - 4], 0.0);
  }
  EXPECT_THAT(error_of([&] { s->logprobs(toks, 0); }), HasSubstr("from = 0"));
  EXPECT_THAT(error_of([&] { s->eval(std::vector<int32_t>{int32_t(V)}); }), HasSubstr("outside the vocabulary"));
}

// generate on a session = eval::generate on a Forward attached by hand; on_token streams every
// token and returning false stops there.
TEST(Engine, GenerateStreamsAndStops) {
  const auto& eng = engines().sim;
  GenerateOptions go;
  go.max_new_tokens = 12;
  go.sampler.temperature = 0.0f;
  const auto p = eng->encode_prompt("Once upon a time");
  auto s = eng->new_session(64);
  std::vector<int32_t> streamed;
  const GenerateResult r = s->generate(p, go, [&](int32_t id, const TokenLogprob*) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_EQ(streamed, r.generated);
  EXPECT_EQ(r.generated.size(), 12u);
  Forward f(eng->model(), 64);
  eng->attach(f);
  EXPECT_EQ(generate(f, p, go).generated, r.generated);
  int n = 0;
  const GenerateResult c = s->generate(p, go, [&](int32_t, const TokenLogprob*) { return ++n < 3; });
  EXPECT_TRUE(c.cancelled);
  EXPECT_EQ(c.generated, std::vector<int32_t>(r.generated.begin(), r.generated.begin() + 3));
}

// score() is logprobs() with each position's top N: the chosen token's value bit for bit, the top
// list descending, its head the argmax, its mass at most 1; generate's per-token logprobs are
// score()'s on the generated sequence. One token per step vs one batched step: on this KV4 model
// the steps read the packed rows through the LUT driver, the batched step decodes them to fp32
// for the blocked kernel (packed_kv.h), so the K / V of a generated token come out of another fp32
// summation order and a 4-bit code can flip, which moves the later logprobs by up to 5.0e-3
// (measured; 1e-7 without a flip). Bound: 2e-2·max(1, |logprob|); the logprob of another
// position or token is off by O(1).
TEST(Engine, ScoreAndGenerateLogprobs) {
  const auto& eng = engines().packed;
  auto s = eng->new_session(64);
  const auto toks = prompt(12, 3);
  const std::vector<double> lp = s->logprobs(toks, 2);
  const std::vector<TokenLogprob> sc = s->score(toks, 2, 5);
  ASSERT_EQ(sc.size(), lp.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    EXPECT_EQ(sc[i].logprob, lp[i]) << i;
    EXPECT_EQ(sc[i].id, toks[i + 2]);
    ASSERT_EQ(sc[i].top.size(), 5u);
    double mass = 0;
    for (size_t j = 0; j < 5; ++j) {
      if (j) {
        EXPECT_GE(sc[i].top[j - 1].second, sc[i].top[j].second);
      }
      mass += std::exp(sc[i].top[j].second);
    }
    EXPECT_LE(mass, 1.0 + 1e-9);
    EXPECT_GE(sc[i].top[0].second, sc[i].logprob);
  }
  EXPECT_TRUE(s->score(toks, int64_t(toks.size()), 3).empty());
  EXPECT_THAT(error_of([&] { s->score(toks, 1, -1); }), HasSubstr("top_n"));

  GenerateOptions go;
  go.max_new_tokens = 8;
  go.sampler.temperature = 0.0f;
  go.logprobs = 2;
  const auto p = eng->encode_prompt("Once upon a time");
  std::vector<double> streamed;
  const GenerateResult r = s->generate(p, go, [&](int32_t id, const TokenLogprob* l) {
    EXPECT_NE(l, nullptr);
    if (l) streamed.push_back(l->logprob);
    return true;
  });
  ASSERT_EQ(r.logprobs.size(), r.generated.size());
  std::vector<int32_t> all(p.begin(), p.end());
  all.insert(all.end(), r.generated.begin(), r.generated.end());
  const std::vector<TokenLogprob> want = s->score(all, int64_t(p.size()), 2);
  for (size_t i = 0; i < r.generated.size(); ++i) {
    EXPECT_EQ(streamed[i], r.logprobs[i].logprob);
    EXPECT_NEAR(r.logprobs[i].logprob, want[i].logprob, 2e-2 * std::max(1.0, std::abs(want[i].logprob))) << i;
    EXPECT_EQ(r.logprobs[i].top[0].first, r.generated[i]);  // greedy: the sampled token is the argmax
  }
}

// The KL reference of an artifact is its source model behind the same prefix: KLD of the packed
// W4A8KV4 model against it is positive, and the reference against itself is exactly 0.
TEST(Engine, ReferenceScoresTheSameTargets) {
  const auto& eng = engines().packed;
  const auto ref = eng->reference();
  EXPECT_EQ(ref->prefix_tokens(), eng->prefix_tokens());
  EXPECT_EQ(ref->model()->config().num_layers, eng->config().num_layers);
  const auto toks = prompt(200, 4);
  PplOptions po;
  po.ctx = 64;
  po.protocol = PplProtocol::Prefix;
  auto s = eng->new_session(64), r = ref->new_session(64), r2 = ref->new_session(64);
  const PplResult q = s->perplexity(toks, po, r.get());
  const PplResult same = r2->perplexity(toks, po, r.get());
  EXPECT_TRUE(q.has_kld);
  EXPECT_GT(q.kld, 0.0);
  EXPECT_EQ(same.kld, 0.0);
  EXPECT_EQ(q.tokens_scored, same.tokens_scored);
}

}  // namespace
}  // namespace sinkq
