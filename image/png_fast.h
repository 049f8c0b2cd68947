// The PNG a phone agent sends, decoded fast: 8-bit RGB or RGBA, not interlaced, no palette or
// transparency chunk -- what Android's `screencap -p` and PIL's re-encoding give (GLM4V_SPEC §7).
// libpng took ~50 ms of a 1080 x 2400 screenshot's step on the development machine, on one core:
// zlib's inflate ~27 ms, the rows' unfiltering ~12. Here libdeflate inflates the image data in one
// call (3x zlib's speed on the same stream), and the rows are unfiltered in chains, each starting
// at a row that needs nothing of the row above (filter None or Sub: PIL's encoder picks them
// often), the chains spread over every core.
//
// Conservative by construction: anything else, or anything unusual about a file (a chunk CRC or
// the zlib checksum that does not match, image data short or left over, a chunk out of place, an
// unknown critical chunk), returns nullopt and libpng decides, with its errors. So a file is
// either decoded to the pixels libpng gives it (the fuzzer `image` checks exactly that) or left
// to libpng. Not a public header: decode.cc and the tests use it.
#ifndef AUTOGLM_IMAGE_PNG_FAST_H_
#define AUTOGLM_IMAGE_PNG_FAST_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "image/image.h"

namespace ag::image {

// The fast path; nullopt: not a file it takes (libpng's turn), or outside `limits`.
std::optional<RgbImage> DecodeCommonPng(absl::string_view bytes, const DecodeLimits& limits);

// The libpng decoder alone (what Decode falls back to): every PNG it reads, with its errors.
absl::StatusOr<RgbImage> DecodePngLibpng(absl::string_view bytes, absl::string_view source,
                                         const DecodeLimits& limits);

// One row's reconstruction in place (PNG §9.2: filter 0-4, `bpp` bytes a pixel, 1-8), given the
// row above already reconstructed (zeros above the first). `row` and `prev` must be readable
// 4 bytes past `row_bytes` (the vector path loads a pixel of 3 bytes as 4). UnfilterRowBytewise is
// the specification's loop, byte by byte: the reference the tests hold the fast one to.
void UnfilterRow(int filter, uint8_t* row, const uint8_t* prev, int64_t row_bytes, int bpp);
void UnfilterRowBytewise(int filter, uint8_t* row, const uint8_t* prev, int64_t row_bytes, int bpp);

}  // namespace ag::image

#endif  // AUTOGLM_IMAGE_PNG_FAST_H_
