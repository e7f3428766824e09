#pragma once

// RETURN_IF_ERROR and ASSIGN_OR_RETURN: Abseil 20220623 ships none of its own.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PACI_CONCAT_INNER_(a, b) a##b
#define PACI_CONCAT_(a, b) PACI_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status paci_status_ = (expr);      \
    if (!paci_status_.ok()) return paci_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  PACI_ASSIGN_OR_RETURN_IMPL_(PACI_CONCAT_(paci_statusor_, __LINE__), lhs, expr)

#define PACI_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()
