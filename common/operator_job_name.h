#pragma once

// The names the operator gives the coordinator jobs of TrainingJobs, written
// once: the operator makes them (OperatorJobName) and the coordinator keeps
// them for the operator (IsOperatorJobName, CheckJobNameOwner in
// common/peer_identity.h), so the two cannot drift apart.
//
//   <name>-<uid8>-g<generation>[-e<evictions>][-p<run>]
//
//   <name>        the TrainingJob's name, cut (and stripped of a trailing '-')
//                 so the whole is at most kMaxJobNameLength characters
//   <uid8>        the first kOperatorJobUidLength characters of its
//                 metadata.uid (a UUID: lower-case hexadecimal digits)
//   <generation>  its metadata.generation
//   <evictions>   its status.evictions, only once Kueue has evicted it
//   <run>         which run of its loss-parity check (spec.parity) it is,
//                 from 1, only for such a check
//
// Such a name is predictable from the TrainingJob alone: were a tenant free to
// submit one, it could take the name of a TrainingJob's next job before the
// operator submits it, and the operator's submission would be refused
// (AlreadyExists). So only the operator and administrators may submit them.
// Header-only: the operator and the coordinator include it without linking.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace paci {

// The most characters a coordinator job's name has.
inline constexpr size_t kMaxJobNameLength = 63;
// The characters of the TrainingJob's uid in the name.
inline constexpr size_t kOperatorJobUidLength = 8;
// What precedes the generation, and the evictions.
inline constexpr char kOperatorJobGenerationTag[] = "-g";
inline constexpr char kOperatorJobEvictionsTag[] = "-e";
// What precedes the run of a parity check.
inline constexpr char kOperatorJobParityRunTag[] = "-p";
// The form, as messages show it.
inline constexpr char kOperatorJobNameForm[] = "<name>-<uid8>-g<generation>[-e<evictions>][-p<run>]";

// The name of the coordinator job of a TrainingJob so named, of that uid,
// generation and Kueue evictions (0: none), and of that run of its parity
// check (0: the job's one training run).
inline std::string OperatorJobName(absl::string_view name, absl::string_view uid,
                                   int64_t generation, int64_t evictions, int parity_run = 0) {
  const std::string suffix =
      absl::StrCat("-", uid.substr(0, kOperatorJobUidLength), kOperatorJobGenerationTag,
                   generation,
                   evictions > 0 ? absl::StrCat(kOperatorJobEvictionsTag, evictions) : "",
                   parity_run > 0 ? absl::StrCat(kOperatorJobParityRunTag, parity_run) : "");
  std::string head(name);
  if (head.size() + suffix.size() > kMaxJobNameLength) {
    head.resize(suffix.size() < kMaxJobNameLength ? kMaxJobNameLength - suffix.size() : 0);
  }
  while (!head.empty() && head.back() == '-') head.pop_back();
  return head + suffix;
}

namespace operator_job_name_internal {

// Removes `tag` and the decimal digits after it from the end of `name`; false,
// leaving it as it was, when it does not end so.
inline bool StripNumberTag(absl::string_view* name, absl::string_view tag) {
  size_t start = name->size();
  while (start > 0 && (*name)[start - 1] >= '0' && (*name)[start - 1] <= '9') --start;
  if (start == name->size() || start < tag.size() ||
      name->substr(start - tag.size(), tag.size()) != tag) {
    return false;
  }
  name->remove_suffix(name->size() - start + tag.size());
  return true;
}

// "<name>-<uid8>-g<generation>", <name> not empty.
inline bool HasUidAndGeneration(absl::string_view name) {
  if (!StripNumberTag(&name, kOperatorJobGenerationTag)) return false;
  if (name.size() < kOperatorJobUidLength + 2) return false;
  const absl::string_view uid = name.substr(name.size() - kOperatorJobUidLength);
  if (name[name.size() - kOperatorJobUidLength - 1] != '-') return false;
  for (char c : uid) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace operator_job_name_internal

// Whether `name` has the form of the names OperatorJobName gives.
inline bool IsOperatorJobName(absl::string_view name) {
  operator_job_name_internal::StripNumberTag(&name, kOperatorJobParityRunTag);
  absl::string_view without_evictions = name;
  if (operator_job_name_internal::StripNumberTag(&without_evictions, kOperatorJobEvictionsTag) &&
      operator_job_name_internal::HasUidAndGeneration(without_evictions)) {
    return true;
  }
  return operator_job_name_internal::HasUidAndGeneration(name);
}

}  // namespace paci
