#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/mmap.h"
#include "kernels/ops.h"

namespace sinkq::cli {

CLI::Option* add_model_flag(CLI::App& cmd, CommonFlags& f, bool required) {
  return cmd.add_option("-m,--model", f.model, "Hugging Face model directory (config.json, *.safetensors, tokenizer), a GGUF file (its full-precision model is the dequantized one), or a sinkq artifact")
      ->required(required);
}

void add_output_flags(CLI::App& cmd, CommonFlags& f) {
  cmd.add_flag("--json", f.json, "Print one JSON document on stdout instead of text");
  cmd.add_option("-t,--threads", f.threads, "Worker threads (default: SINKQ_THREADS or all cores)")
      ->check(decimal_in(1, 1024));
}

namespace {

// "" when s is a plain decimal integer that fits T and lies in [lo, hi]; else why not.
template <class T>
std::string decimal_error(const std::string& s, T lo, T hi) {
  const bool neg_ok = lo < T(0);
  bool plain = !s.empty();
  for (size_t i = 0; i < s.size(); ++i)
    plain &= (s[i] >= '0' && s[i] <= '9') || (i == 0 && s[i] == '-' && neg_ok && s.size() > 1);
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (!plain || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    return fmt::format("'{}' is not an integer in [{}, {}]", s, lo, hi);
  return "";
}

}  // namespace

CLI::Validator decimal_in(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& s) { return decimal_error<int64_t>(s, lo, hi); },
                        fmt::format("INT in [{}, {}]", lo, hi));
}

int64_t parse_decimal(const std::string& s, int64_t lo, int64_t hi, const std::string& flag) {
  const std::string err = decimal_error<int64_t>(s, lo, hi);
  SINKQ_CHECK(err.empty(), "{}: {}", flag, err);
  return std::stoll(s);
}

CLI::Validator decimal_u64() {
  return CLI::Validator([](std::string& s) { return decimal_error<uint64_t>(s, 0, UINT64_MAX); }, "UINT64");
}

void apply_threads(const CommonFlags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
}

void print_json(const nlohmann::json& j) {
  const std::string s = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// "42 s", "3 m 05 s", "1 h 02 m".
std::string human_seconds(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{} m {:02d} s", int64_t(s) / 60, int(int64_t(s) % 60));
  return fmt::format("{} h {:02d} m", int64_t(s) / 3600, int(int64_t(s) % 3600 / 60));
}

void progress(const std::string& what, int64_t done, int64_t total, const std::string& extra) {
  using clock_type = std::chrono::steady_clock;
  static const bool tty = ::isatty(2);
  static auto last = clock_type::now() - std::chrono::hours(1);
  // The stage: its first report starts the clock (a new `what`, or a count that went back).
  static std::string stage;
  static int64_t first_done = 0, prev_done = 0;
  static clock_type::time_point start;
  const auto now = clock_type::now();
  if (what != stage || done < prev_done) {
    stage = what;
    first_done = done;
    start = now;
  }
  prev_done = done;
  const bool final = done >= total;
  if (!final && now - last < std::chrono::milliseconds(tty ? 100 : 2000)) return;
  last = now;
  // Elapsed since the stage's first report; the rest at the rate since then.
  const double el = std::chrono::duration<double>(now - start).count();
  std::string timing = fmt::format("{} elapsed", human_seconds(el));
  if (!final && done > first_done && el > 0)
    timing += ", ETA " + human_seconds(el / double(done - first_done) * double(total - done));
  std::fprintf(stderr, "%s%s %lld/%lld  [%s]%s%s%s", tty ? "\r" : "", what.c_str(), (long long)done, (long long)total,
               timing.c_str(), extra.empty() ? "" : "  ", extra.c_str(), tty ? "\x1b[K" : "");
  if (!tty || final) std::fputc('\n', stderr);
  std::fflush(stderr);
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

void add_calib_flags(CLI::App& cmd, CalibFlags& f) {
  cmd.add_option("--calib", f.calib, "Calibration text (.txt, or .jsonl with a \"text\" field per line)")->required();
  cmd.add_option("--calib-samples", f.samples, "Number of samples")->capture_default_str();
  cmd.add_option("--calib-len", f.len, "Tokens per sample, [BOS] included (default min(512, max positions))");
  cmd.add_option("--calib-seed", f.seed, "Sampling seed")->capture_default_str();
}

void add_outlier_sites_flag(CLI::App& cmd, std::string& value) {
  cmd.add_option("--outlier-sites", value,
                 "Where outlier tokens are measured: down_in (PrefixQuant's site) and/or out (the residual stream, "
                 "where a sink that the norms flatten at every linear input still shows), comma-separated")
      ->capture_default_str();
}

std::vector<Site> parse_outlier_sites(const std::string& value) {
  std::vector<Site> sites;
  size_t b = 0;
  while (b <= value.size()) {
    const size_t e = std::min(value.find(',', b), value.size());
    const std::string item = value.substr(b, e - b);
    if (item == "down_in") sites.push_back(Site::DownIn);
    else if (item == "out") sites.push_back(Site::Out);
    else fail("--outlier-sites: '{}' is not a site to measure outlier tokens at (down_in, out)", item);
    b = e + 1;
  }
  SINKQ_CHECK(sites.size() == 1 || (sites.size() == 2 && sites[0] == Site::DownIn && sites[1] == Site::Out),
              "--outlier-sites: '{}': give down_in, out or down_in,out", value);
  return sites;
}

std::vector<float> parse_number_list(std::string_view flag, const std::string& list, double lo, double hi,
                                     bool lo_open) {
  const std::string range = fmt::format("{}{}, {}]", lo_open ? "(" : "[", lo, hi);
  std::vector<float> out;
  size_t pos = 0;
  while (true) {
    const size_t end = std::min(list.find(',', pos), list.size());
    std::string item = list.substr(pos, end - pos);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    SINKQ_CHECK(!item.empty(), "{} '{}': empty item (expected a comma-separated list of numbers in {})", flag, list,
                range);
    char* stop = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &stop);
    SINKQ_CHECK(stop && *stop == '\0' && errno == 0 && std::isfinite(v),
                "{} '{}': '{}' is not a number (expected a comma-separated list of numbers in {})", flag, list, item,
                range);
    SINKQ_CHECK((lo_open ? v > lo : v >= lo) && v <= hi, "{} '{}': {} is outside {}", flag, list, item, range);
    out.push_back(float(v));
    if (end == list.size()) break;
    pos = end + 1;
  }
  return out;
}

CalibOptions calib_options(const CalibFlags& f, int64_t max_pos) {
  SINKQ_CHECK(f.samples >= 1, "--calib-samples must be >= 1 (got {})", f.samples);
  SINKQ_CHECK(f.len == 0 || f.len >= 2, "--calib-len must be >= 2 (got {})", f.len);
  CalibOptions co;
  co.samples = f.samples;
  co.len = f.len > 0 ? f.len : std::min<int64_t>(512, max_pos);
  co.seed = f.seed;
  SINKQ_CHECK(co.len <= max_pos, "--calib-len {} exceeds the model's max_position_embeddings ({})", co.len, max_pos);
  return co;
}

}  // namespace sinkq::cli
