// paci_worker: runs pipeline stages.
//
// Under a coordinator (pacictl train starts one locally), for as many jobs as
// it is given:
//   paci_worker --coordinator=HOST:PORT [--worker_id=ID] [--labels=k=v,...]
// or by hand, one stage of one job, with every stage's link address (stage S
// listens on the S-th):
//   paci_worker --spec=job.yaml --stage=S --peers=HOST:PORT,HOST:PORT,...

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#if PACI_TCMALLOC
#include <gperftools/tcmalloc.h>
#endif
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/grpc_security.h"
#include "common/job_spec.h"
#include "common/main_support.h"
#include "common/metrics_http_server.h"
#include "common/net_address.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "common/text_formats.h"
#include "worker/agent/worker_agent.h"
#include "worker/model/partition.h"
#include "worker/model/unit_profile.h"
#include "worker/runtime/replica_group.h"
#include "worker/runtime/stage_host.h"
#include "worker/transport/stage_link_service.h"

ABSL_FLAG(std::string, coordinator, "", "host:port of the coordinator to take stages from");
ABSL_FLAG(std::string, worker_id, "", "this worker's id; default <hostname>-<pid>");
ABSL_FLAG(std::string, labels, "", "k=v,... labels jobs can select workers by");
ABSL_FLAG(std::string, job_token_file, "",
          "file holding the job token the operator gave this worker's pod: the coordinator "
          "places it only on the job whose worker selector asks for that token");
ABSL_FLAG(std::string, device, "cpu", "the device stages run on");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signed the other workers' certificates: with --tls_cert the stage links "
          "are mutual TLS (each end presents its certificate)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate: serve the stage links over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(std::string, link_tls_server_name, "",
          "with --tls_cert: the DNS name every peer's certificate carries, checked on the stage "
          "links instead of the peer's address (a namespace's workers share one certificate)");
ABSL_FLAG(int64_t, max_link_message_bytes, int64_t{1} << 30,
          "the largest message the stage link server takes (the operator gives its job's "
          "largest frame); a job whose frames are larger fails on this worker, naming it");
ABSL_FLAG(std::string, spec, "", "job spec (YAML) when started by hand");
ABSL_FLAG(int, stage, -1, "the stage to run, when started by hand");
ABSL_FLAG(std::string, peers, "", "comma-separated link addresses of all stages, by hand");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "link address to bind under a coordinator");
ABSL_FLAG(std::string, advertise_host, "",
          "host the other stages reach this worker at; default: the --listen host");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:0", "host:port of /metrics");
ABSL_FLAG(double, report_interval_seconds, 0.5, "seconds between progress reports");
ABSL_FLAG(bool, profile_units, false,
          "with --spec: time each partition unit's forward, backward and optimizer step at the "
          "spec's shapes on stage 0's device, print them as JSON beside the FLOP model's "
          "prediction and the cuts both give, and exit (trains nothing)");
ABSL_FLAG(double, replica_join_timeout_seconds, 120,
          "pipeline.data_parallel > 1: seconds the replicas of a stage have to meet before the "
          "stage fails");
ABSL_FLAG(double, replica_timeout_seconds, 300,
          "pipeline.data_parallel > 1: seconds one gradient all-reduce waits for the slowest "
          "replica (replica 0 evaluates and writes the checkpoints meanwhile) before the stage "
          "fails");
ABSL_FLAG(double, exit_delay_seconds, 0,
          "started by hand: keep /metrics up this long after the stage ends, for a last scrape");

namespace paci {
namespace {

// Started by hand: the one stage to run, from --spec, --stage and --peers.
absl::StatusOr<v1::StageAssignment> AssignmentFromFlags() {
  const int stage = absl::GetFlag(FLAGS_stage);
  if (absl::GetFlag(FLAGS_spec).empty() || absl::GetFlag(FLAGS_peers).empty() || stage < 0) {
    return absl::InvalidArgumentError("give --coordinator, or --spec, --stage and --peers");
  }
  v1::StageAssignment assignment;
  ASSIGN_OR_RETURN(*assignment.mutable_spec(), LoadAndValidateJobSpec(absl::GetFlag(FLAGS_spec)));
  std::vector<std::string> peers =
      absl::StrSplit(absl::GetFlag(FLAGS_peers), ',', absl::SkipEmpty());
  const int P = assignment.spec().pipeline().num_stages();
  if (static_cast<int>(peers.size()) != P || stage >= P) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers: need one address per stage (pipeline.num_stages = ", P, "), got ",
        peers.size(), "; --stage is ", stage));
  }
  if (assignment.spec().pipeline().data_parallel() > 1) {
    return absl::InvalidArgumentError(
        "pipeline.data_parallel: replicas run under a coordinator (pacictl train starts one), "
        "not by hand");
  }
  assignment.set_job_name(assignment.spec().name());
  assignment.set_stage(stage);
  for (const std::string& peer : peers) assignment.add_stage_addresses(peer);
  return assignment;
}

