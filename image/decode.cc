// PNG, JPEG and WebP decoding through the system libraries (libpng,
// libjpeg-turbo, libwebp), to what PIL gives transformers: 8-bit samples
// (16-bit PNG samples keep their high byte), palettes and gray expanded to
// RGB, transparency (alpha channels, tRNS) composited on white.
//
// libpng and libjpeg report errors by longjmp: the functions that call them
// hold only plain data between setjmp and the calls, so no C++ destructor is
// ever skipped.
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "image/image.h"
#include "image/png_fast.h"

namespace ag::image {
namespace {

absl::Status Error(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

absl::Status CheckSize(int64_t width, int64_t height, const DecodeLimits& limits, absl::string_view source) {
  if (width <= 0 || height <= 0) return Error(source, "the image is empty");
  if (width > limits.max_width || height > limits.max_height || width * height > limits.max_pixels) {
    return Error(source, absl::StrCat("the image is ", width, " x ", height, " pixels; at most ", limits.max_width,
                                      " x ", limits.max_height, " and ", limits.max_pixels, " pixels are taken"));
  }
  return absl::OkStatus();
}

// Straight RGBA to RGB on white, into a fresh image.
RgbImage FromRgba(const std::vector<uint8_t>& rgba, int height, int width) {
  RgbImage out{height, width, std::vector<uint8_t>(static_cast<size_t>(height) * width * 3)};
  CompositeOnWhite(rgba.data(), static_cast<int64_t>(height) * width, out.rgb.data());
  return out;
}

// ---- PNG ----

struct PngInput {
  const uint8_t* data;
  size_t size, pos;
};

struct PngState {
  std::jmp_buf jump;
  char message[200];
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->pos) png_error(png, "the file is truncated");
  std::memcpy(out, in->data + in->pos, n);
  in->pos += n;
}

void PngError(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof(state->message), "%s", message);
  std::longjmp(state->jump, 1);
}

void PngWarning(png_structp, png_const_charp) {}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
};

// Phase 1 reads the header (`rows` null); phase 2, with the size checked and
// `rows` pointing into an RGBA buffer, the pixels. Only plain data lives here.
bool PngPass(png_structp png, png_infop info, PngState* state, PngHeader* header, png_bytep* rows) {
  if (setjmp(state->jump)) return false;
  if (rows == nullptr) {
    png_read_info(png, info);
    header->width = png_get_image_width(png, info);
    header->height = png_get_image_height(png, info);
    const int color = png_get_color_type(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    png_set_strip_16(png);  // the high byte, as PIL reads 16-bit samples
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_filler(png, 0xff, PNG_FILLER_AFTER);  // RGB -> RGBA opaque; RGBA keeps its alpha
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    return true;
  }
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodePngLibpng(absl::string_view bytes, absl::string_view source,
                                         const DecodeLimits& limits) {
  // The size first, from the IHDR chunk that must follow the signature: a file
  // that claims a huge image is refused before libpng reads on.
  if (bytes.size() >= 24 && bytes.substr(12, 4) == "IHDR") {
    auto be32 = [&](size_t at) {
      uint32_t v = 0;
      for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
      return v;
    };
    if (absl::Status size = CheckSize(be32(16), be32(20), limits, source); !size.ok()) return size;
  }
  PngState state{};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, PngError, PngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng: out of memory");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::ResourceExhaustedError("libpng: out of memory");
  }
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // CheckSize decides, and names the limits
  png_set_chunk_malloc_max(png, 8 << 20);  // a metadata chunk of a real image is far smaller
  PngInput input{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  png_set_read_fn(png, &input, PngRead);
  PngHeader header;
  absl::StatusOr<RgbImage> result = Error(source, "not a readable PNG");
  if (!PngPass(png, info, &state, &header, nullptr)) {
    result = Error(source, absl::StrCat("corrupt PNG: ", state.message));
  } else if (absl::Status size = CheckSize(header.width, header.height, limits, source); !size.ok()) {
    result = size;
  } else if (png_get_rowbytes(png, info) != static_cast<size_t>(header.width) * 4) {
    result = Error(source, "unsupported PNG pixel layout");
  } else {
    std::vector<uint8_t> rgba(static_cast<size_t>(header.width) * header.height * 4);
    std::vector<png_bytep> rows(header.height);
    for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = rgba.data() + static_cast<size_t>(y) * header.width * 4;
    if (!PngPass(png, info, &state, &header, rows.data())) {
      result = Error(source, absl::StrCat("corrupt PNG: ", state.message));
    } else {
      result = FromRgba(rgba, static_cast<int>(header.height), static_cast<int>(header.width));
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return result;
}

namespace {

// The common PNG on the fast path (png_fast.h), anything else through libpng.
absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes, absl::string_view source, const DecodeLimits& limits) {
  if (std::optional<RgbImage> fast = DecodeCommonPng(bytes, limits)) return std::move(*fast);
  return DecodePngLibpng(bytes, source, limits);
}

// ---- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool corrupt = false;  // libjpeg warned about bad data (a truncated file, among others)
  char message[JMSG_LENGTH_MAX];
};

void JpegExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && !err->corrupt) {  // a warning: PIL refuses such files ("image file is truncated")
    err->corrupt = true;
    cinfo->err->format_message(cinfo, err->message);
  }
}

// As PngPass: header first (`out` null), then the scanlines.
bool JpegPass(jpeg_decompress_struct* cinfo, JpegError* err, uint8_t* out) {
  if (setjmp(err->jump)) return false;
  if (out == nullptr) {
    jpeg_read_header(cinfo, TRUE);
    return true;
  }
  cinfo->out_color_space = JCS_RGB;  // gray is replicated, as PIL's convert("RGB") does
  jpeg_start_decompress(cinfo);
  const size_t stride = static_cast<size_t>(cinfo->output_width) * 3;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + cinfo->output_scanline * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes, absl::string_view source, const DecodeLimits& limits) {
  jpeg_decompress_struct cinfo;
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegExit;
  err.mgr.emit_message = JpegMessage;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  absl::StatusOr<RgbImage> result = Error(source, "not a readable JPEG");
  if (!JpegPass(&cinfo, &err, nullptr)) {
    result = Error(source, absl::StrCat("corrupt JPEG: ", err.message));
  } else if (absl::Status size = CheckSize(cinfo.image_width, cinfo.image_height, limits, source); !size.ok()) {
    result = size;
  } else if (cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
             cinfo.jpeg_color_space != JCS_RGB) {
    result = Error(source, "unsupported JPEG color space (CMYK or YCCK)");
  } else {
    RgbImage image{static_cast<int>(cinfo.image_height), static_cast<int>(cinfo.image_width),
                   std::vector<uint8_t>(static_cast<size_t>(cinfo.image_width) * cinfo.image_height * 3)};
    if (!JpegPass(&cinfo, &err, image.rgb.data())) {
      result = Error(source, absl::StrCat("corrupt JPEG: ", err.message));
    } else if (err.corrupt) {
      result = Error(source, absl::StrCat("corrupt JPEG: ", err.message));
    } else {
      result = std::move(image);
    }
  }
  jpeg_destroy_decompress(&cinfo);
  return result;
}

// ---- WebP ----

absl::StatusOr<RgbImage> DecodeWebp(absl::string_view bytes, absl::string_view source, const DecodeLimits& limits) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(data, bytes.size(), &features) != VP8_STATUS_OK) return Error(source, "corrupt WebP header");
  if (features.has_animation) return Error(source, "animated WebP is not supported");
  if (absl::Status size = CheckSize(features.width, features.height, limits, source); !size.ok()) return size;
  std::vector<uint8_t> rgba(static_cast<size_t>(features.width) * features.height * 4);
  if (WebPDecodeRGBAInto(data, bytes.size(), rgba.data(), rgba.size(), features.width * 4) == nullptr) {
    return Error(source, "corrupt or truncated WebP");
  }
  return FromRgba(rgba, features.height, features.width);
}

}  // namespace

