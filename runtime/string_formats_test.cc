#include "runtime/string_formats.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "runtime/json_pattern.h"
#include "runtime/json_schema.h"

namespace ag::runtime {
namespace {

std::shared_ptr<const PatternDfa> FormatDfa(const std::string& format) {
  const std::optional<std::string> e = FormatExpression(format);
  if (!e) return nullptr;
  absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa = PatternDfa::Compile(*e, 0, PatternDfa::kUnbounded, /*search=*/false);
  EXPECT_TRUE(dfa.ok()) << format << ": " << dfa.status();
  return dfa.ok() ? *dfa : nullptr;
}

bool Matches(const PatternDfa& dfa, const std::string& text) {
  PatternDfa::Cursor at{.state = dfa.start()};
  for (const char c : text) {
    if (!dfa.Feed(at, static_cast<uint8_t>(c))) return false;
  }
  return at.left == 0 && dfa.Accepting(at.state);
}

// Independent checks of what each format's strings must be (the RFCs', by hand), for the strings
// the DFAs write.
bool Digits(const std::string& s, size_t from, size_t n) {
  if (from + n > s.size()) return false;
  for (size_t i = from; i < from + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}
int Number(const std::string& s, size_t from, size_t n) { return std::stoi(s.substr(from, n)); }

bool ValidDate(const std::string& s) {
  if (s.size() != 10 || !Digits(s, 0, 4) || s[4] != '-' || !Digits(s, 5, 2) || s[7] != '-' || !Digits(s, 8, 2)) return false;
  const int year = Number(s, 0, 4), month = Number(s, 5, 2), day = Number(s, 8, 2);
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month >= 1 && month <= 12 && day >= 1 && day <= days[month - 1];
}

bool ValidTime(const std::string& s) {
  if (s.size() < 9 || !Digits(s, 0, 2) || s[2] != ':' || !Digits(s, 3, 2) || s[5] != ':' || !Digits(s, 6, 2)) return false;
  if (Number(s, 0, 2) > 23 || Number(s, 3, 2) > 59 || Number(s, 6, 2) > 60) return false;
  size_t at = 8;
  if (s[at] == '.') {
    size_t digits = 0;
    while (Digits(s, at + 1 + digits, 1)) ++digits;
    if (digits == 0) return false;
    at += 1 + digits;
  }
  if (at < s.size() && (s[at] == 'Z' || s[at] == 'z')) return at + 1 == s.size();
  return s.size() == at + 6 && (s[at] == '+' || s[at] == '-') && Digits(s, at + 1, 2) && s[at + 3] == ':' &&
         Digits(s, at + 4, 2) && Number(s, at + 1, 2) <= 23 && Number(s, at + 4, 2) <= 59;
}

// RFC 3339 appendix A: P, then weeks alone, or a run of Y M D (consecutive, none skipped) and/or T
// with a run of H M S.
bool ValidDuration(const std::string& s) {
  if (s.size() < 3 || s[0] != 'P') return false;
  std::string date, time;
  bool in_time = false;
  for (size_t at = 1; at < s.size();) {
    if (s[at] == 'T') {
      if (in_time) return false;
      in_time = true;
      ++at;
      continue;
    }
    size_t digits = 0;
    while (Digits(s, at + digits, 1)) ++digits;
    if (digits == 0 || at + digits >= s.size()) return false;
    (in_time ? time : date) += s[at + digits];
    at += digits + 1;
  }
  if (date == "W") return !in_time;
  const auto run = [](const std::string& letters, const std::string& order) {
    return letters.empty() || order.find(letters) != std::string::npos;
  };
  if (in_time && time.empty()) return false;
  return (!date.empty() || !time.empty()) && run(date, "YMD") && run(time, "HMS");
}

bool ValidLabel(const std::string& l) {
  if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
  return std::all_of(l.begin(), l.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; });
}
bool ValidHostname(const std::string& s, size_t min_labels = 1) {
  const std::vector<std::string> labels = absl::StrSplit(s, '.');
  return s.size() <= 253 && labels.size() >= min_labels && std::all_of(labels.begin(), labels.end(), ValidLabel);
}
bool ValidEmail(const std::string& s) {
  const size_t at = s.rfind('@');
  if (at == std::string::npos) return false;
  const std::string local = s.substr(0, at);
  const std::vector<std::string> atoms = absl::StrSplit(local, '.');
  for (const std::string& a : atoms) {
    if (a.empty() || a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-") !=
                         std::string::npos) {
      return false;
    }
  }
  return ValidHostname(s.substr(at + 1), 2);
}
bool ValidUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-') || (!dash && !std::isxdigit(static_cast<unsigned char>(s[i])))) return false;
  }
  return true;
}
bool Valid(const std::string& format, const std::string& s) {
  unsigned char address[16];
  if (format == "date") return ValidDate(s);
  if (format == "time") return ValidTime(s);
  if (format == "date-time") return s.size() > 11 && s[10] == 'T' && ValidDate(s.substr(0, 10)) && ValidTime(s.substr(11));
  if (format == "duration") return ValidDuration(s);
  if (format == "hostname") return ValidHostname(s);
  if (format == "email") return ValidEmail(s);
  if (format == "ipv4") return inet_pton(AF_INET, s.c_str(), address) == 1;
  if (format == "ipv6") return inet_pton(AF_INET6, s.c_str(), address) == 1;
  return format == "uuid" && ValidUuid(s);
}