// The stage links' gRPC server on `listen`; *port is the bound port.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeLinks(StageLinkService& links,
                                                         const std::string& listen, int* port) {
  grpc::ServerBuilder builder;
  // With a CA, mutual TLS: a sender must present a certificate it signed.
  ASSIGN_OR_RETURN(auto credentials,
                   MakeServerCredentials(TlsFiles{absl::GetFlag(FLAGS_tls_cert),
                                                  absl::GetFlag(FLAGS_tls_key),
                                                  absl::GetFlag(FLAGS_tls_ca)}));
  builder.AddListeningPort(listen, credentials, port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::clamp<int64_t>(absl::GetFlag(FLAGS_max_link_message_bytes), 1, int64_t{1} << 30)));
  builder.RegisterService(&links);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  return server;
}

// The allocator the worker's tensors come from (worker/CMakeLists.txt).
std::string Allocator() {
#if PACI_TCMALLOC
  int major = 0, minor = 0;
  const char* patch = "";
  tc_version(&major, &minor, &patch);
  return absl::StrCat("tcmalloc-", major, ".", minor, patch);
#else
  return "glibc";
#endif
}

// --worker_id; by hand "<job>-stage<S>"; else "<hostname>-<pid>".
std::string WorkerId(const v1::StageAssignment* by_hand) {
  if (!absl::GetFlag(FLAGS_worker_id).empty()) return absl::GetFlag(FLAGS_worker_id);
  if (by_hand != nullptr) return absl::StrCat(by_hand->job_name(), "-stage", by_hand->stage());
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  return absl::StrCat(hostname, "-", getpid());
}

// `host`: where the other workers reach this one.
absl::StatusOr<StageHostOptions> HostOptionsFromFlags(const std::string& host) {
  StageHostOptions options;
  options.replica_hostname = host;
  options.replica_join_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_replica_join_timeout_seconds));
  options.replica_timeout = absl::Seconds(absl::GetFlag(FLAGS_replica_timeout_seconds));
  options.report_interval = absl::Seconds(absl::GetFlag(FLAGS_report_interval_seconds));
  // The stage links speak TLS when this worker serves them over TLS (every
  // stage is given the same flags); it presents its own certificate to the
  // neighbours it sends to, which with --tls_ca require one.
  const bool tls_links = !absl::GetFlag(FLAGS_tls_cert).empty();
  ASSIGN_OR_RETURN(
      options.link_credentials,
      MakeChannelCredentials(tls_links ? TlsFiles{absl::GetFlag(FLAGS_tls_cert),
                                                  absl::GetFlag(FLAGS_tls_key),
                                                  absl::GetFlag(FLAGS_tls_ca)}
                                       : TlsFiles{}));
  if (tls_links) options.link_tls_server_name = absl::GetFlag(FLAGS_link_tls_server_name);
  options.max_link_message_bytes = absl::GetFlag(FLAGS_max_link_message_bytes);
  return options;
}

// How to reach the coordinator (the --coordinator_* flags) and what to
// register with it.
absl::StatusOr<WorkerAgentOptions> AgentOptionsFromFlags(const std::string& id,
                                                         const std::string& host,
                                                         const std::string& link_address,
                                                         const std::string& metrics_address,
                                                         const std::string& store_address) {
  WorkerAgentOptions options;
  ASSIGN_OR_RETURN(const CoordinatorClientOptions client,
                   CoordinatorClientOptionsFromFlags(absl::GetFlag(FLAGS_coordinator),
                                                     /*reconnect_quickly=*/true));
  ASSIGN_OR_RETURN(options.coordinator, CoordinatorClient::Connect(client));
  ASSIGN_OR_RETURN(options.host, HostOptionsFromFlags(host));
  v1::WorkerRegistration& r = options.registration;
  r.set_worker_id(id);
  r.set_link_address(link_address);
  r.set_store_address(store_address);
  r.set_metrics_address(metrics_address);
  r.set_device(absl::GetFlag(FLAGS_device));
  r.set_capacity(1);
  r.set_pid(getpid());
  ASSIGN_OR_RETURN(const auto labels, ParseKeyValues(absl::GetFlag(FLAGS_labels), "--labels"));
  for (const auto& [key, value] : labels) (*r.mutable_labels())[key] = value;
  if (const std::string path = absl::GetFlag(FLAGS_job_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(path);
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          absl::StrCat("--job_token_file: ", token.status().message()));
    }
    r.set_job_token(*std::move(token));
  }
  return options;
}