Format SniffFormat(absl::string_view b) {
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return Format::kPng;
  if (b.size() >= 3 && std::memcmp(b.data(), "\xff\xd8\xff", 3) == 0) return Format::kJpeg;
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) {
    return Format::kWebp;
  }
  return Format::kUnknown;
}

absl::StatusOr<RgbImage> Decode(absl::string_view bytes, absl::string_view source, const DecodeLimits& limits) {
  switch (SniffFormat(bytes)) {
    case Format::kPng:
      return DecodePng(bytes, source, limits);
    case Format::kJpeg:
      return DecodeJpeg(bytes, source, limits);
    case Format::kWebp:
      return DecodeWebp(bytes, source, limits);
    case Format::kUnknown:
      break;
  }
  return Error(source, bytes.empty() ? "the image is empty (0 bytes)" : "not a PNG, JPEG or WebP image");
}

void CompositeOnWhite(const uint8_t* rgba, int64_t pixels, uint8_t* rgb) {
  // Pillow's ImagingAlphaComposite (src over dst) with dst = opaque white:
  // 7 extra bits of precision, divisions by 255 rounded with its shift trick.
  // Over white the output alpha is always 255, so Pillow's coef1 = sa * 255 * 255 * 2^7 / outa255
  // (outa255 = sa * 255 + 255 * (255 - sa) = 255 * 255) is exactly sa * 2^7: no division a pixel.
  // An opaque pixel comes out as it went in (tested over every value).
  constexpr uint32_t kPrecision = 7;
  auto div255 = [](uint32_t a) { return ((a >> 8) + a) >> 8; };
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* s = rgba + i * 4;
    uint8_t* o = rgb + i * 3;
    const uint32_t sa = s[3];
    if (sa == 255) {
      o[0] = s[0];
      o[1] = s[1];
      o[2] = s[2];
      continue;
    }
    const uint32_t coef1 = sa << kPrecision;
    const uint32_t coef2 = (255 - sa) << kPrecision;
    for (int c = 0; c < 3; ++c) {
      const uint32_t tmp = s[c] * coef1 + 255 * coef2;
      o[c] = static_cast<uint8_t>(div255(tmp + (0x80u << kPrecision)) >> kPrecision);
    }
  }
}

}  // namespace ag::image
