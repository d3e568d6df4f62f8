#include "tokenizer/bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace sinkq::tok {

using nlohmann::json;

namespace {
bool json_bool(const json& m, const char* key, bool dflt) {
  auto it = m.find(key);
  return it == m.end() || it->is_null() ? dflt : it->get<bool>();
}
}  // namespace

BpeModel BpeModel::from_json(const json& m, const std::string& file) {
  BpeModel bm;
  bm.file_ = file;
  auto vit = m.find("vocab");
  SINKQ_CHECK(vit != m.end() && vit->is_object(), "{}: model.vocab is missing or not an object", file);
  int32_t max_id = -1;
  bm.token_to_id_.reserve(vit->size());
  for (const auto& [tok, idj] : vit->items()) {
    SINKQ_CHECK(idj.is_number_integer() && idj.get<int64_t>() >= 0 && idj.get<int64_t>() < (1 << 30),
                "{}: model.vocab['{}'] is not a valid id", file, tok);
    int32_t id = idj.get<int32_t>();
    bm.token_to_id_.emplace(tok, id);
    max_id = std::max(max_id, id);
  }
  bm.id_to_token_.assign(size_t(max_id + 1), std::string());
  for (const auto& [tok, id] : bm.token_to_id_) bm.id_to_token_[size_t(id)] = tok;

  if (auto mit = m.find("merges"); mit != m.end() && !mit->is_null()) {
    SINKQ_CHECK(mit->is_array(), "{}: model.merges is not an array", file);
    bm.merges_.reserve(mit->size());
    std::string merged;
    for (size_t r = 0; r < mit->size(); ++r) {
      const json& e = (*mit)[r];
      std::string_view a, b;
      if (e.is_string()) {  // "left right"
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        SINKQ_CHECK(sp != std::string::npos, "{}: model.merges[{}] '{}' is not 'left right'", file, r, s);
        // This format cannot express tokens that contain ' '. Llama-2's file still has 3 such
        // entries ("   " = ' ' + '  ' or '  ' + ' '?); HF's parser would reject them. Skip them:
        // the Llama normalizer turns every space into '▁', so those tokens can never occur.
        if (sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) continue;
        a = std::string_view(s).substr(0, sp);
        b = std::string_view(s).substr(sp + 1);
      } else {
        SINKQ_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                    "{}: model.merges[{}] is neither 'a b' nor [a, b]", file, r);
        a = e[0].get_ref<const std::string&>();
        b = e[1].get_ref<const std::string&>();
      }
      merged.assign(a);
      merged.append(b);
      int32_t ia = bm.token_to_id(a), ib = bm.token_to_id(b), im = bm.token_to_id(merged);
      SINKQ_CHECK(ia >= 0 && ib >= 0 && im >= 0, "{}: model.merges[{}] ('{}', '{}'): token not in model.vocab",
                  file, r, a, b);
      // A repeated pair keeps its last rank, as HF's HashMap collect does.
      bm.merges_[pair_key(ia, ib)] = MergeInfo{int32_t(r), im};
    }
  }

  if (auto u = m.find("unk_token"); u != m.end() && u->is_string()) {
    bm.unk_id_ = bm.token_to_id(u->get_ref<const std::string&>());
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(k);
    SINKQ_CHECK(it == m.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty()),
                "{}: model.{} is not supported (only null or \"\")", file, k);
  }
  // model.dropout is a training-time option; encoding here is always deterministic.
  bm.fuse_unk_ = json_bool(m, "fuse_unk", false);
  bm.byte_fallback_ = json_bool(m, "byte_fallback", false);
  bm.ignore_merges_ = json_bool(m, "ignore_merges", false);

  std::fill(std::begin(bm.ascii_ids_), std::end(bm.ascii_ids_), -1);
  for (int c = 0; c < 128; ++c) bm.ascii_ids_[c] = bm.token_to_id(std::string(1, char(c)));
  for (int b = 0; b < 256; ++b) {
    bm.byte_level_ids_[b] = bm.token_to_id(byte_level_char(uint8_t(b)));
    bm.byte_fallback_ids_[b] = bm.token_to_id(fmt::format("<0x{:02X}>", b));
  }
  return bm;
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && size_t(id) < id_to_token_.size() ? id_to_token_[size_t(id)] : kEmpty;
}

