// Reads a whole file into a string; errors name the path.
#ifndef AUTOGLM_MODELS_GLM_READ_FILE_H_
#define AUTOGLM_MODELS_GLM_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ag::glm {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_READ_FILE_H_
