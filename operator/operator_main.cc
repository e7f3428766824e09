// paci_operator: reconciles TrainingJob objects (paci.dev/v1alpha1) into
// worker pods and coordinator jobs, mirrors their progress into .status.
//
//   paci_operator --kubeconfig=~/.kube/config --coordinator=127.0.0.1:7070
//   (in a pod: no --kubeconfig; the service account is used)

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/grpc_security.h"
#include "common/main_support.h"
#include "common/metrics_http_server.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "common/text_formats.h"
#include "operator/controller/coordinator_jobs.h"
#include "operator/controller/leader_elector.h"
#include "operator/controller/manager.h"
#include "operator/controller/training_job_controller.h"
#include "kube/kube_client.h"
#include "operator/operator_metrics.h"

ABSL_FLAG(std::string, kubeconfig, "", "kubeconfig file; empty: the in-cluster service account");
ABSL_FLAG(std::string, watch_namespace, "", "watch TrainingJobs in this namespace only; empty: all");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "host:port of the coordinator");
ABSL_FLAG(std::string, worker_secret, "",
          "Secret (in each job's namespace) mounted into worker pods for their credentials");
ABSL_FLAG(std::string, worker_secret_flags,
          "ca.crt=coordinator_tls_ca,tls.crt=coordinator_tls_cert,tls.key=coordinator_tls_key,"
          "token=coordinator_auth_token_file",
          "KEY=FLAG,...: each key of --worker_secret passed to the worker as --FLAG=<file>");
ABSL_FLAG(std::string, worker_allowed_secrets, "",
          "comma-separated Secrets a TrainingJob's spec.worker may name (volumes, env, envFrom); "
          "every other is refused. Never --worker_secret or a job's token");
ABSL_FLAG(std::string, reserved_namespaces, "",
          "comma-separated namespaces no TrainingJob may run in (the release's own, which holds "
          "its CA and the operator's Secrets); one there fails naming metadata.namespace");
ABSL_FLAG(int, max_priority, 0,
          "the highest spec.runPolicy.priority a TrainingJob may ask for (up to 1000); a higher "
          "one fails it naming the field");
ABSL_FLAG(std::string, worker_coordinator_address, "",
          "the coordinator as worker pods reach it; default: --coordinator");
ABSL_FLAG(std::string, worker_image, "paci-worker:latest", "image of worker pods");
ABSL_FLAG(std::string, worker_cuda_image, "paci-worker-cuda:latest",
          "image of worker pods whose TrainingJob puts a stage on a GPU (runtime.device or "
          "runtime.stageDevices cuda) and names no spec.worker.image");
ABSL_FLAG(std::string, worker_command, "paci_worker", "command of worker pods");
ABSL_FLAG(std::string, worker_args, "", "comma-separated extra arguments for every worker");
ABSL_FLAG(int, worker_link_port, 7000, "port of each worker pod's stage link");
ABSL_FLAG(int, worker_metrics_port, 9100, "port of each worker pod's /metrics");
ABSL_FLAG(bool, network_policies, true,
          "a NetworkPolicy per TrainingJob: its worker pods take connections only from each other "
          "(and metrics scrapes)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:8080", "host:port of /metrics, /healthz, /readyz");
ABSL_FLAG(std::string, metrics_port_file, "", "write the bound metrics port here");
ABSL_FLAG(bool, worker_link_tls, false,
          "the stage links between worker pods are mutual TLS with the --worker_secret's ca.crt, "
          "tls.crt and tls.key, whose certificate must name paci-worker.<namespace> (the chart's "
          "and scripts/deploy-tls.sh's do)");
ABSL_FLAG(std::string, worker_token_key_file, "",
          "file holding the key each TrainingJob's worker token is derived from: a job's "
          "workers must present its token to be placed on it (empty: no job tokens)");
ABSL_FLAG(bool, kueue, false,
          "Kueue runs on the cluster (its CRDs installed): a TrainingJob labelled "
          "kueue.x-k8s.io/queue-name runs once Kueue admits the Workload made for it");
ABSL_FLAG(bool, kueue_workload_slices, false,
          "with --kueue, Kueue runs with its ElasticJobsViaWorkloadSlices feature gate: an "
          "elastic TrainingJob admitted in part asks for its largest shape again with a workload "
          "slice, and grows once Kueue admits it");
