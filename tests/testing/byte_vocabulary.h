// A small vocabulary for the constraint tests (JSON mode, schemas, tool calls, expressions): the
// 256 single bytes as ids 0-255, then the given pieces as tokens of their own, then `padding` ids
// that are no token (special or padding rows, never allowed).
#ifndef AUTOGLM_TESTS_TESTING_BYTE_VOCABULARY_H_
#define AUTOGLM_TESTS_TESTING_BYTE_VOCABULARY_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/json_constraint.h"

namespace ag::testing {

struct ByteVocabulary {
  std::vector<std::string> tokens;
  std::shared_ptr<runtime::JsonVocabulary> v;
  int32_t ordinary = 0, vocab = 0;

  explicit ByteVocabulary(const std::vector<std::string>& pieces, int32_t padding = 0) {
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.insert(tokens.end(), pieces.begin(), pieces.end());
    ordinary = static_cast<int32_t>(tokens.size());
    vocab = ordinary + padding;
    v = *runtime::JsonVocabulary::Build(ordinary, vocab, [this](int32_t id, std::string* out) {
      *out = tokens[static_cast<size_t>(id)];
      return true;
    });
  }
  // The id of a piece (its first occurrence).
  int32_t Id(const std::string& token) const {
    return static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), token) - tokens.begin());
  }
};

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_BYTE_VOCABULARY_H_
