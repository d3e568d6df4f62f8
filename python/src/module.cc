// python/src/module.cc — the Python module `sinkq._sinkq` (pybind11) over the library API
// include/sinkq/engine.h: load a model (Engine::open), tokenize, logits, streaming generation,
// perplexity, the outlier analysis and quantization to an artifact. What the CLI commands do,
// through the same calls (src/cli/cmd_{generate,ppl,analyze,quantize}.cc), so results agree with
// `sinkq ... --json` bit for bit on one host.
//
// Conventions:
//   * Every call that computes releases the GIL while the C++ runs (py::gil_scoped_release), so
//     other Python threads run meanwhile; several calls on one Model may run at once from several
//     threads (each makes its own Session: weights shared, KV caches not).
//   * Ctrl-C: each long call (load, logits, logprobs, ppl, analyze, quantize, a generation's
//     worker) computes on a thread of its own with every signal blocked — and so do the thread
//     team and the OpenMP / BLAS workers it starts, which inherit the mask: a signal landing on a
//     computing thread corrupted the heap (`free(): invalid size`, 2 runs in 3 of a SIGINT during
//     logits()). The calling thread waits with the GIL released and runs Python's signal handlers
//     every 50 ms; on KeyboardInterrupt it sets the computation's flag (core/interrupt.h), which
//     stops it at the next check point (a layer of a forward pass, a progress report of
//     quantize), waits for that, and raises the KeyboardInterrupt.
//   * sinkq::Error (every bad input a user can cause: path, recipe field, token id, length) is the
//     Python exception sinkq.Error (a RuntimeError) with sinkq's message; wrong argument types are
//     TypeError, out-of-range keyword values (max_tokens < 0, ...) ValueError.
//   * JSON (configurations, reports) becomes dict / list / str / int / float / bool / None.
//   * Strings from the model (detokenized text, token texts in reports) are decoded as UTF-8 with
//     U+FFFD for invalid bytes, never an exception.
#include <pthread.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/mmap.h"
#include "eval/analyze.h"
#include "kernels/ops.h"
#include "runtime/artifact.h"
#include "sinkq/engine.h"

namespace py = pybind11;
using nlohmann::json;

namespace sinkq::python {

namespace {

// ---- Ctrl-C ------------------------------------------------------------------------------------------

// A std::thread that starts with every signal blocked (it and the threads it starts inherit the
// mask), so that no signal handler runs on a computing thread.
template <class F>
std::thread signal_free_thread(F&& f) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::thread t(std::forward<F>(f));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

// Runs fn() (no Python objects inside: it runs without the GIL) on a signal-free thread while the
// caller, holding the GIL on entry, waits with it released and polls Python's signal handlers
// every 50 ms. A KeyboardInterrupt (or whatever a handler raises) stops fn at its next check
// point and is raised here once fn has returned; otherwise fn's result or exception.
template <class F>
auto interruptible(F&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::atomic<bool> flag{false};
  std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> result{};
  std::exception_ptr err;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t = signal_free_thread([&] {
    InterruptScope scope(&flag);
    try {
      if constexpr (std::is_void_v<R>) fn();
      else result.emplace(fn());
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard lk(mu);
    done = true;
    cv.notify_all();
  });
  bool raised = false;
  {
    py::gil_scoped_release nogil;
    std::unique_lock lk(mu);
    while (!cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; })) {
      if (raised) continue;
      lk.unlock();
      {
        py::gil_scoped_acquire gil;
        raised = PyErr_CheckSignals() != 0;  // the exception stays set on this thread
      }
      if (raised) flag = true;
      lk.lock();
    }
  }
  t.join();
  if (raised) throw py::error_already_set();
  if (err) std::rethrow_exception(err);
  if constexpr (!std::is_void_v<R>) return std::move(*result);
}

// ---- conversions ---------------------------------------------------------------------------------

// A str from bytes that should be UTF-8; invalid bytes become U+FFFD instead of raising.
py::str utf8(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::object to_py(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
    case json::value_t::discarded: return py::none();
    case json::value_t::boolean: return py::bool_(j.get<bool>());
    case json::value_t::number_integer: return py::int_(j.get<int64_t>());
    case json::value_t::number_unsigned: return py::int_(j.get<uint64_t>());
    case json::value_t::number_float: return py::float_(j.get<double>());
    case json::value_t::string: return utf8(j.get_ref<const std::string&>());
    case json::value_t::binary: {
      const auto& b = j.get_binary();
      return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
    }
    case json::value_t::array: {
      py::list l;
      for (const json& e : j) l.append(to_py(e));
      return l;
    }
    case json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[utf8(k)] = to_py(v);
      return d;
    }
  }
  return py::none();
}