const BpeModel::MergeInfo* BpeModel::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initial_symbols(std::string_view piece, bool byte_level, std::vector<int32_t>& syms) const {
  syms.clear();
  if (byte_level) {
    for (char c : piece) {
      int32_t id = byte_level_ids_[uint8_t(c)];
      SINKQ_CHECK(id >= 0, "{}: byte 0x{:02X} has no byte-level token in model.vocab", file_, uint8_t(c));
      syms.push_back(id);
    }
    return;
  }
  bool prev_unk = false;
  for (size_t i = 0; i < piece.size();) {
    size_t n = utf8_valid_len(piece, i);
    if (n == 0) n = 1;  // cannot happen for validated input; treat the byte as one symbol
    std::string_view ch = piece.substr(i, n);
    i += n;
    int32_t id = n == 1 && uint8_t(ch[0]) < 128 ? ascii_ids_[uint8_t(ch[0])] : token_to_id(ch);
    if (id >= 0) {
      syms.push_back(id);
      prev_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all &= byte_fallback_ids_[uint8_t(c)] >= 0;
      if (all) {
        for (char c : ch) syms.push_back(byte_fallback_ids_[uint8_t(c)]);
        prev_unk = false;
        continue;
      }
    }
    SINKQ_CHECK(unk_id_ >= 0, "{}: character '{}' is not in model.vocab and model.unk_token is not set", file_, ch);
    if (!(fuse_unk_ && prev_unk)) syms.push_back(unk_id_);
    prev_unk = true;
  }
}

void BpeModel::encode(std::string_view piece, bool byte_level, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {  // a piece that is itself a token is emitted whole (Llama-3 / tiktoken)
    int32_t id;
    if (byte_level) {
      std::string s;
      for (char c : piece) s += byte_level_char(uint8_t(c));
      id = token_to_id(s);
    } else {
      id = token_to_id(piece);
    }
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> syms;
  initial_symbols(piece, byte_level, syms);
  merge(syms, syms.size() > kNaiveMaxSymbols);
  out.insert(out.end(), syms.begin(), syms.end());
}

void BpeModel::merge(std::vector<int32_t>& syms, bool use_heap) const {
  if (syms.size() < 2 || merges_.empty()) return;
  if (use_heap) {
    merge_heap(syms);
  } else {
    merge_naive(syms);
  }
}

void BpeModel::merge_naive(std::vector<int32_t>& syms) const {
  for (;;) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const MergeInfo* m = find_merge(syms[i], syms[i + 1]);
      if (m && m->rank < best_rank) {  // strict '<': leftmost wins among equal ranks
        best_rank = m->rank;
        best_id = m->id;
        best_i = i;
      }
    }
    if (best_id < 0) return;
    syms[best_i] = best_id;
    syms.erase(syms.begin() + std::ptrdiff_t(best_i) + 1);
  }
}

void BpeModel::merge_heap(std::vector<int32_t>& syms) const {
  // Symbols form a doubly linked list over their original positions; a merged pair lives on at
  // the left symbol's position, so position order is text order. Heap entries are (rank, pos) of
  // a candidate pair; entries made stale by earlier merges are detected on pop (the pair now at
  // pos no longer has that rank — ranks identify pairs uniquely) and dropped.
  const int32_t n = int32_t(syms.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, pos;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap;
  heap.reserve(size_t(n));
  auto push = [&](int32_t i) {
    if (i < 0 || next[size_t(i)] < 0) return;
    if (const MergeInfo* m = find_merge(syms[size_t(i)], syms[size_t(next[size_t(i)])])) {
      heap.push_back({m->rank, i});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const MergeInfo* m = find_merge(syms[size_t(i)], syms[size_t(i + 1)])) heap.push_back({m->rank, i});
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    Cand c = heap.back();
    heap.pop_back();
    const size_t i = size_t(c.pos);
    if (syms[i] < 0 || next[i] < 0) continue;  // symbol merged away / now last
    const size_t j = size_t(next[i]);
    const MergeInfo* m = find_merge(syms[i], syms[j]);
    if (!m || m->rank != c.rank) continue;  // stale
    syms[i] = m->id;
    syms[j] = -1;
    next[i] = next[j];
    if (next[i] >= 0) prev[size_t(next[i])] = int32_t(i);
    push(prev[i]);
    push(int32_t(i));
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) syms[w++] = syms[size_t(i)];
  syms.resize(w);
}

}  // namespace sinkq::tok
