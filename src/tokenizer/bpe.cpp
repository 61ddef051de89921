#include "tokenizer/bpe.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <queue>

#include "core/log.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

constexpr std::string_view kWhere = "model";

// Ids are u32 in HF; we keep them below 2^31 and reject vocabularies so sparse that the
// id -> token table would dwarf the vocabulary itself.
constexpr int64_t kMaxId = (int64_t{1} << 31) - 2;

// Splits a legacy merge line "a b" into its two halves (HF: exactly one ' ').
Result<std::pair<std::string, std::string>> split_legacy_merge(std::string_view line, size_t rank) {
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
    return invalid_argument("model.merges[{}]: '{}' is not two tokens separated by one space", rank,
                            line);
  }
  return std::make_pair(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const nlohmann::json& j) {
  LS_ASSIGN_OR_RETURN(std::string type, json_type(j, kWhere));
  if (type != "BPE") return unimplemented("model type '{}' is not supported (only BPE)", type);
  auto m = std::unique_ptr<BpeModel>(new BpeModel());

  const nlohmann::json* vocab = json_member(j, "vocab");
  if (vocab != nullptr && !vocab->is_object()) {
    return invalid_argument("model.vocab: expected an object of token -> id");
  }
  int64_t max_id = -1;
  if (vocab != nullptr) {
    m->vocab_.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it.value().is_number_integer()) {
        return invalid_argument("model.vocab['{}']: expected an integer id", it.key());
      }
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > kMaxId) {
        return invalid_argument("model.vocab['{}']: id {} out of range", it.key(), id);
      }
      m->vocab_[it.key()] = static_cast<int32_t>(id);
      max_id = std::max(max_id, id);
    }
  }
  if (max_id >= 2 * static_cast<int64_t>(m->vocab_.size()) + 65536) {
    return invalid_argument("model.vocab: ids up to {} for only {} entries", max_id,
                            m->vocab_.size());
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  m->id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : m->vocab_) {
    m->id_to_token_[id] = token;
    m->id_present_[id] = 1;
  }

  LS_ASSIGN_OR_RETURN(auto unk, json_opt_string(j, "unk_token", kWhere));
  LS_ASSIGN_OR_RETURN(m->fuse_unk_, json_bool(j, "fuse_unk", false, kWhere));
  LS_ASSIGN_OR_RETURN(m->byte_fallback_, json_bool(j, "byte_fallback", false, kWhere));
  LS_ASSIGN_OR_RETURN(m->ignore_merges_, json_bool(j, "ignore_merges", false, kWhere));
  LS_ASSIGN_OR_RETURN(auto prefix, json_opt_string(j, "continuing_subword_prefix", kWhere));
  LS_ASSIGN_OR_RETURN(auto suffix, json_opt_string(j, "end_of_word_suffix", kWhere));
  m->continuing_subword_prefix_ = prefix.value_or("");
  m->end_of_word_suffix_ = suffix.value_or("");
  if (const nlohmann::json* dropout = json_member(j, "dropout"); dropout != nullptr) {
    if (!dropout->is_number()) return invalid_argument("model.dropout: expected a number");
    if (dropout->get<double>() > 0.0) {
      LS_LOG_WARN("tokenizer.json sets BPE dropout {}; encoding is deterministic (no dropout)",
                  dropout->get<double>());
    }
  }
  if (unk) {
    if (auto it = m->vocab_.find(*unk); it != m->vocab_.end()) {
      m->unk_id_ = it->second;
    } else {
      LS_LOG_WARN(
          "tokenizer.json: unk_token '{}' is not in the vocabulary; unknown characters "
          "will be dropped",
          *unk);
    }
  }
  // Cutting long words needs single characters to be their own symbols.
  m->can_split_ = m->continuing_subword_prefix_.empty() && m->end_of_word_suffix_.empty();
  for (int b = 0; b < 256; ++b) {
    auto it = m->vocab_.find(fmt::format("<0x{:02X}>", b));
    m->byte_token_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }

  const nlohmann::json* merges = json_member(j, "merges");
  if (merges != nullptr && !merges->is_array()) {
    return invalid_argument("model.merges: expected an array");
  }
  if (merges != nullptr) {
    m->merges_.reserve(merges->size());
    int32_t rank = 0;
    const size_t prefix_len = m->continuing_subword_prefix_.size();
    for (const auto& item : *merges) {
      std::pair<std::string, std::string> pair;
      if (item.is_string()) {
        const std::string& line = item.get_ref<const std::string&>();
        if (line.rfind("#version", 0) == 0) continue;
        LS_ASSIGN_OR_RETURN(pair, split_legacy_merge(line, static_cast<size_t>(rank)));
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() &&
                 item[1].is_string()) {
        pair = {item[0].get<std::string>(), item[1].get<std::string>()};
      } else {
        return invalid_argument("model.merges[{}]: expected \"a b\" or [\"a\", \"b\"]", rank);
      }
      auto a = m->vocab_.find(pair.first);
      auto b = m->vocab_.find(pair.second);
      if (a == m->vocab_.end() || b == m->vocab_.end()) {
        return invalid_argument("model.merges[{}]: token '{}' is not in the vocabulary", rank,
                                a == m->vocab_.end() ? pair.first : pair.second);
      }
      if (pair.second.size() < prefix_len) {
        return invalid_argument("model.merges[{}]: '{}' is shorter than the subword prefix", rank,
                                pair.second);
      }
      const std::string merged = pair.first + pair.second.substr(prefix_len);
      auto n = m->vocab_.find(merged);
      if (n == m->vocab_.end()) {
        return invalid_argument("model.merges[{}]: merged token '{}' is not in the vocabulary",
                                rank, merged);
      }
      // A repeated pair keeps its last rank, as HF's map construction does.
      m->merges_[pair_key(a->second, b->second)] = {rank, n->second};
      // The characters this merge can join: the last of a and the first of b (after the
      // prefix). Empty halves cannot be merged into anything; they leave no junction.
      const std::string_view b_rest = std::string_view(pair.second).substr(prefix_len);
      if (!pair.first.empty() && !b_rest.empty()) {
        size_t lead = pair.first.size() - 1;
        while (lead > 0 && (static_cast<unsigned char>(pair.first[lead]) & 0xC0) == 0x80) --lead;
        m->junctions_.insert(pair_key(static_cast<int32_t>(decode_utf8(pair.first, lead).cp),
                                      static_cast<int32_t>(decode_utf8(b_rest, 0).cp)));
      }
      ++rank;
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_present_[id]) {
    return nullptr;
  }
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() < kMaxCachedWordBytes || !can_split_) {
    merge_cached(word, out);
    return;
  }
  // A long word (SentencePiece-style tokenizers see whole sentences as one word): cut it where
  // no merge can ever join the two sides, and merge the pieces independently. Exact, because
  // merges on one side never see the other, and it keeps the priority queue small.
  size_t start = 0;
  size_t i = 0;
  bool prev_known = false;
  char32_t prev = 0;
  while (i < word.size()) {
    const Utf8Step st = decode_utf8(word, i);
    const bool known = vocab_.find(word.substr(i, st.len)) != vocab_.end();
    if (i > start && known && prev_known && !junctions_.count(pair_key(prev, st.cp))) {
      merge_cached(word.substr(start, i - start), out);
      start = i;
    }
    prev_known = known;
    prev = st.cp;
    i += st.len;
  }
  merge_cached(word.substr(start), out);
}

