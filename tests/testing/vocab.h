// Test helpers for the tokenizer: a small synthetic byte-level vocabulary,
// and an HF tokenizer.json generated from tiktoken ranks (so that the real
// GLM-4 vocabulary is never copied into the repository).
#ifndef AUTOGLM_TESTS_TESTING_VOCAB_H_
#define AUTOGLM_TESTS_TESTING_VOCAB_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"

namespace ag::testing {

// The GLM-4 tokenizer folder from ../shared, or "" when absent.
inline std::string SharedGlm4Tokenizer() {
  const char* dir = std::getenv("AUTOGLM_GLM4_TOKENIZER");
  const std::string path = dir != nullptr ? dir : "../shared/tokenizers/glm4";
  return std::filesystem::exists(path + "/tokenizer.model") ? path : "";
}

inline std::string Base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    for (int s : {18, 12, 6}) out += kAlphabet[(v >> s) & 63];
    out += "=";
  }
  return out;
}

// A byte-level vocabulary: the 256 bytes (in a shuffled order) then merges
// chosen so that merge order matters ("ab" before "bc", "abc" from "ab"+"c").
inline std::vector<std::string> SyntheticRanks() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>((b * 167 + 13) % 256)));
  for (const char* t : {"bc", "ab", "abc", "th", "he", "the", " t", " the", "in", "ing", "  ", "    ", "\n\n", "12",
                        "123", "aa", "aaa", "aaaa", "\xe4\xbd", "\xe4\xbd\xa0", "\xe5\xa5\xbd", "\xe4\xbd\xa0\xe5\xa5\xbd"}) {
    tokens.push_back(t);
  }
  return tokens;
}

inline void WriteTiktoken(const std::string& path, const std::vector<std::string>& ranks) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < ranks.size(); ++i) out << Base64(ranks[i]) << " " << i << "\n";
}

// Reads a tiktoken file back into ranks (for generating tokenizer.json from the shared vocabulary).
inline std::vector<std::string> ReadTiktokenRanks(const std::string& path);

// HF byte-level BPE tokenizer.json with the same tokens and ids, GLM-4's
// special tokens as added tokens after the ordinary ones, and merges.
inline void WriteHfTokenizerJson(const std::string& path, const std::vector<std::string>& ranks,
                                 const std::vector<std::string>& specials) {
  std::vector<std::string> spell(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    spell[b] = s;
  }
  auto spelled = [&](const std::string& bytes) {
    std::string s;
    for (unsigned char c : bytes) s += spell[c];
    return s;
  };
  absl::flat_hash_map<std::string, size_t> rank;
  for (size_t i = 0; i < ranks.size(); ++i) rank[ranks[i]] = i;
  nlohmann::json vocab = nlohmann::json::object();  // a sorted map: ordered_json's linear lookups are too slow here
  nlohmann::json merges = nlohmann::json::array();
  for (size_t i = 0; i < ranks.size(); ++i) {
    vocab[spelled(ranks[i])] = i;
    const std::string& t = ranks[i];
    if (t.size() < 2) continue;
    size_t best_split = 0, best_rank = SIZE_MAX;  // the split whose parts have the lowest ranks
    for (size_t k = 1; k < t.size(); ++k) {
      auto a = rank.find(t.substr(0, k)), b = rank.find(t.substr(k));
      if (a == rank.end() || b == rank.end()) continue;
      const size_t r = std::max(a->second, b->second);
      if (r < best_rank) {
        best_rank = r;
        best_split = k;
      }
    }
    if (best_split > 0) merges.push_back(spelled(t.substr(0, best_split)) + " " + spelled(t.substr(best_split)));
  }
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", ranks.size() + i}, {"content", specials[i]}, {"special", true}});
  }
  nlohmann::json j = {{"version", "1.0"},
                              {"added_tokens", added},
                              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  std::ofstream(path, std::ios::binary) << j.dump();
}

inline std::vector<std::string> ReadTiktokenRanks(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> ranks;
  std::string line;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  while (std::getline(in, line)) {
    const std::string b64 = line.substr(0, line.find(' '));
    std::string bytes;
    uint32_t bits = 0;
    int have = 0;
    for (char c : b64) {
      if (c == '=') break;
      bits = (bits << 6) | static_cast<uint32_t>(value(c));
      have += 6;
      if (have >= 8) {
        have -= 8;
        bytes += static_cast<char>((bits >> have) & 0xFF);
      }
    }
    ranks.push_back(bytes);
  }
  return ranks;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_VOCAB_H_
