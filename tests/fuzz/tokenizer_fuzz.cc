// Fuzz targets for the tokenizer files: AUTOGLM_FUZZ_FORMAT selects
// tiktoken (tokenizer.model) or HF (tokenizer.json) at compile time. A file
// that loads must round-trip text through Encode and Decode.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/glm/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if AUTOGLM_FUZZ_TIKTOKEN
  const std::string path = ag::fuzz::WriteInput("tokenizer.model", data, size);
  auto tokenizer = ag::glm::Tokenizer::LoadTiktoken(path);
#else
  const std::string path = ag::fuzz::WriteInput("tokenizer.json", data, size);
  auto tokenizer = ag::glm::Tokenizer::LoadHfJson(path);
#endif
  if (!tokenizer.ok()) return 0;
  for (const std::string text : {"hello <|user|> world\xff", "<|system|><|user|>", "aaaa bbbb \xe4\xbd\xa0"}) {
    for (bool special : {false, true}) {
      absl::StatusOr<std::string> back = (*tokenizer)->Decode((*tokenizer)->Encode(text, special));
      if (!back.ok() || (!special && *back != text)) __builtin_trap();
    }
  }
  return 0;
}
