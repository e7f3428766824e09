#include "server/job_list.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paci {
namespace {

// FNV-1a: a stable fingerprint of a list query's filters, kept in its page tokens.
uint64_t Fingerprint(const JobListQuery& query) {
  std::string canonical = absl::StrCat(query.phase, "|", query.name_prefix, "|",
                                       query.omit_loss_history ? 1 : 0);
  for (const auto& [k, v] : query.labels) absl::StrAppend(&canonical, "|", k, "=", v);
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : canonical) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string Token(uint64_t instance, int64_t after, uint64_t fingerprint) {
  return absl::WebSafeBase64Escape(absl::StrCat("1:", absl::Hex(instance), ":", after, ":",
                                                absl::Hex(fingerprint)));
}

absl::Status BadToken(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("page_token: ", why));
}

// The sequence a page token resumes after.
absl::StatusOr<int64_t> ParsePageToken(const std::string& token, uint64_t instance,
                                       uint64_t fingerprint) {
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(token, &decoded)) return BadToken("not a page token");
  std::vector<std::string> parts = absl::StrSplit(decoded, ':');
  uint64_t token_instance = 0, token_fingerprint = 0;
  int64_t after = 0;
  if (parts.size() != 4 || parts[0] != "1" || !absl::SimpleHexAtoi(parts[1], &token_instance) ||
      !absl::SimpleAtoi(parts[2], &after) || !absl::SimpleHexAtoi(parts[3], &token_fingerprint) ||
      after < 0) {
    return BadToken("not a page token");
  }
  if (token_instance != instance) {
    return BadToken("stale: issued before the coordinator restarted; list again from the first page");
  }
  if (token_fingerprint != fingerprint) {
    return BadToken("issued for a request with other filters; the filters must stay the same "
                    "from page to page");
  }
  return after;
}

}  // namespace

absl::StatusOr<int> PageSize(const JobListQuery& query) {
  if (query.page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must not be negative, got ", query.page_size));
  }
  return query.page_size == 0 ? JobListQuery::kDefaultPageSize
                              : std::min(query.page_size, JobListQuery::kMaxPageSize);
}

bool Selects(const JobListQuery& query, const v1::Job& job) {
  if (!absl::StartsWith(job.name(), query.name_prefix)) return false;
  for (const auto& [k, v] : query.labels) {
    auto label = job.labels().find(k);
    if (label == job.labels().end() || label->second != v) return false;
  }
  return true;
}

v1::Job AsListed(const JobListQuery& query, const v1::Job& job) {
  v1::Job listed = job;
  if (query.omit_loss_history) {  // all but the latest point of each
    for (auto* history : {listed.mutable_status()->mutable_train_loss_history(),
                          listed.mutable_status()->mutable_validation_loss_history()}) {
      if (history->size() > 1) history->DeleteSubrange(0, history->size() - 1);
    }
  }
  return listed;
}

std::string PageToken(uint64_t instance, int64_t after, const JobListQuery& query) {
  return Token(instance, after, Fingerprint(query));
}

absl::StatusOr<int64_t> ResumeAfter(const JobListQuery& query, uint64_t instance) {
  if (query.page_token.empty()) return 0;
  return ParsePageToken(query.page_token, instance, Fingerprint(query));
}

}  // namespace paci