const char* const kFormats[] = {"date", "time", "date-time", "duration", "hostname", "email", "ipv4", "ipv6", "uuid"};

TEST(StringFormats, FixedStrings) {
  const std::vector<std::tuple<std::string, std::string, bool>> cases = {
      {"date", "2026-12-08", true},           {"date", "2024-02-28", true},       {"date", "2026-04-31", false},
      {"date", "2026-13-01", false},          {"date", "2026-1-01", false},       {"date", "2024-02-29", false},  // narrower: no leap day
      {"time", "08:30:00Z", true},            {"time", "23:59:59.123+05:30", true}, {"time", "24:00:00Z", false},
      {"time", "08:30:00", false},            {"time", "08:30Z", false},          {"time", "08:30:60Z", false},  // narrower: no leap second
      {"date-time", "2026-12-08T01:16:23Z", true}, {"date-time", "2026-12-08 01:16:23Z", false},
      {"date-time", "2026-12-08t01:16:23z", false},  // narrower: upper case only
      {"duration", "P3Y6M4DT12H30M5S", true}, {"duration", "PT36H", true},        {"duration", "P2W", true},
      {"duration", "P1M", true},              {"duration", "PT1M", true},         {"duration", "P", false},
      {"duration", "PT", false},              {"duration", "P1Y1D", false},       {"duration", "P2W1D", false},
      {"duration", "P1DT", false},            {"duration", "PT1H1S", false},
      {"hostname", "example.com", true},      {"hostname", "a-b.c1.example", true}, {"hostname", "-a.com", false},
      {"hostname", "a_b.com", false},         {"hostname", "a..com", false},      {"hostname", "com.", false},
      {"email", "john.doe+tag@example.com", true}, {"email", "o'brien@mail.example.org", true},
      {"email", "a@localhost", false},        {"email", ".a@example.com", false}, {"email", "a..b@example.com", false},
      {"email", "a b@example.com", false},    {"email", "a@-example.com", false},
      {"ipv4", "192.168.0.1", true},          {"ipv4", "255.255.255.255", true},  {"ipv4", "256.1.1.1", false},
      {"ipv4", "01.2.3.4", false},            {"ipv4", "1.2.3", false},
      {"ipv6", "::", true},                   {"ipv6", "::1", true},              {"ipv6", "2001:db8::8a2e:370:7334", true},
      {"ipv6", "fe80:0:0:0:204:61ff:fe9d:f156", true}, {"ipv6", "1:2:3:4:5:6:7::", true},
      {"ipv6", "1::2::3", false},             {"ipv6", "1:2:3:4:5:6:7:8:9", false}, {"ipv6", "12345::", false},
      {"ipv6", ":1", false},
      {"uuid", "123e4567-e89b-12d3-a456-426614174000", true}, {"uuid", "123e4567e89b12d3a456426614174000", false},
      {"uuid", "123e4567-e89b-12d3-a456-42661417400g", false},
  };
  for (const auto& [format, text, valid] : cases) {
    const std::shared_ptr<const PatternDfa> dfa = FormatDfa(format);
    ASSERT_NE(dfa, nullptr) << format;
    EXPECT_EQ(Matches(*dfa, text), valid) << format << ": " << text;
    if (valid) EXPECT_TRUE(Valid(format, text)) << "the oracle: " << format << ": " << text;
  }
  EXPECT_EQ(FormatExpression("uri"), std::nullopt) << "an annotation";
  EXPECT_EQ(FormatExpression("regex"), std::nullopt);
}

