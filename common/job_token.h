#pragma once

// A job's worker token: the credential that binds a worker to one job, beyond
// its namespace (peer_identity.h). The operator derives each TrainingJob's
// token from a key only it holds (JobToken) and gives it to that job's pods
// alone; a worker presents it when it registers (WorkerRegistration.job_token);
// the coordinator keeps only its digest, as the worker label kWorkerTokenLabel
// (which no worker can set itself), and the job's run_policy.worker_selector
// asks for that label. So a worker is placed only on the job whose token it
// holds.

#include <string>
#include <string_view>

namespace paci {

// The label the coordinator gives a worker that presented a job token: its
// TokenDigest. A label of this name the worker sends itself is dropped.
inline constexpr char kWorkerTokenLabel[] = "paci.dev/job-token-sha256";

// Lowercase hex SHA-256 of `token`.
std::string TokenDigest(std::string_view token);

// The token of the job with uid `job_uid`: lowercase hex HMAC-SHA256 of the
// uid under `key`.
std::string JobToken(std::string_view key, std::string_view job_uid);

}  // namespace paci