// Serves the coordinator until SIGINT or SIGTERM.
void ServeCoordinator(const WorkerAgentOptions& options, StageLinkService& links,
                      prometheus::Registry& registry, ShutdownSignal& shutdown) {
  WorkerAgent agent(options, links, registry);
  std::thread stopper([&] {
    shutdown.Wait();
    if (shutdown.signal_number() != 0) {
      LOG(INFO) << "signal " << shutdown.signal_number() << ": shutting down";
    }
    agent.Shutdown();
  });
  LOG(INFO) << "worker " << options.registration.worker_id() << " serving coordinator "
            << options.coordinator;
  agent.Run();
  shutdown.Request();  // ends the stopper if no signal came
  stopper.join();
}

// --profile_units: UnitProfileReport of the spec on stdout.
absl::Status ProfileUnits() {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, LoadAndValidateJobSpec(absl::GetFlag(FLAGS_spec)));
  torch::set_num_threads(spec.runtime().threads_per_stage());
  std::cout << UnitProfileReport(spec, torch::Device(StageDevice(spec, 0)));
  return absl::OkStatus();
}

// `shutdown`: under a coordinator, the signals; null by hand (a signal ends
// the process, and its neighbours see the link break).
absl::Status Main(ShutdownSignal* shutdown) {
  if (absl::GetFlag(FLAGS_profile_units)) return ProfileUnits();
  std::optional<v1::StageAssignment> by_hand;
  std::string listen = absl::GetFlag(FLAGS_listen);
  if (shutdown == nullptr) {
    ASSIGN_OR_RETURN(by_hand, AssignmentFromFlags());
    listen = by_hand->stage_addresses(by_hand->stage());
  }

  // Metrics and links come up first, so their addresses can be told.
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsHttpServer metrics_server(registry);
  ASSIGN_OR_RETURN(const int metrics_port,
                   ServeMetrics(metrics_server, absl::GetFlag(FLAGS_metrics_address)));
  // Mutual-TLS links with a shared name: the receiving end checks the
  // sender's certificate for it too.
  const bool mutual_tls_links =
      !absl::GetFlag(FLAGS_tls_cert).empty() && !absl::GetFlag(FLAGS_tls_ca).empty();
  StageLinkService links(mutual_tls_links ? absl::GetFlag(FLAGS_link_tls_server_name) : "");
  int link_port = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<grpc::Server> server, ServeLinks(links, listen, &link_port));
  const std::string host = absl::GetFlag(FLAGS_advertise_host).empty()
                               ? HostOfAddress(listen)
                               : absl::GetFlag(FLAGS_advertise_host);
  const std::string link_address = absl::StrCat(host, ":", link_port);
  const std::string metrics_address =
      absl::StrCat(HostOfAddress(absl::GetFlag(FLAGS_metrics_address)), ":", metrics_port);
  const std::string id = WorkerId(by_hand ? &*by_hand : nullptr);
  const std::string link_security =
      absl::GetFlag(FLAGS_tls_cert).empty()
          ? std::string("plaintext")
          : absl::StrCat(absl::GetFlag(FLAGS_tls_ca).empty() ? "TLS" : "mutual TLS",
                         absl::GetFlag(FLAGS_link_tls_server_name).empty()
                             ? ""
                             : absl::StrCat(" (peers named ",
                                            absl::GetFlag(FLAGS_link_tls_server_name), ")"));
  LOG(INFO) << "worker " << id << " pid=" << getpid() << " link=" << link_address
            << " links=" << link_security << " metrics=http://" << metrics_address << "/metrics"
            << " allocator=" << Allocator();

  absl::Status status;
  if (by_hand) {
    ASSIGN_OR_RETURN(const StageHostOptions host_options, HostOptionsFromFlags(host));
    // Nobody to report to: the stage logs its validation losses itself.
    StageHost stage_host(*by_hand, links, *registry, /*sink=*/nullptr, host_options);
    status = stage_host.Run();
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_exit_delay_seconds)));
  } else {
    // The replicas of the stages this worker runs as replica 0 meet here:
    // its port is reserved now and served only once such a stage comes.
    ASSIGN_OR_RETURN(const std::unique_ptr<ReplicaStoreServer> store,
                     ReplicaStoreServer::Reserve(host));
    ASSIGN_OR_RETURN(WorkerAgentOptions options,
                     AgentOptionsFromFlags(id, host, link_address, metrics_address,
                                           store->address()));
    options.host.replica_store = store.get();
    ServeCoordinator(options, links, *registry, *shutdown);
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return status;
}

}  // namespace
}  // namespace paci

int main(int argc, char** argv) {
  paci::InitMain(
      argc, argv, "paci_worker",
      "runs pipeline stages: --coordinator=HOST:PORT, or --spec=FILE --stage=S --peers=A,B,...");
  // Under a coordinator SIGINT and SIGTERM end the agent; by hand they end
  // the process.
  std::optional<paci::ShutdownSignal> shutdown;
  if (!absl::GetFlag(FLAGS_coordinator).empty()) shutdown.emplace();  // before any thread starts
  return paci::MainExitCode(paci::Main(shutdown ? &*shutdown : nullptr), "paci_worker");
}
