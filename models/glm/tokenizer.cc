#include "models/glm/tokenizer.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <queue>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/bpe.h"
#include "models/glm/read_file.h"

namespace ag::glm {

const SpecialToken kGlm4SpecialTokens[14] = {
    {"<|endoftext|>", 151329}, {"[MASK]", 151330},         {"[gMASK]", 151331},           {"[sMASK]", 151332},
    {"<sop>", 151333},         {"<eop>", 151334},          {"<|system|>", 151335},        {"<|user|>", 151336},
    {"<|assistant|>", 151337}, {"<|observation|>", 151338}, {"<|begin_of_image|>", 151339}, {"<|end_of_image|>", 151340},
    {"<|begin_of_video|>", 151341}, {"<|end_of_video|>", 151342},
};

namespace {

// Token ids are int32 and the model's vocabulary is at most 2^24 (kMaxVocabSize):
// a larger id cannot be a real token.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// The value of each base64 character, -1 for others.
struct Base64Table {
  int8_t value[256];
  constexpr Base64Table() : value() {
    for (int c = 0; c < 256; ++c) value[c] = -1;
    for (int c = 'A'; c <= 'Z'; ++c) value[c] = static_cast<int8_t>(c - 'A');
    for (int c = 'a'; c <= 'z'; ++c) value[c] = static_cast<int8_t>(c - 'a' + 26);
    for (int c = '0'; c <= '9'; ++c) value[c] = static_cast<int8_t>(c - '0' + 52);
    value[static_cast<int>('+')] = 62;
    value[static_cast<int>('/')] = 63;
  }
};
constexpr Base64Table kBase64;

// Standard base64 (RFC 4648) with padding; false on anything else.
bool DecodeBase64(absl::string_view in, std::string* out) {
  auto value = [](char c) -> int { return kBase64.value[static_cast<unsigned char>(c)]; };
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = in[i + j];
      if (c == '=' && i + 4 == in.size() && j >= 2) {
        v[j] = 0;
        ++pad;
      } else if (pad > 0 || (v[j] = value(c)) < 0) {
        return false;
      }
    }
    const uint32_t bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out->push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out->push_back(static_cast<char>((bits >> 8) & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(bits & 0xFF));
  }
  return true;
}

// GPT-2's byte-level alphabet: byte b is spelled by code point kByteToUnicode[b].
std::vector<uint32_t> ByteToUnicode() {
  std::vector<uint32_t> map(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? b : next++;
  }
  return map;
}

// Decodes one UTF-8 code point at `s[*i]`; false when malformed.
bool NextCodePoint(const std::string& s, size_t* i, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[*i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) return false;
  *cp = n == 1 ? c : c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) *cp = (*cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += n;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path tiktoken = fs::path(dir) / "tokenizer.model";
  const fs::path hf = fs::path(dir) / "tokenizer.json";
  if (fs::exists(tiktoken, ec)) return LoadTiktoken(tiktoken.string());
  if (fs::exists(hf, ec)) return LoadHfJson(hf.string());
  return absl::NotFoundError(absl::StrCat(dir, ": no tokenizer.model or tokenizer.json"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadTiktoken(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  t->offsets_.reserve(lines + 1);
  t->bytes_.reserve(text.size() / 2);
  size_t line_start = 0;
  int64_t line_number = 0;
  std::string bytes;
  while (line_start < text.size()) {
    size_t end = text.find('\n', line_start);
    if (end == std::string::npos) end = text.size();
    absl::string_view line(text.data() + line_start, end - line_start);
    line_start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    int64_t rank = -1;
    if (space == absl::string_view::npos || !DecodeBase64(line.substr(0, space), &bytes) ||
        !absl::SimpleAtoi(line.substr(space + 1), &rank)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": line ", line_number, " is not 'base64 rank'"));
    }
    if (t->num_ordinary() >= kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": more than ", kMaxTokenId, " tokens"));
    }
    if (rank != t->num_ordinary()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": line ", line_number, " has rank ", rank, ", expected ",
                                                     t->num_ordinary(), " (ranks must be 0, 1, 2, ...)"));
    }
    t->AddOrdinary(bytes);
  }
  // GLM-4's special tokens follow the ordinary ones.
  const int32_t first_special = t->num_ordinary();
  for (int i = 0; i < 14; ++i) {
    t->special_.emplace(kGlm4SpecialTokens[i].text, first_special + i);
    t->special_by_id_.emplace(first_special + i, kGlm4SpecialTokens[i].text);
  }
  RETURN_IF_ERROR(t->Finish(path));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadHfJson(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto fail = [&](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", what)); };
  if (j.is_discarded() || !j.is_object()) return fail("not valid JSON");
  if (!j.contains("model") || !j["model"].is_object()) return fail("no 'model' object");
  const nlohmann::json& model = j["model"];
  if (!model.contains("type") || model["type"] != "BPE") return fail("'model.type' must be \"BPE\"");
  if (!model.contains("vocab") || !model["vocab"].is_object()) return fail("no 'model.vocab' object");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const std::vector<uint32_t> to_unicode = ByteToUnicode();
  absl::flat_hash_map<uint32_t, char> to_byte;
  for (uint32_t b = 0; b < 256; ++b) to_byte[to_unicode[b]] = static_cast<char>(b);
  const size_t n = model["vocab"].size();
  if (n > static_cast<size_t>(kMaxTokenId)) return fail("'model.vocab' has too many tokens");
  std::vector<std::string> by_id(n);
  std::vector<bool> seen(n, false);
  for (const auto& [token, id_json] : model["vocab"].items()) {
    if (!id_json.is_number_unsigned() || id_json.get<uint64_t>() >= n) {
      return fail(absl::StrCat("vocab id of '", token, "' must be in [0, ", n, ")"));
    }
    const size_t id = id_json.get<size_t>();
    if (seen[id]) return fail(absl::StrCat("vocab id ", id, " appears twice"));
    seen[id] = true;
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      uint32_t cp = 0;
      auto it = to_byte.end();
      if (!NextCodePoint(token, &i, &cp) || (it = to_byte.find(cp)) == to_byte.end()) {
        return fail(absl::StrCat("vocab token ", id, " is not spelled in the byte-level alphabet"));
      }
      bytes.push_back(it->second);
    }
    by_id[id] = std::move(bytes);
  }
  for (const std::string& bytes : by_id) t->AddOrdinary(bytes);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const nlohmann::json& added : j["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_unsigned() ||
          !added.contains("content") || !added["content"].is_string()) {
        return fail("added_tokens entries need an 'id' and a 'content'");
      }
      const uint64_t id = added["id"].get<uint64_t>();
      const std::string content = added["content"].get<std::string>();
      if (content.empty()) return fail(absl::StrCat("added token ", id, " has empty content"));
      if (id < n) {
        if (by_id[id] == content) continue;  // an ordinary token listed again
        return fail(absl::StrCat("added token ", id, " collides with the vocabulary"));
      }
      if (id >= static_cast<uint64_t>(kMaxTokenId)) {
        return fail(absl::StrCat("added token id ", id, " is too large (ids must be below ", kMaxTokenId, ")"));
      }
      const auto id32 = static_cast<int32_t>(id);
      if (!t->special_.emplace(content, id32).second || !t->special_by_id_.emplace(id32, content).second) {
        return fail(absl::StrCat("added token ", id, " repeats another added token's id or content"));
      }
      if (added.contains("special")) {
        if (!added["special"].is_boolean()) {
          return fail(absl::StrCat("added token ", id, ": 'special' must be true or false"));
        }
        if (!added["special"].get<bool>()) t->shown_in_output_.insert(id32);
      }
    }
  }
  RETURN_IF_ERROR(t->Finish(path));
  return t;
}

