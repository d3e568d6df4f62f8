// sinkq/eval/tasks.cc — zero-shot multiple-choice tasks (tasks.h); conventions in docs/eval.md.
#include "eval/tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/mmap.h"
#include "eval/ppl.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

const std::vector<McTaskInfo>& mc_tasks() {
  static const std::vector<McTaskInfo> t = {
      {McTask::Piqa, "piqa", "piqa", "piqa", true},
      {McTask::ArcEasy, "arc_easy", "ARC-Easy", "arc_easy", true},
      {McTask::ArcChallenge, "arc_challenge", "ARC-Challenge", "arc_challenge", true},
      {McTask::Winogrande, "winogrande", "winogrande", "winogrande", false},
      {McTask::Boolq, "boolq", "boolq", "boolq (question only)", false},
      {McTask::Openbookqa, "openbookqa", "openbookqa", "openbookqa", true},
      {McTask::SocialIqa, "social_iqa", "social_i_qa", "social_iqa", false},
  };
  return t;
}

std::vector<McTaskInfo> parse_mc_tasks(const std::string& list) {
  std::vector<McTaskInfo> out;
  std::string names;
  for (const McTaskInfo& t : mc_tasks()) names += (names.empty() ? "" : ", ") + std::string(t.name);
  size_t b = 0;
  while (b <= list.size()) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    const std::string name = list.substr(b, e - b);
    b = e + 1;
    if (name == "all") {
      for (const McTaskInfo& t : mc_tasks())
        if (std::none_of(out.begin(), out.end(), [&](const McTaskInfo& o) { return o.task == t.task; })) out.push_back(t);
      continue;
    }
    auto it = std::find_if(mc_tasks().begin(), mc_tasks().end(), [&](const McTaskInfo& t) { return name == t.name; });
    SINKQ_CHECK(it != mc_tasks().end(), "--tasks: unknown task '{}' (tasks: {}, all)", name, names);
    SINKQ_CHECK(std::none_of(out.begin(), out.end(), [&](const McTaskInfo& o) { return o.task == it->task; }),
                "--tasks: '{}' is given twice", name);
    out.push_back(*it);
  }
  return out;
}