void BpeModel::merge_cached(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::unique_lock lock(cache_mu_);
    // A full cache starts over, so a long-running server keeps caching the current text's words.
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  // [num_symbols] the word as a doubly linked list; merged symbols stay in place with len 0.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, len});
    if (n > 0) symbols[n - 1].next = n;
  };

  // Pending unknown characters (unk id, bytes), emitted before the next known symbol.
  bool has_unk = false;
  int32_t unk_id = 0;
  uint32_t unk_len = 0;
  std::string buf;
  size_t i = 0;
  while (i < word.size()) {
    const uint32_t len = utf8_len_of_lead(static_cast<unsigned char>(word[i]));
    const size_t clen = std::min<size_t>(len, word.size() - i);
    const bool is_first = i == 0;
    const bool is_last = i + clen >= word.size();
    std::string_view ch = word.substr(i, clen);
    std::string_view key = ch;
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      buf.clear();
      if (!is_first) buf += continuing_subword_prefix_;
      buf += ch;
      if (is_last) buf += end_of_word_suffix_;
      key = buf;
    }
    i += clen;
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      if (has_unk) {
        add(unk_id, unk_len);
        has_unk = false;
      }
      add(it->second, static_cast<uint32_t>(clen));
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : key) all = all && byte_token_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // As in HF, a pending unk is not flushed here; it lands before the next known symbol.
        for (char c : key) add(byte_token_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (has_unk && fuse_unk_) {
        unk_len += static_cast<uint32_t>(clen);
      } else {
        if (has_unk) add(unk_id, unk_len);
        has_unk = true;
        unk_id = *unk_id_;
        unk_len = static_cast<uint32_t>(clen);
      }
    }
  }
  if (has_unk) add(unk_id, unk_len);

  struct Merge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  struct Later {
    bool operator()(const Merge& a, const Merge& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
    }
  };
  auto find_merge = [&](int32_t a, int32_t b) -> const MergeInfo* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::priority_queue<Merge, std::vector<Merge>, Later> queue;
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeInfo* mi = find_merge(symbols[k].id, symbols[k + 1].id)) {
      queue.push({mi->rank, static_cast<int32_t>(k), mi->new_id});
    }
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    const MergeInfo* current = find_merge(cur.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeInfo* mi = find_merge(symbols[cur.prev].id, cur.id)) {
        queue.push({mi->rank, cur.prev, mi->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const MergeInfo* mi = find_merge(cur.id, symbols[cur.next].id)) {
        queue.push({mi->rank, top.pos, mi->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace ls::tok