// Random strings each format's DFA writes (a random byte it takes at each step, until it may end)
// are valid by the hand-written checks above: narrower than the RFCs, never wider.
TEST(StringFormats, EveryWrittenStringIsValid) {
  std::mt19937 rng(31);
  for (const char* format : kFormats) {
    const std::shared_ptr<const PatternDfa> dfa = FormatDfa(format);
    ASSERT_NE(dfa, nullptr) << format;
    EXPECT_LE(dfa->states(), 1500u) << format;
    int written = 0;
    for (int walk = 0; walk < 400; ++walk) {
      PatternDfa::Cursor at{.state = dfa->start()};
      std::string text;
      for (int step = 0; step < 300; ++step) {
        if (dfa->Accepting(at.state) && rng() % 4 == 0) break;
        std::vector<uint8_t> next;
        for (int c = 0x20; c < 0x7F; ++c) {
          PatternDfa::Cursor t = at;
          if (dfa->Feed(t, static_cast<uint8_t>(c))) next.push_back(static_cast<uint8_t>(c));
        }
        if (next.empty()) break;  // an accepting state with nothing after it
        const uint8_t c = next[rng() % next.size()];
        ASSERT_TRUE(dfa->Feed(at, c));
        text += static_cast<char>(c);
      }
      if (!dfa->Accepting(at.state)) continue;  // ran past the steps
      ASSERT_TRUE(Valid(format, text)) << format << ": " << text;
      ++written;
    }
    EXPECT_GT(written, 300) << format;
  }
}

// In a schema: a string with an enforced format is one of its strings, lengths folded in, and
// beside a pattern one both take; another format annotates.
TEST(StringFormats, InASchema) {
  absl::StatusOr<std::shared_ptr<const JsonSchema>> schema = JsonSchema::Compile(R"({"type": "object", "properties": {
      "when": {"type": "string", "format": "date-time"}, "ip": {"type": "string", "format": "ipv4", "maxLength": 9},
      "site": {"type": "string", "format": "uri"}, "code": {"type": "string", "format": "date", "pattern": "^20"},
      "then": {"type": "string", "format": "date-time"}, "ip2": {"type": "string", "format": "ipv4"}},
      "required": ["when", "ip", "site", "code"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  // One DFA an expression and lengths: "then" shares "when"'s; "ip2" (no maxLength) has its own.
  EXPECT_EQ((*schema)->patterns(), 4u);
  const auto whole = [&](const std::string& text) {
    SchemaState s(schema->get());
    return s.Feed(text) && s.Complete();
  };
  EXPECT_TRUE(whole(R"({"when": "2026-12-08T01:16:23Z", "ip": "10.0.0.1", "site": "any text", "code": "2026-12-08"})"));
  EXPECT_FALSE(whole(R"({"when": "tomorrow", "ip": "10.0.0.1", "site": "", "code": "2026-12-08"})"));
  EXPECT_FALSE(whole(R"({"when": "2026-12-08T01:16:23Z", "ip": "10.0.0.100", "site": "", "code": "2026-12-08"})")) << "maxLength 9";
  EXPECT_FALSE(whole(R"({"when": "2026-12-08T01:16:23Z", "ip": "10.0.0.1", "site": "", "code": "1999-12-08"})"))
      << "the pattern too";
  EXPECT_FALSE(whole(R"({"when": "2026-12-08T01:16:23Z", "ip": "10.0.0.1", "site": "", "code": "20xx"})")) << "the format too";
  absl::StatusOr<std::shared_ptr<const JsonSchema>> neither =
      JsonSchema::Compile(R"({"type": "string", "format": "ipv4", "pattern": "^[a-z]"})");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("'pattern' and 'format': no string matches both"), std::string::npos) << neither.status();
  absl::StatusOr<std::shared_ptr<const JsonSchema>> tight =
      JsonSchema::Compile(R"({"type": "string", "format": "uuid", "maxLength": 10})");
  ASSERT_FALSE(tight.ok());
  EXPECT_NE(tight.status().message().find("'format'"), std::string::npos) << tight.status();
}

}  // namespace
}  // namespace ag::runtime