absl::Status Tokenizer::Finish(const std::string& source) {
  // bytes_ does not change from here on: the map keys are views into it.
  rank_.reserve(static_cast<size_t>(num_ordinary()));
  for (int32_t id = 0; id < num_ordinary(); ++id) {
    auto [it, inserted] = rank_.emplace(Ordinary(id), id);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": token ", id, " has the same bytes as token ", it->second));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    if (!rank_.contains(absl::string_view(&byte, 1))) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": the vocabulary lacks the single byte ", b,
                                                     " (byte-level BPE needs all 256)"));
    }
  }
  vocab_size_ = num_ordinary();
  for (const auto& [text, id] : special_) {
    vocab_size_ = std::max(vocab_size_, id + 1);
    specials_longest_first_.push_back(text);
  }
  std::sort(specials_longest_first_.begin(), specials_longest_first_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size() || (a.size() == b.size() && a < b); });
  ASSIGN_OR_RETURN(pretokenizer_, Pretokenizer::Create());
  KeepEncodedRuns(kEncodedRunsBytes);
  return absl::OkStatus();
}

int32_t Tokenizer::Rank(absl::string_view bytes) const {
  auto it = rank_.find(bytes);
  return it == rank_.end() ? kNoRank : it->second;
}

int32_t Tokenizer::TokenId(absl::string_view bytes) const {
  const int32_t r = Rank(bytes);
  return r == kNoRank ? -1 : r;
}

