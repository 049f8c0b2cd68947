// Typed reads of one JSON object's fields for the config parsers: every
// error names the file and the field.
#ifndef AUTOGLM_MODELS_GLM_JSON_FIELDS_H_
#define AUTOGLM_MODELS_GLM_JSON_FIELDS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace ag::glm {

class Fields {
 public:
  using json = nlohmann::json;

  Fields(const json& object, absl::string_view source) : object_(object), source_(source) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", key, "' ", what));
  }

  absl::StatusOr<int64_t> Int(const char* key) const {
    if (!Has(key)) return Error(key, "is missing");
    const json& v = object_[key];
    if (!v.is_number_integer()) return Error(key, "must be an integer");
    return v.get<int64_t>();
  }
  // A size in [1, max].
  absl::StatusOr<int64_t> Size(const char* key, int64_t max) const {
    ASSIGN_OR_RETURN(int64_t v, Int(key));
    if (v <= 0) return Error(key, absl::StrCat("must be positive, got ", v));
    if (v > max) return Error(key, absl::StrCat("is ", v, ", more than this engine supports (", max, ")"));
    return v;
  }
  absl::StatusOr<int64_t> Size(const char* key, int64_t max, int64_t fallback) const {
    return Has(key) ? Size(key, max) : fallback;
  }
  absl::StatusOr<double> Number(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    const json& v = object_[key];
    if (!v.is_number()) return Error(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Error(key, "must be finite");
    return d;
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!object_[key].is_boolean()) return Error(key, "must be true or false");
    return object_[key].get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key, std::string fallback) const {
    if (!Has(key)) return fallback;
    if (!object_[key].is_string()) return Error(key, "must be a string");
    return object_[key].get<std::string>();
  }
  // An integer or a list of integers.
  absl::StatusOr<std::vector<int64_t>> IntOrList(const char* key) const {
    std::vector<int64_t> ids;
    if (!Has(key)) return ids;
    const json& v = object_[key];
    if (v.is_number_integer()) {
      ids.push_back(v.get<int64_t>());
    } else if (v.is_array()) {
      for (const json& e : v) {
        if (!e.is_number_integer()) return Error(key, "must be an integer or a list of integers");
        ids.push_back(e.get<int64_t>());
      }
    } else {
      return Error(key, "must be an integer or a list of integers");
    }
    return ids;
  }
  // Requires a boolean field, when present, to have the one value we implement.
  absl::Status Require(const char* key, bool expected, bool fallback) const {
    ASSIGN_OR_RETURN(bool v, Bool(key, fallback));
    if (v != expected) return Error(key, absl::StrCat("must be ", expected ? "true" : "false", " (not supported)"));
    return absl::OkStatus();
  }

  const json& object() const { return object_; }
  const std::string& source() const { return source_; }

 private:
  const json& object_;
  std::string source_;
};

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_JSON_FIELDS_H_
