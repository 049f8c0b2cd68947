// One HTTP or HTTPS GET within hard limits, for the media a chat request names
// by URL (--allow-remote-media). Everything -- name lookup, connect, the TLS
// handshake, the request and the whole answer -- runs on asynchronous
// operations under one deadline, so a server that stalls or trickles bytes
// costs at most `timeout_ms` (Beast's stream timeouts do not apply to
// synchronous calls). HTTPS verifies the peer's certificate against the
// system's trust store (OpenSSL's defaults: SSL_CERT_FILE / SSL_CERT_DIR
// override them) and its name against the URL's host. Redirects are followed
// a few times, to http(s) URLs only.
#ifndef AUTOGLM_SERVE_HTTP_FETCH_H_
#define AUTOGLM_SERVE_HTTP_FETCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::serve {

struct FetchLimits {
  int64_t max_bytes = int64_t{32} << 20;  // the body
  int timeout_ms = 10000;                 // the whole exchange, redirects included
  int max_redirects = 5;
};

// The parts of an http(s) URL this client needs; InvalidArgument for anything else.
struct HttpUrl {
  bool tls = false;
  std::string host;    // without the brackets of an IPv6 literal
  std::string port;    // "80" / "443" when the URL has none
  std::string target;  // path and query, "/" when empty; the fragment dropped
};
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

// The body of a 200 answer to GET `url`. Errors are one line without a prefix
// ("the URL answered HTTP 404", "fetching the URL took more than 10 s", ...).
absl::StatusOr<std::string> HttpGet(absl::string_view url, const FetchLimits& limits);

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_HTTP_FETCH_H_