// Python -> JSON for recipes: dict (str keys), list / tuple, str, int, float, bool, None. `path`
// names the value in errors ("recipe.weights.bits").
json from_py(py::handle h, const std::string& path) {
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h) || (!py::isinstance<py::float_>(h) && py::hasattr(h, "__index__"))) {
    const py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(h.ptr()));
    if (!v) throw py::error_already_set();
    int overflow = 0;
    const long long s = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) return int64_t(s);
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
      if (!PyErr_Occurred()) return uint64_t(u);
      PyErr_Clear();
    }
    throw py::value_error(fmt::format("{}: the integer {} does not fit 64 bits", path, py::repr(v).cast<std::string>()));
  }
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::dict>(h)) {
    json o = json::object();
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(h)) {
      if (!py::isinstance<py::str>(k))
        throw py::type_error(fmt::format("{}: keys must be str, got {}", path, py::repr(k).cast<std::string>()));
      const std::string key = k.cast<std::string>();
      o[key] = from_py(v, path + "." + key);
    }
    return o;
  }
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    json a = json::array();
    size_t i = 0;
    for (const py::handle e : h) a.push_back(from_py(e, fmt::format("{}[{}]", path, i++)));
    return a;
  }
  throw py::type_error(fmt::format("{}: cannot be given as a {} (expected dict, list, str, int, float, bool or None)",
                                   path, py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
}

// os.fspath(p) as a std::string: str or os.PathLike (bytes paths are refused).
std::string fspath(py::handle p, const char* what) {
  py::object s = py::module_::import("os").attr("fspath")(p);
  if (!py::isinstance<py::str>(s))
    throw py::type_error(fmt::format("{}: expected a str or os.PathLike path, got {}", what,
                                     py::str(py::type::handle_of(p).attr("__name__")).cast<std::string>()));
  return s.cast<std::string>();
}

// The recipe argument of load() / quantize(): None (nullopt: the fp16 preset), a preset or short
// name ("w8a8", "w4a8kv4-g128"), a JSON document (str starting with '{'), the path of a recipe
// JSON file (as `--recipe FILE`), or a dict in the JSON layout of quant/recipe.h (what
// --dump-recipe prints). One parser: quant::Recipe::from_preset / from_json; errors name the field.
std::optional<quant::Recipe> recipe_of(py::handle r) {
  if (r.is_none()) return std::nullopt;
  if (py::isinstance<py::dict>(r)) return quant::Recipe::from_json(from_py(r, "recipe"), "recipe");
  if (!py::isinstance<py::str>(r))
    throw py::type_error(fmt::format("recipe: expected None, a preset name, a JSON string, a recipe file path or a "
                                     "dict, got {}",
                                     py::str(py::type::handle_of(r).attr("__name__")).cast<std::string>()));
  const std::string s = r.cast<std::string>();
  const size_t first = s.find_first_not_of(" \t\r\n");
  auto parse = [](const std::string& text, const std::string& where) {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    return quant::Recipe::from_json(j, where);
  };
  if (first != std::string::npos && s[first] == '{') return parse(s, "recipe");
  std::error_code ec;
  if (s.ends_with(".json") || std::filesystem::is_regular_file(s, ec)) return parse(read_file(s), s);
  quant::Recipe c = quant::Recipe::from_preset(s);
  c.validate();
  return c;
}

void set_threads(std::optional<int> threads) {
  if (!threads) return;
  if (*threads < 1 || *threads > 1024) throw py::value_error(fmt::format("threads must be in 1..1024 (got {})", *threads));
  set_num_threads(*threads);
}

// Token ids from Python (any sequence of ints, e.g. a list or a NumPy array), each checked against
// the model's vocabulary: sinkq::Error naming the id (as Session::eval says it).
std::vector<int32_t> ids_of(const std::vector<int64_t>& in, int64_t vocab) {
  std::vector<int32_t> out;
  out.reserve(in.size());
  for (int64_t t : in) {
    SINKQ_CHECK(t >= 0 && t < vocab, "token id {} is outside the vocabulary (0..{})", t, vocab - 1);
    out.push_back(int32_t(t));
  }
  return out;
}

// ---- Model -----------------------------------------------------------------------------------------

struct PyModel {
  std::shared_ptr<const Engine> e;
  int64_t vocab() const { return e->config().vocab_size; }
};

std::shared_ptr<PyModel> load(py::handle path_obj, py::handle recipe_obj, std::optional<int> threads) {
  const std::string path = fspath(path_obj, "path");
  OpenOptions oo;
  oo.recipe = recipe_of(recipe_obj);
  oo.pipeline.log = "sinkq";
  set_threads(threads);
  auto m = std::make_shared<PyModel>();
  m->e = interruptible([&] { return Engine::open(path, oo); });
  return m;
}

std::vector<int32_t> tokenize(const PyModel& m, const std::string& text, bool add_special, bool parse_special) {
  py::gil_scoped_release nogil;
  if (add_special && parse_special) return m.e->encode_prompt(text);  // the engine's BOS rule
  EncodeOptions enc;
  // The BOS rule of Engine::encode_prompt: the tokenizer's specials unless the prefix holds [BOS].
  enc.add_special = add_special && !m.e->prefix_has_bos();
  enc.parse_special = parse_special;
  return m.e->tokenizer().encode(text, enc);
}

py::str detokenize(const PyModel& m, const std::vector<int64_t>& ids, bool skip_special) {
  const std::vector<int32_t> v = ids_of(ids, std::max<int64_t>(m.vocab(), m.e->tokenizer().vocab_size()));
  std::string s;
  {
    py::gil_scoped_release nogil;
    s = m.e->tokenizer().decode(v, skip_special);
  }
  return utf8(s);
}

// Every position's logits [len(ids), vocab] from a fresh Session (the prefix in front), copied
// once into a NumPy array that Python owns.
py::array_t<float> logits(const PyModel& m, const std::vector<int64_t>& ids) {
  const std::vector<int32_t> v = ids_of(ids, m.vocab());
  if (v.empty()) throw py::value_error("logits: ids is empty (at least one token is needed)");
  const int64_t n = int64_t(v.size()), V = m.vocab();
  py::array_t<float> out(std::vector<py::ssize_t>{py::ssize_t(n), py::ssize_t(V)});
  float* dst = out.mutable_data();
  interruptible([&] {
    const std::unique_ptr<Session> s = m.e->new_session(n);
    const std::span<const float> l = s->forward().step(v, /*all_logits=*/true);
    SINKQ_ASSERT(int64_t(l.size()) == n * V);
    std::memcpy(dst, l.data(), l.size() * sizeof(float));
  });
  return out;
}

std::vector<double> logprobs(const PyModel& m, const std::vector<int64_t>& ids, int64_t start) {
  const std::vector<int32_t> v = ids_of(ids, m.vocab());
  if (v.empty()) throw py::value_error("logprobs: ids is empty");
  return interruptible([&] {
    const std::unique_ptr<Session> s = m.e->new_session(int64_t(v.size()));
    return s->logprobs(v, start);
  });
}

// ---- generation ------------------------------------------------------------------------------------

// The iterator generate() returns: Session::generate runs on a worker std::thread (no GIL) and
// pushes each id into a small queue; __next__ pops it with the GIL released while it waits. The
// queue is bounded, so a generation nobody reads pauses instead of running to max_tokens; close()
// (or dropping the iterator) makes the on_token callback return false and joins the worker.
class Generation {
 public:
  static constexpr size_t kQueueMax = 4;

  // The stream decoder starts from the prompt's ids, so the pieces continue the prompt's text
  // (" upon" after "Once": a decoder started at the first generated id would drop SentencePiece's
  // leading space, as decoding the generated ids alone does).
  // stop: strings that end the generation when the text contains one (excluded from the text).
  Generation(std::shared_ptr<const Engine> e, std::vector<int32_t> prompt, std::vector<std::string> stop = {})
      : e_(std::move(e)), dec_(e_->tokenizer()), prompt_(std::move(prompt)), has_stop_(!stop.empty()),
        stop_(std::move(stop)) {
    dec_.prime(prompt_);
  }
  ~Generation() { stop(); }
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Called with the GIL released: the session is made here, so a bad length fails in generate().
  void start(int64_t ctx, const GenerateOptions& go) {
    std::shared_ptr<Session> session = e_->new_session(ctx);
    worker_ = signal_free_thread([st = st_, session, prompt = prompt_, go] {
      InterruptScope scope(&st->interrupt);  // close() during a long prefill stops it between layers
      GenerateResult r;
      std::exception_ptr err;
      std::vector<int32_t> seen;  // every id the callback got: what generate() would have returned
      try {
        // A generic lambda: OnToken's (id) or (id, logprob) form alike.
        r = session->generate(prompt, go, [&st, &seen](int32_t id, const auto*...) {
          seen.push_back(id);
          std::unique_lock lk(st->mu);
          st->space.wait(lk, [&] { return st->cancel || st->q.size() < kQueueMax; });
          if (st->cancel) return false;
          st->q.push_back(id);
          st->item.notify_one();
          return true;
        });
      } catch (const Interrupted&) {
        // close() while a step computed (the flag stops it between layers): the end a closed
        // generation has — cancelled, with the ids generated until then.
        r.generated = seen;
        r.cancelled = true;
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard lk(st->mu);
      st->result = std::move(r);
      st->err = err;
      st->done = true;
      st->item.notify_all();
    });
  }

  py::tuple next() {
    if (finished_) throw py::stop_iteration();
    // One reader at a time (as a Python generator): two would interleave the stream decoder.
    // close() from another thread while this one waits is fine (it wakes with StopIteration).
    if (reading_) throw py::value_error("this Generation is already being iterated by another thread");
    reading_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done_reading{reading_};
    while (true) {
      bool ready = false, got = false;
      int32_t id = -1;
      {
        py::gil_scoped_release nogil;
        std::unique_lock lk(st_->mu);
        ready = st_->item.wait_for(lk, std::chrono::milliseconds(100), [&] { return !st_->q.empty() || st_->done; });
        if (ready && !st_->q.empty()) {
          id = st_->q.front();
          st_->q.pop_front();
          got = true;
          st_->space.notify_one();
        }
      }
      if (got) {
        ids_.push_back(id);
        std::string piece = dec_.push(id);
        if (has_stop_) {
          piece = stop_.push(piece);
          if (stop_.matched()) {  // the text before it is the last piece
            close();
            matched_stop_ = true;
          }
        }
        text_ += piece;
        return py::make_tuple(id, utf8(piece));
      }
      if (ready) break;  // done
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C while waiting
    }
    join();
    finished_ = true;
    if (st_->err) std::rethrow_exception(st_->err);
    // Text held back because it could have begun a stop string (or an unfinished UTF-8 character
    // at the end): one last piece, with no id of its own.
    if (has_stop_ && !tail_given_) {
      tail_given_ = true;
      const std::string tail = stop_.push(dec_.flush()) + stop_.flush();
      text_ += tail;
      if (!tail.empty()) return py::make_tuple(-1, utf8(tail));
    }
    throw py::stop_iteration();
  }

  // Stops the worker (the callback returns false at the next token) and waits for it.
  void close() {
    {
      py::gil_scoped_release nogil;
      stop();
    }
    finished_ = true;
  }

  const std::vector<int32_t>& prompt_ids() const { return prompt_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  // The generated ids decoded alone (as `sinkq generate --json` prints "text"); with stop strings,
  // the text yielded (the stop string and what followed it excluded).
  py::str text() const { return has_stop_ ? utf8(text_) : utf8(e_->tokenizer().decode(ids_)); }

  // After the end (StopIteration or close()): what Session::generate returned; None before.
  py::object result() {
    {
      std::unique_lock jl(join_mu_, std::try_to_lock);  // a join in progress: not ended yet
      if (!jl.owns_lock() || worker_.joinable()) return py::none();
    }
    std::lock_guard lk(st_->mu);
    if (!st_->done) return py::none();
    const GenerateResult& r = st_->result;
    py::dict d;
    d["generated_ids"] = r.generated;
    d["stopped"] = r.stopped;
    d["cancelled"] = r.cancelled;
    d["prefill_seconds"] = r.prefill_seconds;
    d["decode_seconds"] = r.decode_seconds;
    d["stop_string"] = matched_stop_;  // ended at one of stop=
    return d;
  }

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable item, space;
    std::deque<int32_t> q;
    bool done = false, cancel = false;
    std::atomic<bool> interrupt{false};  // = cancel, for the check points (core/interrupt.h)
    std::exception_ptr err;
    GenerateResult result;
  };

  void stop() {
    {
      std::lock_guard lk(st_->mu);
      st_->cancel = true;
      st_->interrupt = true;
      st_->space.notify_all();
    }
    join_worker();
  }
  void join() {
    py::gil_scoped_release nogil;
    join_worker();
  }
  // close() on one thread and the end of next() on another may both get here.
  void join_worker() {
    std::lock_guard lk(join_mu_);
    if (worker_.joinable()) worker_.join();
  }

  std::shared_ptr<const Engine> e_;  // keeps the tokenizer of dec_ alive
  StreamDecoder dec_;
  std::vector<int32_t> prompt_, ids_;
  std::shared_ptr<Shared> st_ = std::make_shared<Shared>();
  std::thread worker_;
  std::mutex join_mu_;
  bool finished_ = false, reading_ = false;  // (read and written with the GIL held)
  bool has_stop_ = false, matched_stop_ = false, tail_given_ = false;
  StopMatcher stop_;
  std::string text_;  // the pieces yielded
};

// stop=: None, a str, or a sequence of non-empty str (at most 16, as the server takes).
std::vector<std::string> stop_strings(py::handle stop) {
  std::vector<std::string> out;
  if (stop.is_none()) return out;
  if (py::isinstance<py::str>(stop)) {
    out.push_back(stop.cast<std::string>());
  } else {
    if (!py::isinstance<py::sequence>(stop) || py::isinstance<py::bytes>(stop))
      throw py::type_error("stop: expected None, a str or a list of str");
    for (const py::handle s : stop) {
      if (!py::isinstance<py::str>(s)) throw py::type_error("stop: expected None, a str or a list of str");
      out.push_back(s.cast<std::string>());
    }
  }
  if (out.size() > 16) throw py::value_error(fmt::format("stop: {} strings (at most 16)", out.size()));
  for (const std::string& s : out)
    if (s.empty()) throw py::value_error("stop: an empty string would stop before anything");
  return out;
}

// The sampling arguments generate() and chat() share, checked.
GenerateOptions sampling_options(int64_t max_tokens, float temperature, int top_k, float top_p, uint64_t seed) {
  if (max_tokens < 0) throw py::value_error(fmt::format("max_tokens must be >= 0 (got {})", max_tokens));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw py::value_error(fmt::format("temperature must be a finite number >= 0 (got {})", temperature));
  if (top_k < 0) throw py::value_error(fmt::format("top_k must be >= 0 (got {})", top_k));
  if (!(top_p > 0 && top_p <= 1)) throw py::value_error(fmt::format("top_p must be in (0, 1] (got {})", top_p));
  GenerateOptions go;
  go.max_new_tokens = max_tokens;
  go.sampler.temperature = temperature;
  go.sampler.top_k = top_k;
  go.sampler.top_p = top_p;
  go.sampler.seed = seed;
  validate(go.sampler);
  return go;
}

// Starts a Generation of `prompt` (checked against the context).
std::unique_ptr<Generation> start_generation(const PyModel& m, std::vector<int32_t> prompt, GenerateOptions go,
                                             std::vector<std::string> stop) {
  if (prompt.empty())
    throw py::value_error(m.e->prefix_has_bos() ? "prompt is empty (behind a [BOS] prefix it gets no BOS of its own)"
                                                : "prompt is empty: nothing to condition on");
  const int64_t need = int64_t(prompt.size()) + go.max_new_tokens;
  SINKQ_CHECK(need <= m.e->max_context(),
              "prompt ({} tokens) + max_tokens {} = {} exceeds the {} positions the model has{}", prompt.size(),
              go.max_new_tokens, need, m.e->max_context(),
              m.e->prefix_size() ? fmt::format(" after its {}-token prefix", m.e->prefix_size()) : "");
  auto g = std::make_unique<Generation>(m.e, std::move(prompt), std::move(stop));
  {
    py::gil_scoped_release nogil;
    g->start(need, go);
  }
  return g;
}

std::unique_ptr<Generation> generate(const PyModel& m, py::handle prompt_obj, int64_t max_tokens, float temperature,
                                     int top_k, float top_p, uint64_t seed, bool stop_on_eos, bool stop_on_bos,
                                     py::handle stop_obj) {
  GenerateOptions go = sampling_options(max_tokens, temperature, top_k, top_p, seed);
  std::vector<std::string> stop = stop_strings(stop_obj);
  std::vector<int32_t> prompt;
  if (py::isinstance<py::str>(prompt_obj)) {
    const std::string text = prompt_obj.cast<std::string>();
    py::gil_scoped_release nogil;
    prompt = m.e->encode_prompt(text);
  } else if (py::isinstance<py::bytes>(prompt_obj)) {
    throw py::type_error("prompt: expected str or a sequence of token ids, got bytes");
  } else {
    py::detail::make_caster<std::vector<int64_t>> ids;
    if (!ids.load(prompt_obj, /*convert=*/true))
      throw py::type_error(fmt::format("prompt: expected str or a sequence of token ids, got {}",
                                       py::str(py::type::handle_of(prompt_obj).attr("__name__")).cast<std::string>()));
    prompt = ids_of(py::detail::cast_op<std::vector<int64_t>&>(ids), m.vocab());
  }
  if (stop_on_eos) go.stop_ids = m.e->stop_ids();
  const int bos = m.e->tokenizer().bos_id();
  if (stop_on_bos && bos >= 0) go.stop_ids.push_back(bos);
  return start_generation(m, std::move(prompt), go, std::move(stop));
}

// The messages of chat(): dicts {"role": str, "content": str} or (role, content) pairs.
std::vector<ChatMessage> chat_messages(py::handle messages) {
  if (py::isinstance<py::str>(messages) || !py::isinstance<py::sequence>(messages))
    throw py::type_error("messages: expected a list of {'role': ..., 'content': ...} dicts (or (role, content) pairs)");
  std::vector<ChatMessage> out;
  size_t i = 0;
  for (const py::handle h : messages) {
    py::object role, content;
    if (py::isinstance<py::dict>(h)) {
      const py::dict d = py::reinterpret_borrow<py::dict>(h);
      if (!d.contains("role") || !d.contains("content"))
        throw py::value_error(fmt::format("messages[{}]: needs 'role' and 'content'", i));
      role = d["role"];
      content = d["content"];
    } else if (py::isinstance<py::tuple>(h) && py::len(h) == 2) {
      role = h[py::int_(0)];
      content = h[py::int_(1)];
    } else {
      throw py::type_error(fmt::format("messages[{}]: expected a dict with 'role' and 'content' or a (role, content) pair", i));
    }
    if (!py::isinstance<py::str>(role) || !py::isinstance<py::str>(content))
      throw py::type_error(fmt::format("messages[{}]: 'role' and 'content' must be str", i));
    out.push_back({role.cast<std::string>(), content.cast<std::string>()});
    ++i;
  }
  if (out.empty()) throw py::value_error("messages is empty");
  return out;
}

// A reply to a conversation in the model's chat template, ending at its end-of-turn token (or
// EOS). stream: the Generation; else the reply's text.
py::object chat(const PyModel& m, py::handle messages_obj, std::optional<int64_t> max_tokens, float temperature, int top_k,
                float top_p, uint64_t seed, py::handle stop_obj, bool stream) {
  const std::vector<ChatMessage> messages = chat_messages(messages_obj);
  std::vector<int32_t> prompt;
  {
    py::gil_scoped_release nogil;
    prompt = m.e->encode_chat(messages);
  }
  // Default: what the context leaves, at most 512 tokens.
  const int64_t left = m.e->max_context() - int64_t(prompt.size());
  GenerateOptions go = sampling_options(max_tokens.value_or(std::clamp<int64_t>(left, 0, 512)), temperature, top_k,
                                        top_p, seed);
  go.stop_ids = m.e->stop_ids();
  if (const int32_t t = m.e->end_of_turn_id(); t >= 0) go.stop_ids.push_back(t);
  std::unique_ptr<Generation> g = start_generation(m, std::move(prompt), go, stop_strings(stop_obj));
  if (stream) return py::cast(std::move(g));
  std::string reply;
  try {
    for (;;) reply += g->next()[1].cast<std::string>();
  } catch (const py::stop_iteration&) {
  }
  return utf8(reply);
}

// ---- perplexity ------------------------------------------------------------------------------------

// What `sinkq ppl --json` prints (src/cli/cmd_ppl.cc: the same protocol default, checks and
// Session::perplexity), for a text or a file.
py::object ppl(const PyModel& m, py::handle text_obj, py::handle file_obj, std::optional<int64_t> ctx_opt,
             std::optional<int64_t> windows, std::optional<std::string> protocol_name, bool kld) {
  const Engine& e = *m.e;
  if (text_obj.is_none() == file_obj.is_none()) throw py::type_error("ppl: give the text or file=PATH (one of them)");
  if (windows && *windows < 0) throw py::value_error(fmt::format("windows must be >= 0 (got {})", *windows));
  const int64_t P = e.prefix_size();
  const PplProtocol protocol = !protocol_name ? (P > 0 ? PplProtocol::Prefix : PplProtocol::Gptq)
                                              : parse_ppl_protocol(*protocol_name);
  SINKQ_CHECK(protocol != PplProtocol::Prefix || P > 0,
              "protocol 'prefix' needs a KV prefix: load the model with a recipe that has one{}",
              e.runtime() == Engine::Runtime::Packed ? " (this artifact has none)" : "");
  SINKQ_CHECK(protocol == PplProtocol::Prefix || P == 0,
              "protocol '{}' scores windows without a prefix, but the model has a {}-token KV prefix: use protocol "
              "'prefix' (the default with a prefix)",
              ppl_protocol_name(protocol), P);
  const int64_t max_pos = e.config().max_position_embeddings;
  const int64_t ctx = ctx_opt ? *ctx_opt : std::min<int64_t>(2048, max_pos - P);
  if (ctx < 2) throw py::value_error(fmt::format("ctx must be at least 2 (got {})", ctx));
  SINKQ_CHECK(ctx + P <= max_pos, "ctx {}{} exceeds the model's max_position_embeddings ({}): use ctx {} or less", ctx,
              P ? fmt::format(" plus the {}-token prefix", P) : "", max_pos, max_pos - P);
  const bool use_file = !file_obj.is_none();
  std::string file;
  std::string text;
  if (use_file) file = fspath(file_obj, "file");
  else if (py::isinstance<py::str>(text_obj)) text = text_obj.cast<std::string>();
  else throw py::type_error("ppl: text must be a str (or give file=PATH)");

  PplResult r;
  std::vector<int32_t> toks;
  interruptible([&] {
    if (use_file) {
      toks = scoring_tokens(file, e.tokenizer(), windows.value_or(0) * ctx);
    } else {
      toks = scoring_tokens_of_text(text, e.tokenizer(), "the text");
    }
    const PplOptions po = ppl_options(e.tokenizer(), ctx, protocol, windows.value_or(0));
    check_ppl_text(toks, po);  // before the KV cache of ctx positions is allocated
    const std::unique_ptr<Session> s = e.new_session(ctx);
    std::unique_ptr<Session> ref = kld ? e.reference()->new_session(ctx) : nullptr;
    r = s->perplexity(toks, po, ref.get());
  });
  json j{{"ppl", r.ppl},
         {"mean_nll", r.mean_nll},
         {"tokens_scored", r.tokens_scored},
         {"windows", r.windows},
         {"ctx", ctx},
         {"protocol", ppl_protocol_name(protocol)},
         {"file_tokens", toks.size()},
         {"window_nll", r.window_nll},
         {"runtime", e.runtime_name()}};
  if (use_file) j["file"] = file;
  if (r.has_kld) {
    j["kld"] = r.kld;
    j["window_kld"] = r.window_kld;
  }
  return to_py(j);
}

// ---- analyze ---------------------------------------------------------------------------------------

// `sinkq analyze --json` (src/cli/cmd_analyze.cc) on the model's full-precision source: samples
// from a calibration file (load_calib, [BOS] first) or from texts (each tokenized as a
// calibration document is, [BOS] first when the tokenizer has one, cut at len tokens).
py::object analyze(const PyModel& m, py::handle data_obj, std::optional<std::vector<std::string>> texts,
                 int64_t samples, std::optional<int64_t> len_opt, uint64_t seed, double eta, int bits,
                 std::vector<float> alphas) {
  const Engine& e = *m.e;
  if (data_obj.is_none() == !texts.has_value()) throw py::type_error("analyze: give data=PATH or texts=[...] (one of them)");
  if (samples < 1) throw py::value_error(fmt::format("samples must be >= 1 (got {})", samples));
  if (len_opt && *len_opt < 2) throw py::value_error(fmt::format("len must be >= 2 (got {})", *len_opt));
  if (!(std::isfinite(eta) && eta > 0)) throw py::value_error(fmt::format("eta must be a positive number (got {})", eta));
  if (bits < 2 || bits > 8) throw py::value_error(fmt::format("bits must be in 2..8 (got {})", bits));
  for (float a : alphas)
    if (!(a >= 0 && a <= 1)) throw py::value_error(fmt::format("alphas: {} is outside [0, 1]", a));
  if (alphas.empty()) throw py::value_error("alphas is empty");
  const std::shared_ptr<const Model> model = e.source_model();
  SINKQ_CHECK(model != nullptr, "analyze runs on a full-precision model: {} is a sinkq artifact (load its source "
              "model directory or GGUF file)", e.path());
  const std::string data = data_obj.is_none() ? "" : fspath(data_obj, "data");
  json j;
  interruptible([&] {
    const Tokenizer& tok = e.tokenizer();
    const int64_t max_pos = model->config().max_position_embeddings;
    const int64_t len = len_opt ? *len_opt : std::min<int64_t>(512, max_pos);
    SINKQ_CHECK(len <= max_pos, "len {} is longer than the model's max_position_embeddings ({})", len, max_pos);
    std::vector<std::vector<int32_t>> s;
    json data_json;
    if (!data.empty()) {
      CalibOptions co;
      co.samples = samples;
      co.len = len;
      co.seed = seed;
      co.bos = true;
      const CalibSet calib = load_calib(data, tok, co);
      s = calib.samples;
      data_json = {{"file", calib.file},         {"format", calib.format}, {"documents", calib.documents},
                   {"eligible", calib.eligible}, {"seed", seed},           {"bos", calib.bos}};
    } else {
      EncodeOptions raw;
      raw.add_special = false;
      raw.parse_special = false;
      const bool bos = tok.bos_id() >= 0;
      for (size_t i = 0; i < texts->size(); ++i) {
        std::vector<int32_t> t;
        if (bos) t.push_back(int32_t(tok.bos_id()));
        for (int32_t id : tok.encode((*texts)[i], raw)) t.push_back(id);
        if (int64_t(t.size()) > len) t.resize(size_t(len));
        SINKQ_CHECK(int64_t(t.size()) >= 2, "texts[{}] gives {} token(s): at least 2 are needed", i, t.size());
        s.push_back(std::move(t));
      }
      SINKQ_CHECK(!s.empty(), "texts is empty");
      data_json = {{"texts", s.size()}, {"bos", bos}};
    }
    AnalyzeOptions opt;
    opt.eta = eta;
    opt.bits = bits;
    opt.alphas = alphas;
    opt.tokenizer = &tok;
    const AnalyzeReport r = sinkq::analyze(model, s, opt);
    j = to_json(r);
    j["model_dir"] = e.path();
    j["data"] = data_json;
  });
  return to_py(j);
}

// ---- quantize --------------------------------------------------------------------------------------

// `sinkq quantize --json`: the same library call (quantize_artifact, include/sinkq/engine.h).
py::object quantize(py::handle src_obj, py::handle out_obj, py::handle recipe_obj, bool force,
                  const std::string& fp_dtype_name, std::optional<int> threads) {
  const std::string src = fspath(src_obj, "src"), out = fspath(out_obj, "out");
  if (recipe_obj.is_none()) throw py::type_error("quantize: a recipe is required (a preset name such as 'w8a8', a JSON "
                                                 "string, a recipe file or a dict)");
  const quant::Recipe cfg = *recipe_of(recipe_obj);
  set_threads(threads);
  QuantizeArtifactOptions qo;
  qo.fp_dtype = fp_dtype_name;
  qo.force = force;
  qo.pipeline.log = "quantize";
  qo.force_name = "force=True";
  qo.fp_dtype_name = "fp_dtype";
  const json j = interruptible([&] { return quantize_artifact(src, out, cfg, qo); });
  return to_py(j);
}

}  // namespace

}  // namespace sinkq::python

