#include "server/coordinator_service.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "common/peer_identity.h"
#include "server/job_status.h"

namespace paci {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status CheckJobName(const std::string& name, const char* field) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  if (name.size() > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most 63 characters, got ", name.size()));
  }
  return absl::OkStatus();
}

// A job's labels, or a list filter's: Kubernetes' limits (ValidateJobLabels,
// common/job_spec.h: at most 64, keys of 1 to 253 characters, values of at most 63).
absl::Status CheckLabels(const google::protobuf::Map<std::string, std::string>& labels,
                         const char* field) {
  return ValidateJobLabels(labels, field);
}

absl::Status WatcherSlots::Take(const std::string& client) {
  absl::MutexLock lock(&mutex_);
  if (total_ >= max_total_) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ", max_total_, " watchers"));
  }
  int& mine = per_client_[client];
  if (mine >= max_per_client_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "client ", client, " holds ", mine, " watchers, its limit (--max_watchers_per_client)"));
  }
  ++mine;
  ++total_;
  return absl::OkStatus();
}

void WatcherSlots::Give(const std::string& client) {
  absl::MutexLock lock(&mutex_);
  --total_;
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

std::string ClientKey(const grpc::ServerContext& context) {
  const std::string common_name = CommonNameOf(context);
  if (!common_name.empty()) return "cn:" + common_name;
  // "ipv4:10.0.0.7:51234", "ipv6:[::1]:51234": the host is what stays a client's.
  std::string address = context.peer();
  const size_t colon = address.rfind(':');
  const size_t first = address.find(':');
  if (colon != std::string::npos && colon != first) address.resize(colon);
  return "host:" + address;
}

static std::map<std::string, std::string> LabelsOf(const v1::Job& job) {
  return std::map<std::string, std::string>(job.labels().begin(), job.labels().end());
}

CoordinatorService::CoordinatorService(JobManager& manager,
                                       const CoordinatorServiceOptions& options)
    : manager_(manager),
      options_(options),
      watchers_(options.max_watchers, options.max_watchers_per_client) {}

grpc::Status CoordinatorService::Admit(const grpc::ServerContext& context,
                                       const std::string* name) const {
  grpc::Status auth = CheckBearerToken(context, options_.token);
  if (!auth.ok()) return auth;
  const PeerIdentity peer = Caller(context);
  if (absl::Status who = CheckClientIdentity(peer); !who.ok()) return ToGrpc(who);
  if (name == nullptr) return auth;
  if (absl::Status valid = CheckJobName(*name, "name"); !valid.ok()) return ToGrpc(valid);
  if (peer.kind != PeerIdentity::Kind::kTenant) return grpc::Status::OK;
  // A tenant's view holds its namespace's jobs only: another's is as absent as
  // a job that never was.
  absl::StatusOr<v1::Job> job = manager_.Get(*name);
  if (!job.ok()) return ToGrpc(job.status());
  if (!MaySeeJob(peer, LabelsOf(*job))) return ToGrpc(JobNotFound(*name));
  return grpc::Status::OK;
}

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpc(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request,
                                           v1::Job* response) {
  if (grpc::Status admitted = Admit(*context, nullptr); !admitted.ok()) return admitted;
  if (!request->has_spec()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec: required");
  }
  v1::JobSpec spec = request->spec();
  ApplyJobSpecDefaults(&spec);
  absl::Status valid = ValidateJobSpec(spec);
  if (valid.ok()) valid = CheckLabels(request->labels(), "labels");
  if (!valid.ok()) return ToGrpc(valid);
  std::map<std::string, std::string> labels(request->labels().begin(), request->labels().end());
  const PeerIdentity peer = Caller(*context);
  if (absl::Status labelled = LabelSubmission(peer, &labels); !labelled.ok()) {
    return ToGrpc(labelled);
  }
  // The names the operator gives TrainingJobs' jobs are its own: a tenant that
  // took one first would have the operator's submission refused.
  if (absl::Status owned = CheckJobNameOwner(peer, spec.name()); !owned.ok()) {
    return ToGrpc(owned);
  }
  // Where it may run and how far ahead: a tenant's job on its own namespace's
  // workers only (placement holds to the namespace whatever the selector says;
  // a selector naming another namespace is refused here), at a priority of at
  // most --tenant_max_priority.
  const std::map<std::string, std::string> selector(spec.run_policy().worker_selector().begin(),
                                                    spec.run_policy().worker_selector().end());
  if (absl::Status placed = CheckWorkerSelector(peer, selector, NamespaceOfLabels(labels));
      !placed.ok()) {
    return ToGrpc(placed);
  }
  if (absl::Status priority =
          CheckPriority(peer, spec.run_policy().priority(), options_.tenant_max_priority);
      !priority.ok()) {
    return ToGrpc(priority);
  }
  if (absl::StatusOr<v1::Job> same = manager_.Get(spec.name());
      same.ok() && !MaySeeJob(peer, LabelsOf(*same))) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        absl::StrCat("spec.name: \"", spec.name(),
                                     "\" is taken by a job of another namespace; choose another"));
  }
  return Reply(manager_.Submit(spec, labels), response);
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::Job* response) {
  if (grpc::Status admitted = Admit(*context, &request->name()); !admitted.ok()) return admitted;
  grpc::Status status = Reply(manager_.Get(request->name()), response);
  if (status.ok() && request->omit_loss_history()) {
    response->mutable_status()->clear_train_loss_history();
    response->mutable_status()->clear_validation_loss_history();
  }
  return status;
}

