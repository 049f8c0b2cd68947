// Where a chat request's images come from (vLLM's rules): `data:` URLs with
// base64 PNG, JPEG or WebP always; `file://` URLs and plain paths only under
// --allowed-local-media-path; `http://` and `https://` URLs only with
// --allow-remote-media, within a size and a time limit (serve/http_fetch.h).
// Every error names the request part ("messages[1].content[0]") and says what
// was wrong, in one line.
#ifndef AUTOGLM_SERVE_MEDIA_H_
#define AUTOGLM_SERVE_MEDIA_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::serve {

struct MediaOptions {
  std::string allowed_local_path;  // empty: local files are refused
  bool allow_remote = false;
  int64_t max_bytes = int64_t{32} << 20;  // one encoded image, however it comes
  int remote_timeout_ms = 10000;          // the whole fetch: lookup, connect, TLS, the answer
};

// The encoded bytes of the image at `url`.
absl::StatusOr<std::string> FetchImageBytes(absl::string_view url, const MediaOptions& options, absl::string_view where);

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_MEDIA_H_
