// The step batcher of sinkq serve (server/batcher.h): a prompt handed in while another session
// decodes runs in the same forward as that session's step, and both get exactly the logits they
// get alone.
#include "server/batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "sinkq/engine.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::server {
namespace {

using ::testing::HasSubstr;
using sinkq::testing::bit_equal;
using sinkq::testing::prompt;

std::vector<float> vec(std::span<const float> s) { return {s.begin(), s.end()}; }
int32_t top(std::span<const float> l) { return int32_t(std::max_element(l.begin(), l.end()) - l.begin()); }

// Session a prefills, then waits until b has joined (b's prompt is then waiting in the batcher:
// the window is long) and decodes K greedy steps; b's 70-token prompt (a linear call of its own,
// above matmul_rowwise_rows on every ISA) thus rides with a's first step, then b decodes too. Every logit row of
// both equals the same feeding alone, bit for bit; the stats count what ran.
TEST(StepBatcher, PromptRidesWithDecodeStepsAndStaysExact) {
  const auto eng = Engine::open(sinkq::testing::shared_dir() + "/models/stories260K");
  StepBatcher batcher(4, std::chrono::seconds(5));
  static constexpr int K = 6;
  const std::vector<int32_t> pa = prompt(4, 1), pb = prompt(70, 2);
  auto run = [&](std::unique_ptr<Session> s, const std::vector<int32_t>& p, bool wait_for_other) {
    StepBatcher::Membership m(batcher);
    std::vector<std::vector<float>> rows{vec(m.prefill(s->forward(), p))};
    while (wait_for_other && batcher.members() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < K; ++i) rows.push_back(vec(m.step(s->forward(), top(rows.back()))));
    return rows;
  };
  auto a = std::async(std::launch::async, run, eng->new_session(128), pa, true);
  while (batcher.stats().batches < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a's prefill ran
  auto b = std::async(std::launch::async, run, eng->new_session(128), pb, false);
  const auto got_a = a.get(), got_b = b.get();
  for (const auto& [p, got] : {std::pair{&pa, &got_a}, std::pair{&pb, &got_b}}) {
    auto s = eng->new_session(128);
    std::vector<float> want = vec(s->eval(*p));
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_TRUE(bit_equal((*got)[i], want)) << "prompt of " << p->size() << " tokens, row " << i;
      if (i + 1 < got->size()) {
        const int32_t id = top(want);
        want = vec(s->eval(std::span(&id, 1)));
      }
    }
  }
  const StepBatcher::Stats st = batcher.stats();
  EXPECT_EQ(st.prefill_chunks, 2u);
  EXPECT_EQ(st.prefill_rows, pa.size() + pb.size());
  EXPECT_EQ(st.rows, 2u * K);
  EXPECT_GE(st.mixed, 1u) << "b's prompt did not ride with a decode step";
  EXPECT_LT(st.decode_batches, 2u * K) << "no decode step was shared";
  EXPECT_EQ(batcher.members(), 0);
}

// A prompt past the context is refused before it reaches a batch; the session is untouched.
TEST(StepBatcher, PromptPastTheContextIsRefused) {
  const auto eng = Engine::open(sinkq::testing::shared_dir() + "/models/stories260K");
  StepBatcher batcher(2);
  auto s = eng->new_session(8);
  StepBatcher::Membership m(batcher);
  const std::vector<int32_t> p = prompt(9, 1);
  EXPECT_THAT(sinkq::testing::error_of([&] { m.prefill(s->forward(), p); }),
              HasSubstr("9 tokens after 0 already in the cache exceed the context of 8 tokens"));
  EXPECT_EQ(s->n_past(), 0);
  EXPECT_EQ(batcher.stats().batches, 0u);
}

}  // namespace
}  // namespace sinkq::server
