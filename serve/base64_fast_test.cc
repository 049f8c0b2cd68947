#include "serve/base64_fast.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "absl/strings/escaping.h"

namespace ag::serve {
namespace {

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Whatever the fast decoder takes, absl decodes to the same bytes.
void ExpectSameAsAbsl(const std::string& in) {
  std::string fast, slow;
  if (DecodeBase64Fast(in, &fast)) {
    ASSERT_TRUE(absl::Base64Unescape(in, &slow)) << in;
    EXPECT_EQ(fast, slow) << in;
  }
}

TEST(Base64Fast, DecodesWhatAbslEncodesAtEveryLength) {
  std::mt19937 rng(1);
  for (size_t n = 1; n < 300; ++n) {
    const std::string bytes = RandomBytes(rng, n), text = absl::Base64Escape(bytes);
    std::string out;
    ASSERT_TRUE(DecodeBase64Fast(text, &out)) << n;
    EXPECT_EQ(out, bytes) << n;
  }
  const std::string big = RandomBytes(rng, 1 << 20);
  std::string out;
  ASSERT_TRUE(DecodeBase64Fast(absl::Base64Escape(big), &out));
  EXPECT_EQ(out, big);
}

TEST(Base64Fast, DeclinesAllButCanonicalBase64) {
  for (const char* in : {"", "QQ", "QUI", "QUJD\n", " QUJD", "QUJ D", "QR==", "QUN=", "Q===", "====", "QU=D", "=QUJ",
                         "QUJD====", "QUJD-_-_", "QUJDRA==QUJD", "QUJD\xff\xfe\xfd\xfc"}) {
    std::string out;
    EXPECT_FALSE(DecodeBase64Fast(in, &out)) << '"' << in << '"';
  }
  for (const char* in : {"QQ==", "QUI=", "QUJD", "QUJDRA==", "////", "++++", "AAAA"}) {
    std::string out;
    EXPECT_TRUE(DecodeBase64Fast(in, &out)) << in;
    ExpectSameAsAbsl(in);
  }
}

// Every byte value at every position of the vector blocks, the scalar quanta and the last quantum:
// taken exactly when it is in the alphabet, and then decoded as absl decodes it.
TEST(Base64Fast, EveryByteAtEveryPosition) {
  std::mt19937 rng(2);
  const std::string valid = absl::Base64Escape(RandomBytes(rng, 45));  // 60 characters: 3 blocks, 3 quanta
  ASSERT_EQ(valid.size(), 60u);
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t at = 0; at < valid.size(); ++at) {
    for (int c = 0; c < 256; ++c) {
      std::string in = valid;
      in[at] = static_cast<char>(c);
      std::string out;
      ExpectSameAsAbsl(in);
      if (c == '=' && at >= 58) continue;  // padding there may be canonical
      const bool in_alphabet = alphabet.find(static_cast<char>(c)) != std::string::npos;
      ASSERT_EQ(DecodeBase64Fast(in, &out), in_alphabet) << "byte " << c << " at " << at;
    }
  }
}

TEST(Base64Fast, RandomStringsOfTheAlphabetAndPadding) {
  std::mt19937 rng(3);
  const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=== \n-_";
  for (int i = 0; i < 20000; ++i) {
    std::string in(4 * (1 + rng() % 12), ' ');
    for (char& c : in) c = chars[rng() % chars.size()];
    ExpectSameAsAbsl(in);
  }
}

}  // namespace
}  // namespace ag::serve