PYBIND11_MODULE(_sinkq, m) {
  using namespace sinkq;
  using namespace sinkq::python;
  m.doc() = "sinkq: outlier-aware low-bit quantization and inference of LLMs (the C++ engine's Python binding)";
#ifdef SINKQ_VERSION
  m.attr("__version__") = SINKQ_VERSION;
#endif
  // Each docstring starts with the signature as Python users write it (python/sinkq/_sinkq.pyi has
  // the same types): pybind11's own shows C++ names ("handle", "sinkq::python::PyModel") and float
  // defaults as 0.800000011920929.
  py::options options;
  options.disable_function_signatures();

  // sinkq::Error -> sinkq.Error(RuntimeError) with sinkq's message.
  py::register_exception<sinkq::Error>(m, "Error", PyExc_RuntimeError);
  m.attr("Error").attr("__doc__") = "A sinkq error: a bad path, recipe field, token id or length; the message names it.";

  py::class_<PyModel, std::shared_ptr<PyModel>> model(
      m, "Model",
      "A loaded model (an immutable Engine); sinkq.load() makes one. Every method runs a fresh session, so calls "
      "from several threads may run at once. Long calls stop at Ctrl-C (KeyboardInterrupt).");
  py::class_<Generation> generation(
      m, "Generation", "The iterator Model.generate() and Model.chat(stream=True) return: yields (id, text_piece); close() stops it.");

  m.def("presets", &quant::Recipe::preset_names, R"(presets() -> list[str]

The named quantization presets ('w8a8', 'prefixquant-w4a4kv4', ...), as `sinkq quantize --preset` takes them.)");

  m.def("load", &python::load, py::arg("path"), py::arg("recipe") = py::none(), py::arg("threads") = py::none(),
        R"(load(path: str | os.PathLike, recipe: str | dict | os.PathLike | None = None, threads: int | None = None) -> Model

Loads a model: a Hugging Face model directory, a GGUF file or a sinkq artifact.

recipe: None (full precision), a preset name ('w8a8', 'w4a8kv4', see presets()), a recipe as a dict
or JSON string (the layout `sinkq ... --dump-recipe` prints), or a recipe JSON file path. A model is
quantized in process by the simulator (runtime 'simulated'); an artifact runs on the packed int8/int4
kernels (runtime 'packed') and takes no recipe. threads: worker threads of the kernels (process-wide;
default SINKQ_THREADS or all cores). Errors: sinkq.Error naming the path or recipe field.)");

  m.def("quantize", &python::quantize, py::arg("src"), py::arg("out"), py::arg("recipe"), py::kw_only(),
        py::arg("force") = false, py::arg("fp_dtype") = "auto", py::arg("threads") = py::none(),
        R"(quantize(src: str | os.PathLike, out: str | os.PathLike, recipe: str | dict | os.PathLike, *, force: bool = False, fp_dtype: str = "auto", threads: int | None = None) -> dict

Quantizes the model at src with recipe and writes a sinkq artifact to out (what
`sinkq quantize --json` does and prints): returns {'out', 'model', 'config', 'files', 'total_bytes',
'tensor_bytes', 'packed_weight_bytes', 'fp16_bytes', 'ratio_to_fp16', 'fp_dtype', 'seconds'}.
fp_dtype: storage of the embeddings / lm_head: auto | f32 | f16 | bf16. force: replace out.)");

  model.def_property_readonly("path", [](const PyModel& s) { return s.e->path(); }, "The path it was loaded from")
      .def_property_readonly("runtime", [](const PyModel& s) { return std::string(s.e->runtime_name()); },
                             "'simulated' (a model quantized in process) or 'packed' (an artifact)")
      .def_property_readonly("vocab_size", &PyModel::vocab, "Rows of the logits")
      .def_property_readonly("max_context", [](const PyModel& s) { return s.e->max_context(); },
                             "Positions left for a sequence after the KV prefix")
      .def_property_readonly("prefix_tokens", [](const PyModel& s) { return s.e->prefix_tokens(); },
                             "The full-precision KV prefix in front of every sequence (empty: none)")
      .def_property_readonly("bos_id", [](const PyModel& s) { return s.e->tokenizer().bos_id(); }, "[BOS] (-1: none)")
      .def_property_readonly("stop_ids", [](const PyModel& s) { return s.e->stop_ids(); },
                             "The ids generation stops at (stop_on_eos)")
      .def_property_readonly("chat_template", [](const PyModel& s) { return s.e->tokenizer().chat_template(); },
                             "The model's Jinja chat template ('' : none, and chat() refuses)")
      .def_property_readonly("config", [](const PyModel& s) { return to_py(s.e->config_json()); },
                             "The configuration that runs, as a dict (Engine::config_json)")
      .def_property_readonly("recipe", [](const PyModel& s) { return to_py(s.e->recipe().to_json()); },
                             "The quantization recipe as a dict (what load(recipe=...) accepts)")
      .def("describe", [](const PyModel& s) { return s.e->describe(); }, R"(describe() -> str

One line: the configuration that runs.)")
      .def("__repr__",
           [](const PyModel& s) {
             return fmt::format("<sinkq.Model {:?} ({}): {}>", s.e->path(), s.e->runtime_name(), s.e->describe());
           })
      .def("tokenize", &python::tokenize, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = true,
           R"(tokenize(text: str, add_special: bool = True, parse_special: bool = True) -> list[int]

Text to token ids. add_special: the tokenizer's [BOS] as a prompt gets it (none when the KV prefix
holds [BOS]); parse_special: match special tokens such as '<|im_end|>' in the text.)")
      .def("detokenize", &python::detokenize, py::arg("ids"), py::arg("skip_special") = true,
           R"(detokenize(ids: Sequence[int], skip_special: bool = True) -> str

Token ids to text (invalid UTF-8 bytes become U+FFFD).)")
      .def("logits", &python::logits, py::arg("ids"), R"(logits(ids: Sequence[int]) -> numpy.ndarray

Every position's logits, a float32 array [len(ids), vocab_size] (a copy Python owns), from a fresh
session behind the KV prefix.)")
      .def("logprobs", &python::logprobs, py::arg("ids"), py::arg("start") = 1,
           R"(logprobs(ids: Sequence[int], start: int = 1) -> list[float]

Teacher-forced log-probabilities of ids[i] given ids[:i] for i in [start, len(ids)).)")
      .def("generate", &python::generate, py::arg("prompt"), py::arg("max_tokens") = 64, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop_on_eos") = true,
           py::arg("stop_on_bos") = false, py::arg("stop") = py::none(),
           R"(generate(prompt: str | Sequence[int], max_tokens: int = 64, temperature: float = 0.8, top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop_on_eos: bool = True, stop_on_bos: bool = False, stop: str | Sequence[str] | None = None) -> Generation

Streams generated tokens: an iterator of (id, text_piece) tuples, produced on a worker thread.

prompt: str (encoded as a prompt: [BOS] as the tokenizer says) or a list of token ids. temperature 0 is
greedy. stop_on_eos: stop at the model's EOS ids (not yielded); stop_on_bos: also at [BOS]
(llama2.c-trained models such as stories260K end a story that way). stop: strings that end the
generation where the text first contains one (at most 16; the stop string is not yielded, and text
that may begin one is held back until it is known not to: a last (-1, text) tuple carries what was
held at the end). Closing the iterator (close(), a `with` block, or dropping it) stops the
generation. Same ids as `sinkq generate --json` with the same options. The pieces continue the
prompt's text: prompt + "".join(pieces) reads as the whole.)")
      .def("chat", &python::chat, py::arg("messages"), py::kw_only(), py::arg("max_tokens") = py::none(),
           py::arg("temperature") = 0.8f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = 0,
           py::arg("stop") = py::none(), py::arg("stream") = false,
           R"(chat(messages: Sequence[dict | tuple[str, str]], *, max_tokens: int | None = None, temperature: float = 0.8, top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: str | Sequence[str] | None = None, stream: bool = False) -> str | Generation

The assistant's reply to a conversation, in the model's own chat template (chat_template):
messages are {'role': 'system' | 'user' | 'assistant', 'content': str} dicts or (role, content)
pairs. The reply ends at the template's end-of-turn token (ChatML's '<|im_end|>', ...), EOS, a stop
string, or max_tokens (default: what the context leaves, at most 512). With a KV prefix the
conversation runs behind it as `sinkq serve` does (an IntactKV[P] system prompt is the one the model
was quantized with). stream=True: the Generation to iterate instead of the text. sinkq.Error when
the model has no chat template.)")
      .def("ppl", &python::ppl, py::arg("text") = py::none(), py::kw_only(), py::arg("file") = py::none(),
           py::arg("ctx") = py::none(), py::arg("windows") = py::none(), py::arg("protocol") = py::none(),
           py::arg("kld") = false,
           R"(ppl(text: str | None = None, *, file: str | os.PathLike | None = None, ctx: int | None = None, windows: int | None = None, protocol: str | None = None, kld: bool = False) -> dict

Perplexity of a text (or file=PATH) as `sinkq ppl --json` computes it: returns {'ppl', 'mean_nll',
'tokens_scored', 'windows', 'ctx', 'protocol', 'file_tokens', 'window_nll', 'runtime'} (+ 'kld',
'window_kld' with kld=True). ctx: window length (default min(2048, max positions - prefix));
windows: score at most this many (default all); protocol: 'gptq' | 'bos' | 'prefix' | 'llamacpp' (default
'prefix' with a KV prefix, else 'gptq'); kld: KL divergence to the full-precision source model.)")
      .def("analyze", &python::analyze, py::kw_only(), py::arg("data") = py::none(), py::arg("texts") = py::none(),
           py::arg("samples") = 8, py::arg("len") = py::none(), py::arg("seed") = 0, py::arg("eta") = 64.0,
           py::arg("bits") = 4, py::arg("alphas") = std::vector<float>{0.15f, 0.45f, 0.75f, 1.0f},
           R"(analyze(*, data: str | os.PathLike | None = None, texts: Sequence[str] | None = None, samples: int = 8, len: int | None = None, seed: int = 0, eta: float = 64.0, bits: int = 4, alphas: Sequence[float] = (0.15, 0.45, 0.75, 1.0)) -> dict

Where the full-precision model's outliers are (`sinkq analyze --json` as a dict): token-wise
maxima per site, outlier tokens, attention to the first tokens, quantization kernel. Samples: data=PATH
(calibration text: jsonl or plain; `samples` sequences of `len` tokens drawn with `seed`) or
texts=[...] (each [BOS] + its tokens, cut at len).)");

  generation.def("__iter__", [](Generation& g) -> Generation& { return g; })
      .def("__next__", &Generation::next, "__next__() -> tuple[int, str]")
      .def("close", &Generation::close, R"(close() -> None

Stops the generation (the worker ends after the current token).)")
      .def("__enter__", [](Generation& g) -> Generation& { return g; })
      .def("__exit__", [](Generation& g, py::args) { g.close(); })
      .def_property_readonly("prompt_ids", &Generation::prompt_ids, "The prompt's ids (after the KV prefix)")
      .def_property_readonly("ids", &Generation::ids, "The ids yielded so far")
      .def_property_readonly("text", &Generation::text,
                             "The text of the ids yielded so far (with stop=: the text yielded, the stop string excluded)")
      .def_property_readonly("result", &Generation::result,
                             "After the end: {'generated_ids', 'stopped', 'cancelled', 'prefill_seconds', "
                             "'decode_seconds', 'stop_string'}; None before");

  // Shown as sinkq.Error, sinkq.Model, sinkq.Generation (what the package exports).
  for (const char* name : {"Error", "Model", "Generation"}) m.attr(name).attr("__module__") = "sinkq";
}
