#include "serve/http_fetch.h"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <chrono>
#include <exception>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ag::serve {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(what); }

// "host:port" as a URL writes it (an IPv6 literal in brackets); the scheme's default port left
// out unless `with_default_port`.
std::string Authority(const HttpUrl& url, bool with_default_port) {
  const bool v6 = absl::StrContains(url.host, ':');
  const bool show_port = with_default_port || url.port != (url.tls ? "443" : "80");
  return absl::StrCat(v6 ? "[" : "", url.host, v6 ? "]" : "", show_port ? ":" : "", show_port ? url.port : "");
}

struct Answer {
  int status = 0;
  std::string location;
  std::string body;
};

// One GET on `stream` (a tcp_stream, or an ssl_stream over one). The timer
// closes the socket when the deadline passes, which ends whichever operation is
// pending; io.run() returns when the last handler has run.
template <class Stream>
absl::StatusOr<Answer> Exchange(asio::io_context& io, Stream& stream, const HttpUrl& url, const FetchLimits& limits,
                                Clock::time_point deadline) {
  constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  auto& socket = beast::get_lowest_layer(stream);
  tcp::resolver resolver(io);
  asio::steady_timer timer(io, deadline);
  bool timed_out = false;
  beast::error_code failure;
  const char* stage = "";

  http::request<http::empty_body> request(http::verb::get, url.target, 11);
  request.set(http::field::host, Authority(url, /*with_default_port=*/false));  // RFC 9110's Host
  request.set(http::field::user_agent, "autoglm-serve");
  request.set(http::field::accept, "image/*");
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(static_cast<uint64_t>(limits.max_bytes));

  auto fail = [&](beast::error_code ec, const char* what) {
    failure = ec;
    stage = what;
    timer.cancel();
  };
  auto on_read = [&](beast::error_code ec, size_t) {
    // A TLS peer that closes without close_notify after a complete message is harmless.
    if (ec && !(ec == ssl::error::stream_truncated && parser.is_done())) return fail(ec, "read");
    timer.cancel();
  };
  // The header first, to refuse a body that says it is too large before any of it is kept: Beast
  // 1.74 misses the parser's own body limit when the header and the body arrive in one read.
  auto on_header = [&](beast::error_code ec, size_t) {
    if (ec) return fail(ec, "read");
    if (const auto length = parser.content_length(); length && *length > static_cast<uint64_t>(limits.max_bytes)) {
      return fail(http::error::body_limit, "read");
    }
    if (parser.is_done()) {
      timer.cancel();
      return;
    }
    http::async_read(stream, buffer, parser, on_read);
  };
  auto on_write = [&](beast::error_code ec, size_t) {
    if (ec) return fail(ec, "write");
    http::async_read_header(stream, buffer, parser, on_header);
  };
  auto send = [&] { http::async_write(stream, request, on_write); };
  auto on_handshake = [&](beast::error_code ec) {
    if (ec) return fail(ec, "handshake");
    send();
  };
  auto on_connect = [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return fail(ec, "connect");
    if constexpr (kTls) {
      stream.async_handshake(ssl::stream_base::client, on_handshake);
    } else {
      send();
    }
  };
  timer.async_wait([&](beast::error_code ec) {
    if (ec) return;  // cancelled: the exchange ended in time
    timed_out = true;
    resolver.cancel();
    socket.close();
  });
  resolver.async_resolve(url.host, url.port, [&](beast::error_code ec, const tcp::resolver::results_type& results) {
    if (ec) return fail(ec, "resolve");
    socket.async_connect(results, on_connect);
  });
  io.run();

  if (timed_out) {
    return Bad(absl::StrCat("fetching the URL took more than ", limits.timeout_ms / 1000.0, " s"));
  }
  const std::string authority = Authority(url, /*with_default_port=*/true);
  if (failure) {
    const absl::string_view s = stage;
    if (s == "resolve") return Bad(absl::StrCat("cannot resolve ", url.host, ": ", failure.message()));
    if (s == "connect") return Bad(absl::StrCat("cannot connect to ", authority, ": ", failure.message()));
    if (s == "handshake") {
      return Bad(absl::StrCat("the TLS handshake with ", authority, " failed: ", failure.message()));
    }
    if (failure == http::error::body_limit) {
      return Bad(absl::StrCat("the answer is larger than ", limits.max_bytes, " bytes"));
    }
    return Bad(absl::StrCat("fetching the URL failed: ", failure.message()));
  }
  const auto& response = parser.get();
  if (response.body().size() > static_cast<size_t>(limits.max_bytes)) {  // a chunked body, were it missed as well
    return Bad(absl::StrCat("the answer is larger than ", limits.max_bytes, " bytes"));
  }
  Answer answer;
  answer.status = static_cast<int>(response.result_int());
  if (auto it = response.find(http::field::location); it != response.end()) answer.location = std::string(it->value());
  answer.body = response.body();
  return answer;
}

