#include "tools/job_control_service.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace paci {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

grpc::Status CheckLength(const char* field, const std::string& value, size_t max) {
  if (value.size() <= max) return grpc::Status::OK;
  return InvalidArgument(
      absl::StrCat(field, ": must be at most ", max, " bytes, got ", value.size()));
}

}  // namespace

JobControlService::JobControlService(const v1::JobSpec& spec, JobProgress& progress,
                                     const JobControlServiceOptions& options)
    : spec_(spec), progress_(progress), options_(options) {}

grpc::Status JobControlService::Join(grpc::ServerContext* context,
                                     const v1::JoinRequest* request,
                                     v1::JoinResponse* response) {
  for (const grpc::Status& status :
       {CheckLength("job_name", request->job_name(), kMaxStringLength),
        CheckLength("link_address", request->link_address(), kMaxStringLength),
        CheckLength("metrics_address", request->metrics_address(), kMaxStringLength)}) {
    if (!status.ok()) return status;
  }
  if (grpc::Status status = CheckJobName(request->job_name()); !status.ok()) return status;
  if (request->link_address().empty()) return InvalidArgument("link_address: must be set");
  if (absl::Status status = progress_.OnJoin(*request); !status.ok()) return ToGrpc(status);
  LOG(INFO) << "job=" << spec_.name() << " stage=" << request->stage()
            << " joined: pid=" << request->pid() << " link=" << request->link_address()
            << " metrics=" << request->metrics_address();

  const int num_stages = spec_.pipeline().num_stages();
  absl::Time deadline = absl::Now() + options_.join_timeout;
  if (context != nullptr) deadline = std::min(deadline, absl::FromChrono(context->deadline()));
  {
    absl::MutexLock lock(&mu_);
    ++joined_;
    mu_.AwaitWithDeadline(absl::Condition(this, &JobControlService::JoinDone), deadline);
    if (stopping_) return grpc::Status(grpc::StatusCode::CANCELLED, "the launcher is stopping");
    if (joined_ < num_stages) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("only ", joined_, " of ", num_stages, " stages joined in time"));
    }
  }
  *response->mutable_spec() = spec_;
  response->set_trace_max_spans(options_.trace_max_spans);
  for (const std::string& address : progress_.stage_addresses()) {
    response->add_stage_addresses(address);
  }
  return grpc::Status::OK;
}

grpc::Status JobControlService::Report(grpc::ServerContext* context,
                                       const v1::StageReport* request,
                                       v1::ReportAck* response) {
  if (grpc::Status status = CheckJobName(request->job_name()); !status.ok()) return status;
  for (const std::string& path : request->checkpoints()) {
    if (grpc::Status status = CheckLength("checkpoints", path, kMaxPathLength); !status.ok()) {
      return status;
    }
  }
  absl::Status recorded;
  if (request->error().size() > kMaxErrorLength) {
    v1::StageReport cut = *request;
    cut.mutable_error()->resize(kMaxErrorLength);
    cut.mutable_error()->append(" [cut]");
    recorded = progress_.OnReport(cut);
  } else {
    recorded = progress_.OnReport(*request);
  }
  if (!recorded.ok()) return ToGrpc(recorded);
  if (!request->error().empty()) {
    LOG(WARNING) << "job=" << spec_.name() << " stage=" << request->stage()
                 << " failed: " << request->error().substr(0, 512);
  }
  absl::MutexLock lock(&mu_);
  response->set_cancel(stopping_);
  return grpc::Status::OK;
}

grpc::Status JobControlService::CheckJobName(const std::string& job_name) const {
  if (job_name.empty() || job_name == spec_.name()) return grpc::Status::OK;
  return InvalidArgument(absl::StrCat("job_name: this launcher runs \"", spec_.name(),
                                      "\", got \"", job_name.substr(0, 64), "\""));
}

bool JobControlService::JoinDone() const {
  return stopping_ || joined_ == spec_.pipeline().num_stages();
}

void JobControlService::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

}  // namespace paci
