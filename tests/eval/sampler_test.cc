#include <gtest/gtest.h>

#include <cmath>

#include "eval/generate.h"

namespace sinkq {
namespace {

const std::vector<float> kLogits{1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s({/*temperature=*/0.0f, 0, 1.0f, 0});
  EXPECT_EQ(s.sample(kLogits), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler s({1.0f, /*top_k=*/1, 1.0f, seed});
    EXPECT_EQ(s.sample(kLogits), 1);
  }
}

TEST(Sampler, TinyTopPKeepsOnlyTheBest) {
  Sampler s({1.0f, 0, /*top_p=*/1e-6f, 7});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(kLogits), 1);
}

TEST(Sampler, SameSeedSameDraws) {
  Sampler a({0.9f, 0, 1.0f, 42}), b({0.9f, 0, 1.0f, 42});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(kLogits), b.sample(kLogits));
}

// Empirical frequencies match softmax(logits / T). With N draws each frequency has standard
// deviation sqrt(p(1-p)/N) <= 0.5/sqrt(N) = 0.0025 for N = 40000; 5 sigma = 0.0125 makes a
// false failure astronomically unlikely while a wrong temperature or top-k moves p by > 0.03.
TEST(Sampler, FrequenciesFollowSoftmax) {
  const float temp = 1.5f;
  const int top_k = 4;  // keeps ids 1, 4, 2, 0
  Sampler s({temp, top_k, 1.0f, 123});
  const int N = 40000;
  std::vector<int> count(kLogits.size());
  for (int i = 0; i < N; ++i) ++count[size_t(s.sample(kLogits))];
  std::vector<double> p(kLogits.size(), 0.0);
  double z = 0;
  for (int id : {1, 4, 2, 0}) z += p[size_t(id)] = std::exp(kLogits[size_t(id)] / temp);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(count[i] / double(N), p[i] / z, 0.0125) << "id " << i;
  EXPECT_EQ(count[3], 0);
  EXPECT_EQ(count[5], 0);
}

TEST(Sampler, InvalidOptionsNameTheFlag) {
  try {
    validate({-1.0f, 0, 1.0f, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--temp"), std::string::npos);
  }
  EXPECT_THROW(validate({1.0f, -2, 1.0f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 0, 1.5f, 0}), Error);
}

}  // namespace
}  // namespace sinkq

namespace sinkq {
namespace {

// A temperature far below the logit gaps is greedy (issue 18: 1e-40 divided the logits to ±inf
// and sampled the last token), whatever the seed.
TEST(Sampler, TinyTemperatureIsGreedy) {
  const std::vector<float> logits = {0.5f, 3.0f, -2.0f, 2.9f, 3.0f - 1e-3f};
  for (float t : {1e-40f, 1e-30f, 1e-6f})
    for (uint64_t seed = 0; seed < 20; ++seed) {
      Sampler s({t, 0, 1.0f, seed});
      EXPECT_EQ(s.sample(logits), 1) << t << " " << seed;
    }
}

}  // namespace
}  // namespace sinkq