absl::StatusOr<Answer> Get(const HttpUrl& url, const FetchLimits& limits, Clock::time_point deadline) {
  asio::io_context io;
  if (!url.tls) {
    beast::tcp_stream stream(io);
    return Exchange(io, stream, url, limits, deadline);
  }
  ssl::context context(ssl::context::tls_client);
  beast::error_code ec;
  context.set_default_verify_paths(ec);
  if (ec) return Bad(absl::StrCat("the system's trusted certificates cannot be loaded: ", ec.message()));
  context.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, context);
  SSL* handle = stream.native_handle();
  beast::error_code not_ip;
  asio::ip::make_address(url.host, not_ip);
  if (not_ip) {
    // A name: sent for virtual hosting (SNI), and the certificate must carry it.
    if (!SSL_set_tlsext_host_name(handle, url.host.c_str()) || !SSL_set1_host(handle, url.host.c_str())) {
      return Bad(absl::StrCat("cannot set up TLS for ", url.host));
    }
  } else if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), url.host.c_str())) {
    return Bad(absl::StrCat("cannot set up TLS for ", url.host));
  }
  return Exchange(io, stream, url, limits, deadline);
}

// Where a redirect's Location points, from the URL that answered it.
std::string RedirectTarget(const HttpUrl& base, absl::string_view location) {
  const size_t scheme = location.find("://");
  if (scheme != absl::string_view::npos && location.find_first_of("/?") > scheme) return std::string(location);
  if (absl::StartsWith(location, "//")) return absl::StrCat(base.tls ? "https:" : "http:", location);
  const std::string origin = absl::StrCat(base.tls ? "https://" : "http://", Authority(base, true));
  if (absl::StartsWith(location, "/")) return absl::StrCat(origin, location);
  // Relative to the folder of the path that answered.
  absl::string_view path = base.target;
  path = path.substr(0, path.find('?'));
  return absl::StrCat(origin, path.substr(0, path.rfind('/') + 1), location);
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  HttpUrl out;
  absl::string_view rest;
  if (absl::StartsWithIgnoreCase(url, "http://")) {
    rest = url.substr(7);
  } else if (absl::StartsWithIgnoreCase(url, "https://")) {
    rest = url.substr(8);
    out.tls = true;
  } else {
    return Bad("the URL is not http:// or https://");
  }
  rest = rest.substr(0, rest.find('#'));
  const size_t end = rest.find_first_of("/?");
  absl::string_view authority = rest.substr(0, end);
  const absl::string_view target = end == absl::string_view::npos ? "" : rest.substr(end);
  out.target = target.empty() ? "/" : absl::StartsWith(target, "?") ? absl::StrCat("/", target) : std::string(target);
  if (absl::StrContains(authority, '@')) return Bad("the URL carries credentials, which are not sent");
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {  // [::1]:8080
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return Bad("the URL's IPv6 address has no ']'");
    out.host = std::string(authority.substr(1, close - 1));
    const absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && !absl::StartsWith(after, ":")) return Bad("the URL's host is not valid");
    port = after.empty() ? "" : after.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return Bad("the URL has no host");
  if (port.empty()) {
    out.port = out.tls ? "443" : "80";
  } else {
    int number = 0;
    if (!absl::SimpleAtoi(port, &number) || number <= 0 || number > 65535) return Bad("the URL's port is not valid");
    out.port = absl::StrCat(number);
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(absl::string_view url_text, const FetchLimits& limits) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(limits.timeout_ms);
  std::string current(url_text);
  for (int redirects = 0;; ++redirects) {
    absl::StatusOr<HttpUrl> url = ParseHttpUrl(current);
    if (!url.ok()) return url.status();
    absl::StatusOr<Answer> answer;
    try {
      answer = Get(*url, limits, deadline);
    } catch (const std::exception& e) {
      return Bad(absl::StrCat("fetching the URL failed: ", e.what()));
    }
    if (!answer.ok()) return answer.status();
    const int status = answer->status;
    if (status == 200) return std::move(answer->body);
    const bool redirect = status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
    if (!redirect || answer->location.empty()) return Bad(absl::StrCat("the URL answered HTTP ", status));
    if (redirects == limits.max_redirects) {
      return Bad(absl::StrCat("the URL redirected more than ", limits.max_redirects, " times"));
    }
    current = RedirectTarget(*url, answer->location);
    if (!absl::StartsWithIgnoreCase(current, "http://") && !absl::StartsWithIgnoreCase(current, "https://")) {
      return Bad("the URL redirected to something other than http(s)");
    }
  }
}

}  // namespace ag::serve
