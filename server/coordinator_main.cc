// paci_coordinator: the job API and the worker gateway over gRPC, jobs kept
// in an SQLite file.
//
//   paci_coordinator --listen=127.0.0.1:7070 --db=paci.db

#include <memory>
#include <string>

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/registry.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_security.h"
#include "common/main_support.h"
#include "common/metrics_http_server.h"
#include "common/net_address.h"
#include "common/peer_identity.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "server/coordinator_metrics.h"
#include "server/coordinator_service.h"
#include "server/job_manager.h"
#include "server/job_store.h"
#include "server/worker_gateway.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "host:port to serve gRPC on (port 0: any)");
ABSL_FLAG(std::string, db, "paci-coordinator.db", "SQLite file that keeps the jobs");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:0", "host:port of /metrics");
ABSL_FLAG(std::string, port_file, "", "write the bound gRPC port here once serving");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate: serve TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA: require client certificates it signed");
ABSL_FLAG(std::string, auth_token_file, "", "clients and workers must send this bearer token");
ABSL_FLAG(std::string, admin_identities, "",
          "common names of client certificates that are administrators (comma-separated): "
          "under mutual TLS, a certificate named neither so nor as paci names the operator, "
          "workers and tenants (system:paci:...) is refused");
ABSL_FLAG(int, tenant_max_priority, 0,
          "the highest run_policy.priority a tenant's job (system:paci:tenant:<namespace>) may "
          "have; the operator and administrators may set any");
ABSL_FLAG(bool, insecure, false,
          "serve a non-loopback address without mutual TLS or a token (anyone reaching it may "
          "submit, cancel and register workers)");
ABSL_FLAG(double, heartbeat_timeout_seconds, 5, "a silent worker is dead after this");
ABSL_FLAG(double, stall_timeout_seconds, 120, "a stage without progress this long is stalled");
ABSL_FLAG(double, reconnect_grace_seconds, 10,
          "after a restart, how long running jobs wait for their workers");
ABSL_FLAG(int, max_message_bytes, 4 << 20, "largest request accepted");
ABSL_FLAG(int, max_watchers, 256, "WatchJob streams open at once");
ABSL_FLAG(int, max_watchers_per_client, 64,
          "WatchJob streams open at once from one client (certificate, or host)");
ABSL_FLAG(int, max_jobs, 100000, "unfinished jobs held at most; submissions past it are refused");
ABSL_FLAG(int, max_jobs_per_namespace, 1000,
          "jobs held at most of one namespace (labelled paci.dev/namespace: a tenant's, or the "
          "operator's TrainingJobs'), finished ones included until retention removes them; "
          "submissions past it are refused");
ABSL_FLAG(int, max_workers_per_namespace, 1000,
          "worker streams open at once of one namespace's worker certificates "
          "(system:paci:worker:<namespace>); more are refused");
ABSL_FLAG(int64_t, finished_jobs_to_keep, 10000,
          "finished jobs kept; past it the oldest are removed (-1: no limit)");
ABSL_FLAG(double, finished_job_ttl_seconds, 7 * 24 * 3600,
          "a finished job is removed this long after it ended (0: no limit)");