namespace {

std::string escape_nl(std::string_view s) {
  std::string o;
  for (char c : s) o += c == '\n' ? std::string("\\n") : std::string(1, c);
  return o;
}

// The text between `open` (which must start `s` at `pos`) and the next `close` after it; pos moves
// past `close`. Errors name the record and the marker that is missing.
std::string between(std::string_view s, size_t& pos, std::string_view open, std::string_view close,
                    const std::string& where) {
  SINKQ_CHECK(s.substr(pos, open.size()) == open, "{}: instruction: expected '{}' at byte {}", where,
              fmt::format("{}", open), pos);
  const size_t b = pos + open.size();
  const size_t e = s.find(close, b);
  SINKQ_CHECK(e != std::string_view::npos, "{}: instruction: no '{}' after byte {}", where, escape_nl(close), b);
  pos = e + close.size();
  return std::string(s.substr(b, e - b));
}

// Python's str.strip() for the ASCII whitespace the files hold.
std::string_view strip(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// "answer3" → 2 for prefix "answer" and n choices.
int gold_index(const std::string& answer, std::string_view prefix, int n, const std::string& where) {
  for (int k = 1; k <= n; ++k)
    if (answer == fmt::format("{}{}", prefix, k)) return k - 1;
  throw Error(fmt::format("{}: answer '{}' is not one of {}1..{}{}", where, answer, prefix, prefix, n));
}

// ARC / OBQA / SIQA: "<lead>QUESTION\n\nAnswer1: A1 Answer2: A2 ... AnswerN: AN\n\nAnswer format:
// answer1/.../answerN", N read from the format line.
void parse_answers(std::string_view ins, std::string_view lead, std::string& question, std::vector<std::string>& ans,
                   int& n, const std::string& where) {
  const std::string_view fmt_marker = "\n\nAnswer format: ";
  const size_t f = ins.rfind(fmt_marker);
  SINKQ_CHECK(f != std::string_view::npos, "{}: instruction: no '{}'", where, escape_nl(fmt_marker));
  const std::string_view format = ins.substr(f + fmt_marker.size());
  n = int(std::count(format.begin(), format.end(), '/')) + 1;
  std::string expect;
  for (int k = 1; k <= n; ++k) expect += fmt::format("{}answer{}", k > 1 ? "/" : "", k);
  SINKQ_CHECK(format == expect, "{}: instruction: answer format '{}', expected '{}'", where, format, expect);
  const std::string_view body = ins.substr(0, f);
  size_t pos = 0;
  question = between(body, pos, lead, "\n\nAnswer1: ", where);
  pos -= std::string_view("Answer1: ").size();
  for (int k = 1; k <= n; ++k) {
    const std::string open = fmt::format("Answer{}: ", k);
    SINKQ_CHECK(body.substr(pos, open.size()) == open, "{}: instruction: expected '{}' at byte {}", where, open, pos);
    const size_t b = pos + open.size();
    if (k == n) {
      ans.emplace_back(body.substr(b));
      break;
    }
    const std::string next = fmt::format(" Answer{}: ", k + 1);
    const size_t e = body.find(next, b);
    SINKQ_CHECK(e != std::string_view::npos, "{}: instruction: no '{}' after byte {}", where, next, b);
    ans.emplace_back(body.substr(b, e - b));
    pos = e + 1;
  }
}

}  // namespace

McItem parse_mc_item(McTask task, const nlohmann::json& rec, const std::string& where) {
  SINKQ_CHECK(rec.is_object(), "{}: not a JSON object", where);
  auto field = [&](const char* name) {
    auto it = rec.find(name);
    SINKQ_CHECK(it != rec.end() && it->is_string(), "{}: field '{}' is missing or not a string", where, name);
    return it->get<std::string>();
  };
  const std::string ins = field("instruction"), answer = field("answer");
  const std::string_view v = ins;
  McItem it;
  auto set_choices = [&](const std::string& context, std::vector<std::string> choices) {
    for (const std::string& c : choices) {
      it.contexts.push_back(context);
      it.continuations.push_back(" " + c);  // target_delimiter
    }
    it.choices = std::move(choices);
  };
  switch (task) {
    case McTask::ArcEasy:
    case McTask::ArcChallenge:
    case McTask::Openbookqa:
    case McTask::SocialIqa: {
      std::string q;
      std::vector<std::string> ans;
      int n = 0;
      parse_answers(v, "Please choose the correct answer to the question: ", q, ans, n, where + " (instruction)");
      SINKQ_CHECK(n >= 2, "{}: {} choice(s)", where, n);
      it.gold = gold_index(answer, "answer", n, where + " field 'answer'");
      // lm-eval: arc "Question: {{question}}\nAnswer:", openbookqa "{{question_stem}}",
      // social_iqa "Q: {{context}} {{question}}\nA:" (the file joined context and question).
      const std::string ctx = task == McTask::Openbookqa ? q
                              : task == McTask::SocialIqa ? "Q: " + q + "\nA:"
                                                          : "Question: " + q + "\nAnswer:";
      set_choices(ctx, std::move(ans));
      break;
    }
    case McTask::Piqa: {
      size_t pos = 0;
      const std::string tail = "\n\nAnswer format: solution1/solution2";
      SINKQ_CHECK(v.size() >= tail.size() && v.substr(v.size() - tail.size()) == tail,
                  "{}: instruction does not end with '{}'", where, escape_nl(tail));
      const std::string_view body = v.substr(0, v.size() - tail.size());
      const std::string goal =
          between(body, pos, "Please choose the correct solution to the question: ", "\n\nSolution1: ", where);
      const size_t s2 = body.find("\n\nSolution2: ", pos);
      SINKQ_CHECK(s2 != std::string_view::npos, "{}: instruction: no 'Solution2: '", where);
      std::string sol1(body.substr(pos, s2 - pos)), sol2(body.substr(s2 + std::string_view("\n\nSolution2: ").size()));
      it.gold = gold_index(answer, "solution", 2, where + " field 'answer'");
      set_choices("Question: " + goal + "\nAnswer:", {sol1, sol2});
      break;
    }
    case McTask::Boolq: {
      size_t pos = 0;
      const std::string q = between(v, pos, "Please answer the following question with true or false, question: ",
                                    "?\n\nAnswer format: true/false", where);
      SINKQ_CHECK(pos == v.size(), "{}: instruction: text after 'Answer format: true/false'", where);
      SINKQ_CHECK(answer == "true" || answer == "false", "{}: field 'answer' is '{}', not true/false", where, answer);
      it.gold = answer == "true" ? 1 : 0;
      // lm-eval's super_glue/boolq prompt "{{passage}}\nQuestion: {{question}}?\nAnswer:" without
      // the passage line: this layout has no passages (docs/eval.md).
      set_choices("Question: " + q + "?\nAnswer:", {"no", "yes"});
      break;
    }
    case McTask::Winogrande: {
      const std::string tail = " Answer format: option1/option2";
      SINKQ_CHECK(v.size() >= tail.size() && v.substr(v.size() - tail.size()) == tail,
                  "{}: instruction does not end with '{}'", where, tail);
      const std::string_view body = v.substr(0, v.size() - tail.size());
      size_t pos = 0;
      const std::string sentence = between(
          body, pos, "Please choose the correct answer to fill in the blank to complete the given sentence: ",
          "\n\nOption1: ", where);
      const size_t o2 = body.find(" Option2: ", pos);
      SINKQ_CHECK(o2 != std::string_view::npos, "{}: instruction: no ' Option2: '", where);
      const std::string opt1(body.substr(pos, o2 - pos)), opt2(body.substr(o2 + std::string_view(" Option2: ").size()));
      const size_t blank = sentence.find('_');
      SINKQ_CHECK(blank != std::string::npos, "{}: the sentence has no blank '_'", where);
      it.gold = gold_index(answer, "option", 2, where + " field 'answer'");
      // lm-eval preprocess_winogrande: partial evaluation — the context is the sentence up to the
      // blank with the option substituted, the continuation the rest of the sentence (stripped).
      std::string target = " ";  // not `" " + std::string(..)`: GCC 12 warns falsely on it (-Wrestrict, PR 105329)
      target += strip(std::string_view(sentence).substr(blank + 1));
      for (const std::string& o : {opt1, opt2}) {
        it.contexts.push_back(sentence.substr(0, blank) + o);
        it.continuations.push_back(target);
        it.choices.push_back(sentence.substr(0, blank) + o);
      }
      break;
    }
  }
  return it;
}

std::vector<McItem> load_mc_task(const McTaskInfo& t, const std::string& data_dir, int64_t limit) {
  const std::string path = data_dir + "/" + t.dir + "/test.json";
  const std::string raw = read_file(path);
  require_utf8(raw, path);
  const std::string text = lf_text(raw);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON ({})", path, e.what()));
  }
  SINKQ_CHECK(j.is_array() && !j.empty(), "{}: expected a non-empty JSON array of items", path);
  const int64_t n = limit > 0 ? std::min<int64_t>(limit, int64_t(j.size())) : int64_t(j.size());
  std::vector<McItem> items;
  items.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    items.push_back(parse_mc_item(t.task, j[size_t(i)], fmt::format("{} item {}", path, i)));
    items.back().index = i;
  }
  return items;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_pair(const Tokenizer& tok, bool add_bos,
                                                                  std::string_view context,
                                                                  std::string_view continuation) {
  // HFLM._encode_pair: trailing spaces of the context go to the continuation.
  std::string ctx(context), cont(continuation);
  size_t n_spaces = 0;
  while (n_spaces < ctx.size() && std::string_view(" \t\n\r\v\f").find(ctx[ctx.size() - 1 - n_spaces]) !=
                                       std::string_view::npos)
    ++n_spaces;
  if (n_spaces > 0) {
    cont = ctx.substr(ctx.size() - n_spaces) + cont;
    ctx.resize(ctx.size() - n_spaces);
  }
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  std::vector<int32_t> whole = tok.encode(ctx + cont, raw);
  std::vector<int32_t> c = tok.encode(ctx, raw);
  if (add_bos && tok.bos_id() >= 0) {
    whole.insert(whole.begin(), tok.bos_id());
    c.insert(c.begin(), tok.bos_id());
  }
  std::vector<int32_t> k(whole.begin() + std::min(whole.size(), c.size()), whole.end());
  return {std::move(c), std::move(k)};
}

