#include "models/glm/tools.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ag::glm {
namespace {

using nlohmann::ordered_json;

// The system turn for tools (the chat templates' words): glm-4-9b-chat's, GLM-4-0414's.
constexpr char kToolsPreamble[] =
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具";
constexpr char kToolsPreamble0414[] =
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具";
constexpr char kToolsAfterFunction[] = "\n在调用上述函数时，请使用 Json 格式表示调用的参数。";

// Python's repr of a float: the shortest digits that read back, fixed notation for exponents
// -4..15 (with ".0" when whole), else d.ddde+XX.
void AppendPythonFloat(double v, std::string& out) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  if (ec != std::errc()) return out.append("NaN"), void();
  std::string_view s(buf, static_cast<size_t>(end - buf));  // [-]d[.ddd]e(+|-)XX
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e_at = s.find('e');
  std::string digits(s.substr(0, e_at));
  if (digits.size() > 1) digits.erase(1, 1);  // the '.'
  int exponent = 0;
  std::from_chars(s.data() + e_at + (s[e_at + 1] == '+' ? 2 : 1), s.data() + s.size(), exponent);
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppend(&out, "e", exponent < 0 ? "-" : "+", std::abs(exponent) < 10 ? "0" : "", std::abs(exponent));
  } else if (exponent < 0) {
    absl::StrAppend(&out, "0.", std::string(static_cast<size_t>(-exponent - 1), '0'), digits);
  } else {
    const size_t whole = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= whole) {
      absl::StrAppend(&out, digits, std::string(whole - digits.size(), '0'), ".0");
    } else {
      absl::StrAppend(&out, digits.substr(0, whole), ".", digits.substr(whole));
    }
  }
}

// A string as json.dumps(ensure_ascii=False) quotes it.
void AppendPythonString(const std::string& s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char u[8];
          std::snprintf(u, sizeof(u), "\\u%04x", c);
          out += u;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void AppendPython(const ordered_json& v, int indent, int level, std::string& out) {
  const auto newline = [&](int at) { absl::StrAppend(&out, "\n", std::string(static_cast<size_t>(indent * at), ' ')); };
  switch (v.type()) {
    case ordered_json::value_t::object: {
      if (v.empty()) return out.append("{}"), void();
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ',';
        first = false;
        newline(level + 1);
        AppendPythonString(key, out);
        out += ": ";
        AppendPython(item, indent, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    case ordered_json::value_t::array: {
      if (v.empty()) return out.append("[]"), void();
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ',';
        newline(level + 1);
        AppendPython(v[i], indent, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case ordered_json::value_t::string:
      return AppendPythonString(v.get_ref<const std::string&>(), out);
    case ordered_json::value_t::number_float:
      return AppendPythonFloat(v.get<double>(), out);
    case ordered_json::value_t::boolean:
      return out.append(v.get<bool>() ? "true" : "false"), void();
    case ordered_json::value_t::null:
      return out.append("null"), void();
    default:  // integers, as written
      return out.append(v.dump()), void();
  }
}

bool IsJsonObject(absl::string_view text) {
  const ordered_json j = ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object();
}

}  // namespace

std::string PythonJsonDumps(const ordered_json& value, int indent) {
  std::string out;
  AppendPython(value, indent, 0, out);
  return out;
}

std::string ToolsSystemText(const std::vector<ToolFunction>& tools, ToolsWording wording) {
  std::string out = wording == ToolsWording::kGlm4_0414 ? kToolsPreamble0414 : kToolsPreamble;
  for (const ToolFunction& f : tools) {
    // Both templates write two newlines before "##", but transformers renders templates with
    // trim_blocks, which drops the one right after the block tag in front of them.
    absl::StrAppend(&out, "\n## ", f.name, "\n\n", PythonJsonDumps(f.object, 4), kToolsAfterFunction);
  }
  return out;
}

std::optional<ToolCall> ParseToolCall(absl::string_view text, const std::vector<std::string>& names) {
  const size_t newline = text.find('\n');
  if (newline == absl::string_view::npos) return std::nullopt;
  const absl::string_view name = absl::StripAsciiWhitespace(text.substr(0, newline));
  bool known = false;
  for (const std::string& n : names) known = known || n == name;
  if (!known) return std::nullopt;
  const absl::string_view arguments = absl::StripAsciiWhitespace(text.substr(newline + 1));
  if (!IsJsonObject(arguments)) return std::nullopt;
  return ToolCall{std::string(name), std::string(arguments)};
}

bool MayBecomeToolCall(absl::string_view text, const std::vector<std::string>& names) {
  const size_t newline = text.find('\n');
  const absl::string_view line = absl::StripLeadingAsciiWhitespace(text.substr(0, newline));
  const absl::string_view name = absl::StripTrailingAsciiWhitespace(line);
  // Whole (a newline, or whitespace after it): one of the names exactly; otherwise a name's start.
  const bool whole = newline != absl::string_view::npos || name.size() < line.size();
  for (const std::string& n : names) {
    if (whole ? name == n : absl::StartsWith(n, name)) return true;
  }
  return false;
}

}  // namespace ag::glm
