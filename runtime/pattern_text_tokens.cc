#include "runtime/pattern_text_tokens.h"

#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace ag::runtime {
namespace {

// A class's transitions from every state, as bytes: classes with equal columns are one to a token.
std::string Column(const PatternDfa& dfa, size_t cls) {
  std::string column(dfa.states() * sizeof(uint32_t), '\0');
  for (size_t s = 0; s < dfa.states(); ++s) {
    const uint32_t next = dfa.Step(static_cast<uint32_t>(s), cls);
    std::memcpy(column.data() + s * sizeof(uint32_t), &next, sizeof(uint32_t));
  }
  return column;
}

}  // namespace

std::unique_ptr<const PatternTextTokens> PatternTextTokens::Build(const PatternDfa& dfa,
                                                                  const JsonVocabulary& vocabulary) {
  std::unique_ptr<PatternTextTokens> table(new PatternTextTokens(dfa));
  std::vector<uint32_t> same(dfa.classes());  // each class's first class with the same column
  {
    absl::flat_hash_map<std::string, uint32_t> first;
    for (size_t c = 0; c < dfa.classes(); ++c) same[c] = first.try_emplace(Column(dfa, c), static_cast<uint32_t>(c)).first->second;
  }
  // Each text token's key: its whole characters' classes, then its unfinished character's bytes.
  absl::flat_hash_map<std::string, uint32_t> groups;
  const std::vector<int32_t>& ids = vocabulary.text_tokens();
  std::vector<uint32_t> group_of(ids.size());
  std::vector<uint32_t> sizes;
  std::string bytes, key;
  std::vector<uint32_t> classes;
  for (size_t i = 0; i < ids.size(); ++i) {
    vocabulary.TokenBytesOf(ids[i], &bytes);
    classes.clear();
    uint32_t tail = 0;
    for (size_t at = 0; at < bytes.size();) {
      const auto lead = static_cast<uint8_t>(bytes[at]);
      const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;  // a text token's UTF-8 is valid
      if (at + length > bytes.size()) {  // the last character, unfinished
        for (size_t k = bytes.size(); k-- > at;) tail = (tail << 8) | static_cast<uint8_t>(bytes[k]);
        break;
      }
      uint32_t cp = length == 1 ? lead : lead & (0x7F >> length);
      for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(bytes[at + k]) & 0x3F);
      classes.push_back(same[dfa.Class(cp)]);
      at += length;
    }
    key.assign(reinterpret_cast<const char*>(classes.data()), classes.size() * sizeof(uint32_t));
    key.append(reinterpret_cast<const char*>(&tail), sizeof(tail));
    const auto [it, added] = groups.try_emplace(key, static_cast<uint32_t>(sizes.size()));
    if (added) {
      sizes.push_back(0);
      table->classes_.insert(table->classes_.end(), classes.begin(), classes.end());
      table->group_classes_.push_back(static_cast<uint32_t>(table->classes_.size()));
      table->tails_.push_back(tail);
    }
    group_of[i] = it->second;
    ++sizes[it->second];
  }
  for (const uint32_t size : sizes) table->group_ids_.push_back(table->group_ids_.back() + size);
  table->ids_.resize(ids.size());
  std::vector<uint32_t> next(table->group_ids_.begin(), table->group_ids_.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) table->ids_[next[group_of[i]]++] = ids[i];
  return table;
}

void PatternTextTokens::Set(uint32_t state, std::vector<uint64_t>& mask) const {
  for (size_t g = 0; g + 1 < group_ids_.size(); ++g) {
    uint32_t s = state;
    for (uint32_t k = group_classes_[g]; k < group_classes_[g + 1] && s != PatternDfa::kDead; ++k) s = dfa_.Step(s, classes_[k]);
    if (s == PatternDfa::kDead) continue;
    if (tails_[g] != 0) {  // its first bytes, taken where some character they begin lives (as Feed takes them)
      PatternDfa::Cursor at{.state = s};
      bool live = true;
      for (uint32_t tail = tails_[g]; tail != 0 && live; tail >>= 8) live = dfa_.Feed(at, static_cast<uint8_t>(tail & 0xFF));
      if (!live) continue;
    }
    for (uint32_t i = group_ids_[g]; i < group_ids_[g + 1]; ++i) {
      mask[static_cast<size_t>(ids_[i]) / 64] |= uint64_t{1} << (ids_[i] % 64);
    }
  }
}

const PatternTextTokens* PatternTextTokenTables::Get(size_t pattern, const PatternDfa& dfa,
                                                     const JsonVocabulary& vocabulary) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<const PatternTextTokens>& table = tables_[pattern];
  if (table == nullptr && built_ < kMaxTables) {
    table = PatternTextTokens::Build(dfa, vocabulary);
    ++built_;
  }
  return table.get();
}

}  // namespace ag::runtime