std::vector<ContinuationScore> score_requests(Forward& fwd, const std::vector<ScoreRequest>& reqs,
                                              int64_t* tokens_run) {
  if (reqs.empty()) return {};
  const int64_t vocab = fwd.model().config().vocab_size;
  std::vector<std::vector<int32_t>> seq(reqs.size());
  for (size_t r = 0; r < reqs.size(); ++r) {
    SINKQ_CHECK(!reqs[r].context.empty(), "scoring request {}: empty context", r);
    SINKQ_CHECK(!reqs[r].continuation.empty(), "scoring request {}: empty continuation (nothing to score)", r);
    seq[r] = reqs[r].context;
    seq[r].insert(seq[r].end(), reqs[r].continuation.begin(), reqs[r].continuation.end());
    const int64_t inputs = int64_t(seq[r].size()) - 1;
    SINKQ_CHECK(inputs <= fwd.body_capacity(), "a request of {} tokens does not fit the context of {} positions",
                seq[r].size(), fwd.body_capacity() + 1);
    for (int32_t t : seq[r])
      SINKQ_CHECK(t >= 0 && t < vocab, "token id {} is outside the vocabulary (0..{})", t, vocab - 1);
  }
  // Shared part: the longest common prefix, ending before every request's last context token.
  int64_t shared = int64_t(reqs[0].context.size()) - 1;
  for (size_t r = 1; r < reqs.size(); ++r) {
    int64_t l = 0;
    const int64_t m = std::min<int64_t>(shared, int64_t(reqs[r].context.size()) - 1);
    while (l < m && seq[r][size_t(l)] == seq[0][size_t(l)]) ++l;
    shared = l;
  }
  const bool reuse = reqs.size() > 1 && fwd.rewindable();
  if (!reuse) shared = 0;
  int64_t run = 0;
  fwd.reset();
  if (shared > 0) {
    fwd.step(std::span<const int32_t>(seq[0]).first(size_t(shared)), /*all_logits=*/false);
    run += shared;
  }
  std::vector<ContinuationScore> out(reqs.size());
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (reuse)
      fwd.truncate(shared);
    else
      fwd.reset();
    const std::span<const int32_t> s(seq[r]);
    const int64_t c = int64_t(reqs[r].context.size()), n = int64_t(s.size());
    if (c - 1 > shared) fwd.step(s.subspan(size_t(shared), size_t(c - 1 - shared)), /*all_logits=*/false);
    const std::span<const float> logits = fwd.step(s.subspan(size_t(c - 1), size_t(n - c)), /*all_logits=*/true);
    run += n - 1 - shared;
    ContinuationScore& o = out[r];
    for (int64_t j = c; j < n; ++j) {
      const float* row = logits.data() + (j - c) * vocab;
      const double lp = -token_nll(row, vocab, s[size_t(j)]);
      o.token_logprobs.push_back(lp);
      o.logprob += lp;
      if (std::max_element(row, row + vocab) - row != s[size_t(j)]) o.greedy = false;
    }
  }
  if (tokens_run) *tokens_run += run;
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

