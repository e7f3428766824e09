#include "server/job_table.h"

#include <algorithm>

#include "common/job_phase.h"
#include "common/peer_identity.h"

namespace paci {

JobState& JobTable::Insert(JobState state, absl::Time now) {
  state.sequence = next_sequence_++;
  const std::string name = state.name();
  JobState& inserted = jobs_[name] = std::move(state);
  by_sequence_[inserted.sequence] = &inserted;
  if (const std::string name_space = NamespaceOfLabels(inserted.job.labels());
      !name_space.empty()) {
    ++by_namespace_[name_space];
  }
  const v1::JobPhase phase = inserted.status().phase();
  by_phase_[phase].insert(inserted.sequence);
  if (IsTerminal(phase)) {
    TrackFinished(inserted, inserted.status().has_completion_time()
                                ? FromProto(inserted.status().completion_time())
                                : now);
  }
  return inserted;
}

JobState* JobTable::Find(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

const JobState* JobTable::Find(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobTable::PhaseChanged(JobState& state, v1::JobPhase from, absl::Time now) {
  const v1::JobPhase to = state.status().phase();
  if (from == to) return;
  by_phase_[from].erase(state.sequence);
  by_phase_[to].insert(state.sequence);
  if (IsTerminal(to) && !IsTerminal(from)) TrackFinished(state, now);
}

void JobTable::TrackFinished(JobState& state, absl::Time finished) {
  state.finished_at = finished;
  finished_.emplace(finished, state.sequence);
  absl::Duration ttl = retention_.finished_job_ttl;
  const int64_t spec_ttl = state.spec().run_policy().ttl_seconds_after_finished();
  if (spec_ttl > 0) ttl = std::min(ttl, absl::Seconds(spec_ttl));
  if (ttl != absl::InfiniteDuration()) {
    state.expires_at = finished + ttl;
    expiring_.emplace(state.expires_at, state.sequence);
  }
}

std::vector<JobTable::Removed> JobTable::EnforceRetention(absl::Time now) {
  std::vector<Removed> removed;
  const int64_t keep = retention_.finished_jobs_to_keep;
  while (keep >= 0 && static_cast<int64_t>(finished_.size()) > keep) {
    removed.push_back(Remove(finished_.begin()->second, "count"));
  }
  while (!expiring_.empty() && expiring_.begin()->first <= now) {
    removed.push_back(Remove(expiring_.begin()->second, "age"));
  }
  return removed;
}

JobTable::Removed JobTable::Remove(int64_t sequence, const std::string& reason) {
  auto it = by_sequence_.find(sequence);
  JobState& state = *it->second;
  Removed removed{state.name(), state.status().phase(), state.finished_at, reason};
  by_phase_[removed.phase].erase(sequence);
  finished_.erase({state.finished_at, sequence});
  expiring_.erase({state.expires_at, sequence});
  if (const std::string name_space = NamespaceOfLabels(state.job.labels()); !name_space.empty()) {
    auto counted = by_namespace_.find(name_space);
    if (counted != by_namespace_.end() && --counted->second == 0) by_namespace_.erase(counted);
  }
  by_sequence_.erase(it);
  jobs_.erase(removed.name);
  return removed;
}

size_t JobTable::InNamespace(const std::string& name_space) const {
  auto it = by_namespace_.find(name_space);
  return it == by_namespace_.end() ? 0 : it->second;
}

std::vector<std::string> JobTable::Active() const {
  std::set<int64_t> sequences;
  for (v1::JobPhase phase : {v1::RUNNING, v1::RESTARTING}) {
    auto it = by_phase_.find(phase);
    if (it != by_phase_.end()) sequences.insert(it->second.begin(), it->second.end());
  }
  std::vector<std::string> names;
  names.reserve(sequences.size());
  for (int64_t sequence : sequences) names.push_back(by_sequence_.at(sequence)->name());
  return names;
}

size_t JobTable::InPhase(v1::JobPhase phase) const {
  auto it = by_phase_.find(phase);
  return it == by_phase_.end() ? 0 : it->second.size();
}

absl::StatusOr<JobPage> JobTable::List(const JobListQuery& query, uint64_t instance) const {
  absl::StatusOr<int> page_size = PageSize(query);
  if (!page_size.ok()) return page_size.status();
  absl::StatusOr<int64_t> after = ResumeAfter(query, instance);
  if (!after.ok()) return after.status();
  // The sequences to walk: every job's, or the phase's.
  static const std::set<int64_t> kNone;
  const std::set<int64_t>* phase_jobs = nullptr;
  if (query.phase != v1::JOB_PHASE_UNSPECIFIED) {
    auto it = by_phase_.find(query.phase);
    phase_jobs = it == by_phase_.end() ? &kNone : &it->second;
  }
  auto all = by_sequence_.upper_bound(*after);
  auto some = phase_jobs != nullptr ? phase_jobs->upper_bound(*after) : kNone.end();
  auto at_end = [&]() {
    return phase_jobs != nullptr ? some == phase_jobs->end() : all == by_sequence_.end();
  };
  JobPage page;
  size_t bytes = 0;
  int scanned = 0;
  int64_t resume_after = *after;
  while (!at_end() && static_cast<int>(page.jobs.size()) < *page_size &&
         scanned < JobListQuery::kMaxScanned) {
    const JobState& state = phase_jobs != nullptr ? *by_sequence_.at(*some) : *all->second;
    ++scanned;
    if (Selects(query, state.job)) {
      v1::Job job = AsListed(query, state.job);
      const size_t size = job.ByteSizeLong();
      if (!page.jobs.empty() && bytes + size > JobListQuery::kMaxPageBytes) break;
      bytes += size;
      page.jobs.push_back(std::move(job));
    }
    resume_after = state.sequence;
    if (phase_jobs != nullptr) {
      ++some;
    } else {
      ++all;
    }
  }
  if (!at_end()) page.next_page_token = PageToken(instance, resume_after, query);
  return page;
}

}  // namespace paci
