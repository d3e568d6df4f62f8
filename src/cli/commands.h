// sinkq/cli/commands.h — one register function per subcommand; shared CLI helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>

#include "calib/calib_data.h"
#include "model/sites.h"

namespace sinkq::cli {

void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);
void register_ppl(CLI::App& app);
void register_bench(CLI::App& app);
void register_analyze(CLI::App& app);
void register_prefix(CLI::App& app);
void register_quantize(CLI::App& app);
void register_ladder(CLI::App& app);
void register_calib(CLI::App& app);
void register_eval(CLI::App& app);
void register_serve(CLI::App& app);

// Flags every model command shares, declared once here.
struct CommonFlags {
  std::string model;
  bool json = false;
  int threads = 0;  // 0 = default (SINKQ_THREADS or all cores)
};
CLI::Option* add_model_flag(CLI::App& cmd, CommonFlags& f, bool required = true);  // -m/--model DIR
void add_output_flags(CLI::App& cmd, CommonFlags& f); // --json, --threads
// A validator for integer flags: a plain decimal integer (digits, a leading '-' only when lo < 0)
// in [lo, hi] — no hex, exponent, blank or overflowing value slips through as a default or a wrap.
CLI::Validator decimal_in(int64_t lo, int64_t hi);
// The same for unsigned 64-bit values (seeds): [0, 2^64 − 1].
CLI::Validator decimal_u64();
// One item of a list flag, by the same rule: the value, or a sinkq::Error naming `flag`.
int64_t parse_decimal(const std::string& s, int64_t lo, int64_t hi, const std::string& flag);
void apply_threads(const CommonFlags& f);

// --calib FILE (required), --calib-samples N, --calib-len L, --calib-seed S: the calibration
// sampling of the commands that take calibration text alone (prefix find, calib fisher).
struct CalibFlags {
  std::string calib;
  int64_t samples = 8, len = 0;  // len 0: min(512, max_position_embeddings)
  uint64_t seed = 0;
};
void add_calib_flags(CLI::App& cmd, CalibFlags& f);
// The sampling options for a model of `max_pos` positions; errors name the flag.
CalibOptions calib_options(const CalibFlags& f, int64_t max_pos);

// --outlier-sites down_in[,out]: where outlier tokens are measured (calib/outliers.h kOutlierSites);
// the parser's errors name the flag.
void add_outlier_sites_flag(CLI::App& cmd, std::string& value);
std::vector<Site> parse_outlier_sites(const std::string& value);

// "0.15,0.45,1" -> {0.15, 0.45, 1}: a comma-separated list of numbers, each in [lo, hi] (lo
// excluded when lo_open); blanks around items allowed; errors name `flag` and the item.
std::vector<float> parse_number_list(std::string_view flag, const std::string& list, double lo, double hi,
                                     bool lo_open = false);

// Prints JSON on stdout (one document, newline-terminated).
void print_json(const nlohmann::json& j);
// Progress line on stderr ("\r" rewrite when stderr is a terminal, else whole lines, throttled).
void progress(const std::string& what, int64_t done, int64_t total, const std::string& extra = "");
// Peak resident set size of this process in bytes.
int64_t peak_rss_bytes();

}  // namespace sinkq::cli
