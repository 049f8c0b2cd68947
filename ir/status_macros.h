// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// They live in ir/ because every module above the kernels depends on ir/.
#ifndef AUTOGLM_IR_STATUS_MACROS_H_
#define AUTOGLM_IR_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define AG_CONCAT_INNER_(a, b) a##b
#define AG_CONCAT_(a, b) AG_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status ag_status_ = (expr);          \
    if (!ag_status_.ok()) return ag_status_;     \
  } while (false)

#define AG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)

#define ASSIGN_OR_RETURN(lhs, expr) \
  AG_ASSIGN_OR_RETURN_IMPL_(AG_CONCAT_(ag_statusor_, __LINE__), lhs, expr)

#endif  // AUTOGLM_IR_STATUS_MACROS_H_
