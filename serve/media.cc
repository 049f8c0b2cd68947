#include "serve/media.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "serve/base64_fast.h"
#include "serve/http_fetch.h"

namespace ag::serve {
namespace {

namespace fs = std::filesystem;

absl::Status Bad(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// "data:image/png;base64,...."
absl::StatusOr<std::string> FromDataUrl(absl::string_view url, const MediaOptions& options, absl::string_view where) {
  const size_t comma = url.find(',');
  if (comma == absl::string_view::npos) return Bad(where, "a data URL needs a ',' before its data");
  const absl::string_view header = url.substr(5, comma - 5), data = url.substr(comma + 1);
  if (!absl::EndsWith(header, ";base64")) return Bad(where, "a data URL's image must be base64 (data:image/png;base64,...)");
  const absl::string_view type = header.substr(0, header.size() - 7);
  if (!type.empty() && !absl::StartsWithIgnoreCase(type, "image/")) {
    return Bad(where, absl::StrCat("a data URL of type '", type, "' is not an image"));
  }
  if (static_cast<int64_t>(data.size()) / 4 * 3 > options.max_bytes) {
    return Bad(where, absl::StrCat("the image is larger than ", options.max_bytes, " bytes"));
  }
  std::string bytes;
  // The fast decoder takes canonical base64 (what clients send) and declines the rest to absl.
  if (!DecodeBase64Fast(data, &bytes) && !absl::Base64Unescape(data, &bytes)) {
    return Bad(where, "the data URL's base64 is not valid");
  }
  if (bytes.empty()) return Bad(where, "the data URL holds no data");
  return bytes;
}

// A path under the allowed folder, symbolic links resolved first.
absl::StatusOr<std::string> FromLocalFile(absl::string_view path_text, const MediaOptions& options,
                                          absl::string_view where) {
  if (options.allowed_local_path.empty()) {
    return Bad(where, "local files are not allowed (the server was started without --allowed-local-media-path)");
  }
  std::error_code ec;
  const fs::path allowed = fs::canonical(options.allowed_local_path, ec);
  if (ec) return Bad(where, "the allowed local media folder does not exist");
  const fs::path path = fs::canonical(fs::path(std::string(path_text)), ec);
  if (ec) return Bad(where, absl::StrCat("no such file: ", path_text));
  const fs::path relative = path.lexically_relative(allowed);
  if (relative.empty() || *relative.begin() == "..") {
    return Bad(where, absl::StrCat(path_text, " is outside the allowed local media folder"));
  }
  if (!fs::is_regular_file(path, ec)) return Bad(where, absl::StrCat(path_text, " is not a regular file"));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || static_cast<int64_t>(size) > options.max_bytes) {
    return Bad(where, absl::StrCat("the image is larger than ", options.max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) return Bad(where, absl::StrCat("cannot read ", path_text));
  return bytes;
}

absl::StatusOr<std::string> FromRemote(absl::string_view url, const MediaOptions& options, absl::string_view where) {
  FetchLimits limits;
  limits.max_bytes = options.max_bytes;
  limits.timeout_ms = options.remote_timeout_ms;
  absl::StatusOr<std::string> bytes = HttpGet(url, limits);
  if (!bytes.ok()) return Bad(where, bytes.status().message());
  if (bytes->empty()) return Bad(where, "the URL answered with no data");
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> FetchImageBytes(absl::string_view url, const MediaOptions& options, absl::string_view where) {
  if (absl::StartsWithIgnoreCase(url, "data:")) return FromDataUrl(url, options, where);
  if (absl::StartsWithIgnoreCase(url, "file://")) return FromLocalFile(url.substr(7), options, where);
  if (absl::StartsWithIgnoreCase(url, "http://") || absl::StartsWithIgnoreCase(url, "https://")) {
    if (!options.allow_remote) {
      return Bad(where, "remote images are not fetched (the server was started without --allow-remote-media)");
    }
    return FromRemote(url, options, where);
  }
  if (absl::StartsWith(url, "/")) return FromLocalFile(url, options, where);
  return Bad(where, "an image URL must be data:, file://, an absolute path, or http(s)://");
}

}  // namespace ag::serve
