#pragma once

#include "paci/v1/coordinator.pb.h"

namespace paci {

// Succeeded, Failed and Cancelled jobs never change phase again.
inline bool IsTerminal(v1::JobPhase phase) {
  return phase == v1::SUCCEEDED || phase == v1::FAILED || phase == v1::CANCELLED;
}

}  // namespace paci
