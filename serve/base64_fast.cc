#include "serve/base64_fast.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ag::serve {
namespace {

// The 6-bit value of each base64 character, -1 for every other byte ('=' included).
struct Base64Values {
  int8_t of[256];
  constexpr Base64Values() : of() {
    for (int c = 0; c < 256; ++c) of[c] = -1;
    for (int c = 'A'; c <= 'Z'; ++c) of[c] = static_cast<int8_t>(c - 'A');
    for (int c = 'a'; c <= 'z'; ++c) of[c] = static_cast<int8_t>(c - 'a' + 26);
    for (int c = '0'; c <= '9'; ++c) of[c] = static_cast<int8_t>(c - '0' + 52);
    of[static_cast<int>('+')] = 62;
    of[static_cast<int>('/')] = 63;
  }
};
constexpr Base64Values kValues;

int32_t ValueOf(unsigned char c) { return kValues.of[c]; }

// The quantum's three bytes, most significant first.
void Put3(char* out, uint32_t n) {
  out[0] = static_cast<char>(n >> 16);
  out[1] = static_cast<char>(n >> 8);
  out[2] = static_cast<char>(n);
}

#if defined(__SSE2__)
// 16 characters -> 12 bytes written at `out`, and two bytes past them overwritten (the caller's
// next output bytes); false if a character is not in the alphabet. Signed compares: bytes from
// 0x80 up are negative and fall in no range.
bool Decode16(const char* in, char* out) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  auto within = [&c](char lo, char hi) {
    return _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8(static_cast<char>(lo - 1))),
                         _mm_cmplt_epi8(c, _mm_set1_epi8(static_cast<char>(hi + 1))));
  };
  const __m128i upper = within('A', 'Z'), lower = within('a', 'z'), digit = within('0', '9');
  const __m128i plus = _mm_cmpeq_epi8(c, _mm_set1_epi8('+')), slash = _mm_cmpeq_epi8(c, _mm_set1_epi8('/'));
  const __m128i valid = _mm_or_si128(_mm_or_si128(upper, lower), _mm_or_si128(digit, _mm_or_si128(plus, slash)));
  if (_mm_movemask_epi8(valid) != 0xFFFF) return false;
  // value = character + shift ('A' -> 0, 'a' -> 26, '0' -> 52, '+' -> 62, '/' -> 63), bytes wrapping.
  auto shift_of = [](const __m128i& mask, int shift) { return _mm_and_si128(mask, _mm_set1_epi8(static_cast<char>(shift))); };
  const __m128i shift = _mm_or_si128(
      _mm_or_si128(shift_of(upper, -'A'), shift_of(lower, 26 - 'a')),
      _mm_or_si128(shift_of(digit, 52 - '0'), _mm_or_si128(shift_of(plus, 62 - '+'), shift_of(slash, 63 - '/'))));
  const __m128i v = _mm_add_epi8(c, shift);
  // Each 32-bit lane holds the quantum's values v0 | v1 << 8 | v2 << 16 | v3 << 24 (little-endian);
  // its three bytes, in memory order, are b0 = v0 << 2 | v1 >> 4, b1 = v1 << 4 | v2 >> 2, b2 = v2 << 6 | v3.
  const __m128i v0 = _mm_and_si128(v, _mm_set1_epi32(0x3F)), v1 = _mm_and_si128(_mm_srli_epi32(v, 8), _mm_set1_epi32(0x3F));
  const __m128i v2 = _mm_and_si128(_mm_srli_epi32(v, 16), _mm_set1_epi32(0x3F)), v3 = _mm_srli_epi32(v, 24);
  const __m128i b0 = _mm_or_si128(_mm_slli_epi32(v0, 2), _mm_srli_epi32(v1, 4));
  const __m128i b1 = _mm_and_si128(_mm_or_si128(_mm_slli_epi32(v1, 4), _mm_srli_epi32(v2, 2)), _mm_set1_epi32(0xFF));
  const __m128i b2 = _mm_and_si128(_mm_or_si128(_mm_slli_epi32(v2, 6), v3), _mm_set1_epi32(0xFF));
  const __m128i lanes = _mm_or_si128(b0, _mm_or_si128(_mm_slli_epi32(b1, 8), _mm_slli_epi32(b2, 16)));
  // Two quanta a 64-bit half: the odd lane's three bytes moved down next to the even lane's.
  const __m128i halves = _mm_or_si128(_mm_and_si128(lanes, _mm_set1_epi64x(0xFFFFFF)),
                                     _mm_and_si128(_mm_srli_epi64(lanes, 8), _mm_set1_epi64x(0xFFFFFF000000)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), halves);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 6), _mm_unpackhi_epi64(halves, halves));
  return true;
}
#endif

}  // namespace

bool DecodeBase64Fast(absl::string_view in, std::string* out) {
  const size_t size = in.size();
  if (size == 0 || size % 4 != 0) return false;
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const size_t pad = s[size - 1] != '=' ? 0 : s[size - 2] == '=' ? 2 : 1;
  out->resize(size / 4 * 3 - pad);
  char* o = out->data();
  const size_t body = size - 4;  // every quantum but the last, which may hold padding
  size_t i = 0;
#if defined(__SSE2__)
  // Decode16 overwrites two bytes past its 12: another quantum's, since one of the body follows.
  for (; i + 20 <= body; i += 16, o += 12) {
    if (!Decode16(in.data() + i, o)) return false;
  }
#endif
  for (; i < body; i += 4, o += 3) {
    const int32_t a = ValueOf(s[i]), b = ValueOf(s[i + 1]), c = ValueOf(s[i + 2]), d = ValueOf(s[i + 3]);
    if ((a | b | c | d) < 0) return false;
    Put3(o, static_cast<uint32_t>(a << 18 | b << 12 | c << 6 | d));
  }
  // The last quantum: "xxxx", "xxx=" or "xx==", and zero bits under the padding.
  const int32_t a = ValueOf(s[i]), b = ValueOf(s[i + 1]);
  const int32_t c = pad == 2 ? 0 : ValueOf(s[i + 2]), d = pad >= 1 ? 0 : ValueOf(s[i + 3]);
  if ((a | b | c | d) < 0) return false;
  const auto n = static_cast<uint32_t>(a << 18 | b << 12 | c << 6 | d);
  if (pad == 2) {
    if ((b & 0x0F) != 0) return false;
    o[0] = static_cast<char>(n >> 16);
  } else if (pad == 1) {
    if ((c & 0x03) != 0) return false;
    o[0] = static_cast<char>(n >> 16);
    o[1] = static_cast<char>(n >> 8);
  } else {
    Put3(o, n);
  }
  return true;
}

}  // namespace ag::serve