grpc::Status CoordinatorService::GetJobTrace(grpc::ServerContext* context,
                                             const v1::GetJobRequest* request,
                                             v1::JobTrace* response) {
  if (grpc::Status admitted = Admit(*context, &request->name()); !admitted.ok()) return admitted;
  return Reply(manager_.Trace(request->name()), response);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* request,
                                          v1::ListJobsResponse* response) {
  if (grpc::Status admitted = Admit(*context, nullptr); !admitted.ok()) return admitted;
  if (!v1::JobPhase_IsValid(request->phase())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("phase: unknown value ", request->phase()));
  }
  if (absl::Status valid = CheckLabels(request->label_selector(), "label_selector"); !valid.ok()) {
    return ToGrpc(valid);
  }
  JobListQuery query;
  query.phase = request->phase();
  query.labels.insert(request->label_selector().begin(), request->label_selector().end());
  // A tenant lists its namespace's jobs, whatever else it selects.
  if (absl::Status labelled = LabelSubmission(Caller(*context), &query.labels);
      !labelled.ok()) {
    return ToGrpc(absl::PermissionDeniedError(absl::StrCat("label_selector: ", labelled.message())));
  }
  query.name_prefix = request->name_prefix();
  query.page_size = request->page_size();
  query.page_token = request->page_token();
  query.omit_loss_history = request->omit_loss_history();
  absl::StatusOr<JobPage> page = manager_.List(query);
  if (!page.ok()) return ToGrpc(page.status());
  for (v1::Job& job : page->jobs) *response->add_jobs() = std::move(job);
  response->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request,
                                           v1::Job* response) {
  if (grpc::Status admitted = Admit(*context, &request->name()); !admitted.ok()) return admitted;
  return Reply(manager_.Cancel(request->name()), response);
}

grpc::Status CoordinatorService::UpdateRunPolicy(grpc::ServerContext* context,
                                                 const v1::UpdateRunPolicyRequest* request,
                                                 v1::Job* response) {
  if (grpc::Status admitted = Admit(*context, &request->name()); !admitted.ok()) return admitted;
  // The policy is checked as part of the job's spec, as on submit.
  absl::StatusOr<v1::Job> job = manager_.Get(request->name());
  if (!job.ok()) return ToGrpc(job.status());
  v1::JobSpec spec = job->spec();
  *spec.mutable_run_policy() = request->run_policy();
  ApplyJobSpecDefaults(&spec);
  if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) return ToGrpc(valid);
  // A tenant raises no job of its above --tenant_max_priority, as on submit.
  if (absl::Status priority = CheckPriority(Caller(*context), spec.run_policy().priority(),
                                            options_.tenant_max_priority);
      !priority.ok()) {
    return ToGrpc(priority);
  }
  return Reply(manager_.UpdateRunPolicy(request->name(), spec.run_policy()), response);
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::Job>* writer) {
  if (grpc::Status admitted = Admit(*context, &request->name()); !admitted.ok()) return admitted;
  const std::string client = ClientKey(*context);
  if (absl::Status slot = watchers_.Take(client); !slot.ok()) return ToGrpc(slot);
  grpc::Status result = grpc::Status::OK;
  int64_t version = -1;
  while (!context->IsCancelled()) {
    absl::StatusOr<v1::Job> job =
        manager_.WaitForChange(request->name(), version, absl::Milliseconds(500));
    if (!job.ok()) {
      result = ToGrpc(job.status());
      break;
    }
    if (job->version() == version) continue;
    version = job->version();
    if (!writer->Write(*job)) break;
    if (IsTerminal(job->status().phase())) break;
  }
  watchers_.Give(client);
  return result;
}

}  // namespace paci