McItemResult mc_decide(const McItem& item, const std::vector<ContinuationScore>& scores) {
  SINKQ_ASSERT(scores.size() == item.choices.size());
  McItemResult r;
  r.index = item.index;
  r.gold = item.gold;
  double best = -std::numeric_limits<double>::infinity(), best_norm = best;
  for (size_t i = 0; i < scores.size(); ++i) {
    r.ll.push_back(scores[i].logprob);
    r.greedy.push_back(scores[i].greedy);
    r.chars.push_back(utf8_length(item.choices[i]));
    r.tokens.push_back(int64_t(scores[i].token_logprobs.size()));
    // np.argmax: the first maximum. A choice of length 0 would divide by zero in lm-eval too.
    if (scores[i].logprob > best) best = scores[i].logprob, r.pred = int(i);
    const double norm = scores[i].logprob / double(r.chars.back());
    if (norm > best_norm) best_norm = norm, r.pred_norm = int(i);
  }
  return r;
}

std::pair<double, double> mean_stderr(const std::vector<double>& x) {
  const double n = double(x.size());
  if (x.empty()) return {std::nan(""), std::nan("")};
  double mu = 0;
  for (double v : x) mu += v;
  mu /= n;
  if (x.size() < 2) return {mu, std::nan("")};
  double ss = 0;
  for (double v : x) ss += (v - mu) * (v - mu);
  return {mu, std::sqrt(ss / (n - 1)) / std::sqrt(n)};
}

McTaskResult run_mc_task(Forward& fwd, const Tokenizer& tok, bool add_bos, const McTaskInfo& t, const std::vector<McItem>& items,
                         const std::function<void(int64_t, int64_t)>& progress) {
  McTaskResult res;
  res.info = t;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> acc, acc_norm;
  for (const McItem& item : items) {
    std::vector<ScoreRequest> reqs;
    for (size_t i = 0; i < item.choices.size(); ++i) {
      auto [c, k] = encode_pair(tok, add_bos, item.contexts[i], item.continuations[i]);
      reqs.push_back({std::move(c), std::move(k)});
    }
    McItemResult r = mc_decide(item, score_requests(fwd, reqs, &res.tokens));
    acc.push_back(r.pred == r.gold);
    acc_norm.push_back(r.pred_norm == r.gold);
    res.items.push_back(std::move(r));
    if (progress) progress(int64_t(res.items.size()), int64_t(items.size()));
  }
  res.n = int64_t(items.size());
  std::tie(res.acc, res.acc_stderr) = mean_stderr(acc);
  std::tie(res.acc_norm, res.acc_norm_stderr) = mean_stderr(acc_norm);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace sinkq