ABSL_FLAG(bool, leader_election, true, "elect one active replica with a Lease");
ABSL_FLAG(std::string, leader_election_namespace, "", "namespace of the Lease; default: own");
ABSL_FLAG(std::string, lease_name, "paci-operator", "name of the Lease");
ABSL_FLAG(std::string, pod_name, "", "this replica's identity; default: <hostname>-<pid>");
ABSL_FLAG(double, lease_duration_seconds, 15, "a leader silent this long is replaced");
ABSL_FLAG(double, renew_deadline_seconds, 10, "a leader unable to renew this long steps down");
ABSL_FLAG(double, retry_period_seconds, 2, "how often the lease is tried or renewed");
ABSL_FLAG(int, workers, 2, "reconciles that may run at once");
ABSL_FLAG(double, poll_interval_seconds, 2, "how often a running job's progress is read");
ABSL_FLAG(int, watch_timeout_seconds, 300, "the server ends each watch after this; then resumed");

namespace {

using paci::op::ControllerOptions;
using paci::kube::KubeClientOptions;
using paci::op::LeaderElector;

std::string Identity() {
  if (!absl::GetFlag(FLAGS_pod_name).empty()) return absl::GetFlag(FLAGS_pod_name);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

// The API server from --kubeconfig, or the pod's service account.
absl::StatusOr<KubeClientOptions> KubeOptionsFromFlags() {
  if (!absl::GetFlag(FLAGS_kubeconfig).empty()) {
    return paci::kube::LoadKubeconfig(absl::GetFlag(FLAGS_kubeconfig));
  }
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  return paci::kube::InClusterConfig(host ? host : "", port ? port : "");
}

// The controller's and the reconciler's options from the flags;
// InvalidArgument for a malformed --worker_secret_flags, a short token key or
// --worker_link_tls without --worker_secret.
absl::StatusOr<ControllerOptions> ControllerOptionsFromFlags() {
  ControllerOptions options;
  options.watch_namespace = absl::GetFlag(FLAGS_watch_namespace);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.watch_timeout_seconds = absl::GetFlag(FLAGS_watch_timeout_seconds);
  paci::op::ReconcilerOptions& reconciler = options.reconciler;
  reconciler.worker_coordinator_address = absl::GetFlag(FLAGS_worker_coordinator_address).empty()
                                              ? absl::GetFlag(FLAGS_coordinator)
                                              : absl::GetFlag(FLAGS_worker_coordinator_address);
  reconciler.default_worker_image = absl::GetFlag(FLAGS_worker_image);
  reconciler.default_worker_cuda_image = absl::GetFlag(FLAGS_worker_cuda_image);
  reconciler.worker_command = absl::GetFlag(FLAGS_worker_command);
  reconciler.link_port = absl::GetFlag(FLAGS_worker_link_port);
  reconciler.metrics_port = absl::GetFlag(FLAGS_worker_metrics_port);
  reconciler.network_policies = absl::GetFlag(FLAGS_network_policies);
  reconciler.kueue = absl::GetFlag(FLAGS_kueue);
  reconciler.kueue_workload_slices = absl::GetFlag(FLAGS_kueue_workload_slices);
  if (const std::string path = absl::GetFlag(FLAGS_worker_token_key_file); !path.empty()) {
    absl::StatusOr<std::string> key = paci::ReadTokenFile(path);
    if (!key.ok()) {
      return absl::Status(key.status().code(),
                          absl::StrCat("--worker_token_key_file: ", key.status().message()));
    }
    if (key->size() < 32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--worker_token_key_file: ", path, " holds ", key->size(),
          " characters; a key needs at least 32"));
    }
    reconciler.worker_token_key = *std::move(key);
  }
  reconciler.poll_interval = absl::Seconds(absl::GetFlag(FLAGS_poll_interval_seconds));
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_worker_args), ',', absl::SkipEmpty())) {
    reconciler.extra_worker_args.emplace_back(arg);
  }
  reconciler.worker_secret = absl::GetFlag(FLAGS_worker_secret);
  reconciler.worker_link_tls = absl::GetFlag(FLAGS_worker_link_tls);
  if (reconciler.worker_link_tls && reconciler.worker_secret.empty()) {
    return absl::InvalidArgumentError(
        "--worker_link_tls: the links' certificates come from --worker_secret, which is empty");
  }
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_worker_allowed_secrets), ',', absl::SkipEmpty())) {
    if (name == reconciler.worker_secret ||
        absl::EndsWith(name, paci::op::kWorkerTokenSecretSuffix)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--worker_allowed_secrets: \"", name,
          "\" is the operator's own (the worker Secret or a job's token): the operator mounts "
          "it where it belongs, a TrainingJob may not name it"));
    }
    reconciler.worker_allowed_secrets.emplace(name);
  }
  reconciler.max_priority = absl::GetFlag(FLAGS_max_priority);
  if (reconciler.max_priority < -1000 || reconciler.max_priority > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_priority: must be between -1000 and 1000 (spec.runPolicy.priority's range), got ",
        reconciler.max_priority));
  }
  for (absl::string_view ns :
       absl::StrSplit(absl::GetFlag(FLAGS_reserved_namespaces), ',', absl::SkipEmpty())) {
    reconciler.reserved_namespaces.emplace(ns);
  }
  if (!options.watch_namespace.empty() &&
      reconciler.reserved_namespaces.count(options.watch_namespace) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--watch_namespace: \"", options.watch_namespace, "\" is one of --reserved_namespaces"));
  }
  ASSIGN_OR_RETURN(reconciler.worker_secret_flags,
                   paci::ParseKeyValues(absl::GetFlag(FLAGS_worker_secret_flags),
                                        "--worker_secret_flags"));
  for (const auto& [key, flag] : reconciler.worker_secret_flags) {
    if (flag.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--worker_secret_flags: key ", key, " names no flag (KEY=FLAG)"));
    }
  }
  return options;
}

