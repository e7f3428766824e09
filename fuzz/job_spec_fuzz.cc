// A job spec as a user writes it: any text, parsed as YAML, defaulted and
// validated. Every input must end in a spec or an error naming what is wrong
// (InvalidArgument), never a crash or a hang; a spec that validates must
// survive a round trip through its own serialization unchanged, and applying
// the defaults again must change nothing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <google/protobuf/util/message_differencer.h>

#include "common/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<paci::v1::JobSpec> spec = paci::ParseJobSpecYaml(text);
  if (!spec.ok()) {
    if (spec.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (spec.status().message().empty()) std::abort();
    return 0;
  }
  paci::ApplyJobSpecDefaults(&*spec);
  const absl::Status valid = paci::ValidateJobSpec(*spec);
  if (!valid.ok()) {
    if (valid.code() != absl::StatusCode::kInvalidArgument || valid.message().empty()) {
      std::abort();
    }
    return 0;
  }
  // What the coordinator stores and sends on is the same spec, and defaults
  // applied twice change nothing.
  paci::v1::JobSpec again;
  if (!again.ParseFromString(spec->SerializeAsString())) std::abort();
  paci::ApplyJobSpecDefaults(&again);
  if (!google::protobuf::util::MessageDifferencer::Equals(*spec, again)) std::abort();
  if (!paci::ValidateJobSpec(again).ok()) std::abort();
  return 0;
}