namespace {

absl::Status Main(const paci::ShutdownSignal& shutdown) {
  using namespace paci;
  // Who may call, checked before anything is opened or created.
  std::string token;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file)));
  }
  TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
               absl::GetFlag(FLAGS_tls_ca)};
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string host = HostOfAddress(listen);
  const absl::Status exposure = CheckExposure(
      host, tls, !token.empty(), "submit, list and cancel every job and register as a worker");
  if (!exposure.ok() && !absl::GetFlag(FLAGS_insecure)) return exposure;
  ASSIGN_OR_RETURN(AdministratorNames administrators,
                   ParseAdministratorNames(absl::GetFlag(FLAGS_admin_identities)));
  const int tenant_max_priority = absl::GetFlag(FLAGS_tenant_max_priority);
  if (tenant_max_priority < -1000 || tenant_max_priority > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tenant_max_priority: must be between -1000 and 1000 (run_policy.priority's range), got ",
        tenant_max_priority));
  }
  const int max_jobs_per_namespace = absl::GetFlag(FLAGS_max_jobs_per_namespace);
  const int max_workers_per_namespace = absl::GetFlag(FLAGS_max_workers_per_namespace);
  if (max_jobs_per_namespace < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_jobs_per_namespace: must be at least 1, got ", max_jobs_per_namespace));
  }
  if (max_workers_per_namespace < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_workers_per_namespace: must be at least 1, got ", max_workers_per_namespace));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteJobStore> store,
                   SqliteJobStore::Open(absl::GetFlag(FLAGS_db)));
  auto registry = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics metrics(*registry);
  JobManagerOptions options;
  options.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_seconds));
  options.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout_seconds));
  options.reconnect_grace = absl::Seconds(absl::GetFlag(FLAGS_reconnect_grace_seconds));
  options.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.max_jobs_per_namespace = max_jobs_per_namespace;
  options.retention.finished_jobs_to_keep = absl::GetFlag(FLAGS_finished_jobs_to_keep);
  const double ttl = absl::GetFlag(FLAGS_finished_job_ttl_seconds);
  if (ttl < 0) return absl::InvalidArgumentError("--finished_job_ttl_seconds: must not be negative");
  options.retention.finished_job_ttl = ttl == 0 ? absl::InfiniteDuration() : absl::Seconds(ttl);
  JobManager manager(*store, metrics, options);
  RETURN_IF_ERROR(manager.Recover());

  ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(tls));

  CoordinatorServiceOptions service_options;
  service_options.token = token;
  service_options.max_watchers = absl::GetFlag(FLAGS_max_watchers);
  service_options.max_watchers_per_client = absl::GetFlag(FLAGS_max_watchers_per_client);
  service_options.administrators = administrators;
  service_options.tenant_max_priority = tenant_max_priority;
  CoordinatorService coordinator(manager, service_options);
  WorkerGateway gateway(manager, token, administrators, max_workers_per_namespace);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  AllowKeepalivePings(builder);
  builder.RegisterService(&coordinator);
  builder.RegisterService(&gateway);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));

  MetricsHttpServer metrics_server(registry);
  ASSIGN_OR_RETURN(int metrics_port,
                   ServeMetrics(metrics_server, absl::GetFlag(FLAGS_metrics_address)));
  LOG(INFO) << "coordinator serving on " << host << ":" << port << " ("
            << (tls.ca_file.empty() ? (tls.enabled() ? "TLS" : "plaintext") : "mutual TLS") << ", "
            << (token.empty() ? "no client token" : "bearer token required") << ")"
            << " metrics=http://" << host << ":" << metrics_port << "/metrics"
            << " db=" << absl::GetFlag(FLAGS_db);
  if (!tls.ca_file.empty()) {
    LOG(INFO) << "administrators (--admin_identities): "
              << (administrators.empty() ? std::string("none")
                                         : absl::StrJoin(administrators, ", "))
              << "; tenants' jobs run at a priority of at most " << tenant_max_priority
              << " (--tenant_max_priority); a namespace holds at most " << max_jobs_per_namespace
              << " jobs (--max_jobs_per_namespace) and " << max_workers_per_namespace
              << " worker streams (--max_workers_per_namespace)";
  }
  if (!exposure.ok()) {  // and --insecure said to serve anyway
    LOG(WARNING) << "INSECURE (--insecure): " << host << ":" << port
                 << " takes calls from anyone who reaches it, without "
                 << (tls.enabled() ? "client authentication" : "TLS")
                 << ": they may submit, list and cancel every job and register as workers";
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    RETURN_IF_ERROR(WritePortFile(absl::GetFlag(FLAGS_port_file), port));
  }

  do {
    manager.Tick();
  } while (!shutdown.WaitFor(absl::Milliseconds(200)));  // the ticker's period
  LOG(INFO) << "coordinator stopping";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return paci::RunMain(argc, argv, "paci_coordinator",
                       "the paci coordinator: --listen=HOST:PORT --db=FILE", Main);
}