int32_t Tokenizer::SpecialId(absl::string_view text) const {
  auto it = special_.find(text);
  return it == special_.end() ? -1 : it->second;
}

bool Tokenizer::TokenBytes(int32_t id, std::string* bytes) const {
  if (id >= 0 && id < num_ordinary()) {
    *bytes = std::string(Ordinary(id));
    return true;
  }
  auto it = special_by_id_.find(id);
  if (it == special_by_id_.end()) return false;
  *bytes = it->second;
  return true;
}

void Tokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const {
  const int32_t whole = Rank(piece);
  if (whole != kNoRank) {
    out->push_back(whole);
    return;
  }
  auto rank = [this](absl::string_view bytes) { return Rank(bytes); };
  // Short pieces: tiktoken's quadratic loop is fastest; long ones need the heap.
  if (piece.size() <= 64) {
    BytePairMerge(piece, rank, out);
  } else {
    BytePairMergeHeap(piece, rank, out);
  }
}

void Tokenizer::EncodeOrdinary(absl::string_view text, std::vector<int32_t>* out) const {
  const bool keep = runs_ != nullptr && runs_->Keeps(text);
  if (keep && runs_->Find(text, out)) return;
  const size_t start = out->size();
  pretokenizer_->Split(text, [&](absl::string_view piece) { EncodePiece(piece, out); });
  if (keep) runs_->Remember(text, absl::MakeConstSpan(*out).subspan(start));
}

void Tokenizer::KeepEncodedRuns(size_t budget_bytes) {
  runs_ = budget_bytes > 0 ? std::make_unique<EncodedRuns>(budget_bytes) : nullptr;
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (allow_special && !specials_longest_first_.empty()) {
    // Each special token's next occurrence at or after `pos`, searched again
    // only once `pos` has passed it: every search starts past the previous
    // one's start, so the whole scan is linear in the text per special token.
    const size_t count = specials_longest_first_.size();
    std::vector<size_t> next(count, 0);
    std::vector<bool> stale(count, true);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t best = absl::string_view::npos;
      size_t found = count;
      for (size_t k = 0; k < count; ++k) {  // the earliest; at one position the longest (listed first)
        if (stale[k] || (next[k] != absl::string_view::npos && next[k] < pos)) {
          next[k] = text.find(specials_longest_first_[k], pos);
          stale[k] = false;
        }
        if (next[k] != absl::string_view::npos && (best == absl::string_view::npos || next[k] < best)) {
          best = next[k];
          found = k;
        }
      }
      if (found == count) break;
      EncodeOrdinary(text.substr(pos, best - pos), &out);
      out.push_back(special_.at(specials_longest_first_[found]));
      pos = best + specials_longest_first_[found].size();
    }
    text.remove_prefix(std::min(pos, text.size()));
  }
  EncodeOrdinary(text, &out);
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text, bytes;
  for (int32_t id : ids) {
    if (!TokenBytes(id, &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary"));
    }
    text += bytes;
  }
  return text;
}

}  // namespace ag::glm
