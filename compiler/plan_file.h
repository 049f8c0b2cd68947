// The .agplan file: a binary, versioned, checksummed Plan.
//
//   offset 0   8 bytes  magic "AGPLAN\r\n"
//          8   u32      format version (kPlanVersion)
//         12   u32      reserved, 0
//         16   u64      payload size in bytes
//         24   u64      FNV-1a 64 checksum of the payload
//         32   payload  the Plan's fields, little-endian, strings and lists
//                       prefixed by a u32 count
//
// Loading checks magic, version, size and checksum before decoding, bounds
// every read and count, then runs ValidatePlan.
#ifndef AUTOGLM_COMPILER_PLAN_FILE_H_
#define AUTOGLM_COMPILER_PLAN_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiler/plan.h"

namespace ag::compiler {

std::string SerializePlan(const Plan& plan);
// A whole file from a payload: magic, this build's version, size, checksum.
// For tools that edit payloads (fuzzers, tests of hostile plans).
std::string SealPlanPayload(absl::string_view payload);
// `source` names the file in errors.
absl::StatusOr<Plan> DeserializePlan(absl::string_view bytes, absl::string_view source);

absl::Status WritePlanFile(const Plan& plan, const std::string& path);
absl::StatusOr<Plan> ReadPlanFile(const std::string& path);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_PLAN_FILE_H_