// The Lease this replica competes for, in the kubeconfig's namespace unless
// --leader_election_namespace says otherwise.
LeaderElector::Options LeaseOptionsFromFlags(const KubeClientOptions& kube_options) {
  LeaderElector::Options lease;
  lease.lease_namespace = absl::GetFlag(FLAGS_leader_election_namespace).empty()
                              ? kube_options.default_namespace
                              : absl::GetFlag(FLAGS_leader_election_namespace);
  lease.lease_name = absl::GetFlag(FLAGS_lease_name);
  lease.identity = Identity();
  lease.lease_duration = absl::Seconds(absl::GetFlag(FLAGS_lease_duration_seconds));
  lease.renew_deadline = absl::Seconds(absl::GetFlag(FLAGS_renew_deadline_seconds));
  lease.retry_period = absl::Seconds(absl::GetFlag(FLAGS_retry_period_seconds));
  return lease;
}

absl::Status Main(const paci::ShutdownSignal& shutdown) {
  using namespace paci;
  using namespace paci::op;
  OperatorMetrics metrics;

  ASSIGN_OR_RETURN(const KubeClientOptions kube_options, KubeOptionsFromFlags());
  paci::kube::KubeClient kube(kube_options, &metrics);

  ASSIGN_OR_RETURN(const CoordinatorClientOptions client_options,
                   CoordinatorClientOptionsFromFlags(absl::GetFlag(FLAGS_coordinator),
                                                     /*reconnect_quickly=*/true));
  ASSIGN_OR_RETURN(const std::unique_ptr<CoordinatorClient> client,
                   CoordinatorClient::Connect(client_options));
  GrpcCoordinatorJobs coordinator(*client);

  ASSIGN_OR_RETURN(ControllerOptions options, ControllerOptionsFromFlags());

  // The controller runs only while this replica leads (Manager).
  Manager::Options manager_options;
  manager_options.leading_changed = [&metrics](bool leading) { metrics.SetLeader(leading); };
  std::unique_ptr<paci::kube::KubeClient> lease_client;
  if (absl::GetFlag(FLAGS_leader_election)) {
    manager_options.lease = LeaseOptionsFromFlags(kube_options);
    RETURN_IF_ERROR(LeaderElector::Validate(manager_options.lease));
    // Its own client, whose requests end within the renew deadline.
    KubeClientOptions lease_client_options = kube_options;
    lease_client_options.request_timeout =
        std::min(kube_options.request_timeout, manager_options.lease.renew_deadline);
    lease_client = std::make_unique<paci::kube::KubeClient>(lease_client_options, &metrics);
    manager_options.lease_client = lease_client.get();
  }
  Manager manager(std::move(manager_options), [&] {
    return std::make_unique<TrainingJobController>(kube, coordinator, metrics, options);
  });

  // /healthz, and /readyz: ready when standing by, or leading with the caches synced.
  MetricsHttpServer http(metrics.registry());
  http.AddHandler("/healthz", [] { return std::make_pair(200, std::string("ok")); });
  http.AddHandler("/readyz", [&manager] { return manager.Readiness(); });
  ASSIGN_OR_RETURN(int metrics_port, ServeMetrics(http, absl::GetFlag(FLAGS_metrics_address),
                                                  absl::GetFlag(FLAGS_metrics_port_file)));
  LOG(INFO) << "operator " << Identity() << ": API server " << kube_options.server
            << ", coordinator " << absl::GetFlag(FLAGS_coordinator) << ", namespace "
            << (options.watch_namespace.empty() ? "(all)" : options.watch_namespace)
            << ", metrics port " << metrics_port;
  return manager.Run([&shutdown](absl::Duration wait) { return shutdown.WaitFor(wait); });
}

}  // namespace

int main(int argc, char** argv) {
  return paci::RunMain(
      argc, argv, "paci_operator",
      "the paci TrainingJob operator: --kubeconfig=FILE --coordinator=HOST:PORT", Main);
}
