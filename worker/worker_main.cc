// paci_worker: one pipeline stage.
//
// Started by a launcher (pacictl train, later the coordinator):
//   paci_worker --job_control=HOST:PORT --stage=S
// or by hand, with the spec and every stage's link address:
//   paci_worker --spec=job.yaml --stage=S --peers=HOST:PORT,HOST:PORT,...
// (stage S listens on the S-th address).

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>
#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "common/metrics_http_server.h"
#include "common/status_macros.h"
#include "paci/v1/stage.grpc.pb.h"
#include "worker/data/corpus.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_metrics.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/transport/inbox.h"
#include "worker/transport/peer_sender.h"
#include "worker/transport/stage_link_service.h"

ABSL_FLAG(std::string, job_control, "", "JobControl address of the launcher or coordinator");
ABSL_FLAG(int, stage, -1, "this worker's pipeline stage");
ABSL_FLAG(std::string, spec, "", "job spec (YAML) when started by hand");
ABSL_FLAG(std::string, peers, "", "comma-separated link addresses of all stages, by hand");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "link address to bind (launcher mode)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:0", "host:port of /metrics");
ABSL_FLAG(double, report_interval_seconds, 0.5, "seconds between progress reports");
ABSL_FLAG(double, exit_delay_seconds, 0,
          "keep /metrics up this long after the stage ends, for a last scrape");

namespace paci {
namespace {

struct Joined {
  v1::JobSpec spec;
  std::vector<std::string> addresses;
  int trace_max_spans = 0;  // 0: record no timeline
};

// Starts the progress reports to JobControl and stops them; owns its thread.
class Reporter {
 public:
  Reporter(v1::JobControl::Stub* stub, StageRuntime& runtime, absl::Duration interval)
      : stub_(stub), runtime_(runtime), interval_(interval) {
    if (stub_) thread_ = std::thread([this] { Loop(); });
  }
  ~Reporter() { Stop(); }

  // Sends the final report (with `error` when not ok) and stops.
  void Finish(const absl::Status& status) {
    Stop();
    if (!stub_) return;
    v1::StageReport report = runtime_.TakeReport();
    if (!status.ok()) report.set_error(std::string(status.message()));
    Send(report);
  }

 private:
  void Stop() {
    if (thread_.joinable()) {
      stop_.Notify();
      thread_.join();
    }
  }
  void Loop() {
    while (!stop_.WaitForNotificationWithTimeout(interval_)) {
      v1::ReportAck ack = Send(runtime_.TakeReport());
      if (ack.cancel()) runtime_.Cancel();
    }
  }
  v1::ReportAck Send(const v1::StageReport& report) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReportAck ack;
    grpc::Status status = stub_->Report(&context, report, &ack);
    if (!status.ok()) LOG(WARNING) << "report failed: " << status.error_message();
    return ack;
  }

  v1::JobControl::Stub* stub_;
  StageRuntime& runtime_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

absl::StatusOr<Joined> JoinJob(v1::JobControl::Stub& stub, int stage, const std::string& link,
                               const std::string& metrics) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  context.set_wait_for_ready(true);
  v1::JoinRequest request;
  request.set_stage(stage);
  request.set_link_address(link);
  request.set_metrics_address(metrics);
  request.set_pid(getpid());
  v1::JoinResponse response;
  grpc::Status status = stub.Join(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("joining the job failed: ", status.error_message()));
  }
  return Joined{response.spec(),
                {response.stage_addresses().begin(), response.stage_addresses().end()},
                response.trace_max_spans()};
}

// Everything after joining: data, model, links, training. `*reported` is set
// once the final report (success or error) has been sent.
absl::Status RunStage(const v1::JobSpec& spec, int stage, const std::vector<std::string>& peers,
                      std::shared_ptr<Inbox> inbox_ptr, StageLinkService& link_service,
                      prometheus::Registry& registry, v1::JobControl::Stub* control,
                      int trace_max_spans, bool* reported) {
  const int P = spec.pipeline().num_stages();
  const int threads = spec.runtime().threads_per_stage();
  torch::set_num_threads(threads);

  std::optional<Corpus> corpus;
  if (stage == 0 || stage == P - 1) {
    CorpusOptions options;
    options.path = spec.data().corpus_path();
    options.validation_fraction = spec.data().validation_fraction();
    options.seed = spec.data().seed();
    options.seq_len = spec.model().seq_len();
    options.micro_batch_size = spec.pipeline().micro_batch_size();
    ASSIGN_OR_RETURN(corpus, Corpus::Load(options));
    if (corpus->tokenizer().vocab_size() > spec.model().vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.vocab_size: the corpus ", options.path, " has ", corpus->tokenizer().vocab_size(),
          " distinct characters, more than vocab_size ", spec.model().vocab_size()));
    }
  }

  LinkExpectations expect;
  expect.job_name = spec.name();
  expect.stage = stage;
  expect.num_stages = P;
  expect.hidden_shape = {spec.pipeline().micro_batch_size(), spec.model().seq_len(),
                         spec.model().d_model()};
  link_service.Attach(expect, inbox_ptr);
  Inbox& inbox = *inbox_ptr;

  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(spec.pipeline().schedule()));
  StageMetrics metrics(registry, spec.name(), stage, P,
                       DriftBound(kind, P, stage, spec.pipeline().accumulation()));
  auto on_failure = [&inbox](absl::Status status) { inbox.Fail(std::move(status)); };
  std::unique_ptr<PeerSender> previous, next;
  if (stage > 0) {
    previous = std::make_unique<PeerSender>(
        PeerSender::Options{peers[stage - 1], absl::StrCat("stage ", stage - 1)}, on_failure);
    previous->Start();
  }
  if (stage < P - 1) {
    next = std::make_unique<PeerSender>(
        PeerSender::Options{peers[stage + 1], absl::StrCat("stage ", stage + 1)}, on_failure);
    next->Start();
  }

  std::unique_ptr<SpanRecorder> spans;
  if (trace_max_spans > 0) spans = std::make_unique<SpanRecorder>(trace_max_spans);
  StageRuntime runtime(spec, stage, corpus ? &*corpus : nullptr, inbox, previous.get(), next.get(),
                       metrics, spans.get());
  absl::Status status = runtime.Init();
  Reporter reporter(control, runtime,
                    absl::Seconds(absl::GetFlag(FLAGS_report_interval_seconds)));
  if (status.ok()) status = runtime.Run();
  reporter.Finish(status);
  *reported = control != nullptr;
  return status;
}

absl::Status Main() {
  const int stage = absl::GetFlag(FLAGS_stage);
  const bool launched = !absl::GetFlag(FLAGS_job_control).empty();
  if (stage < 0) return absl::InvalidArgumentError("--stage is required");
  if (!launched && (absl::GetFlag(FLAGS_spec).empty() || absl::GetFlag(FLAGS_peers).empty())) {
    return absl::InvalidArgumentError("give --job_control, or --spec and --peers");
  }
  std::vector<std::string> peers;
  std::optional<v1::JobSpec> hand_spec;
  std::string listen = absl::GetFlag(FLAGS_listen);
  if (!launched) {
    ASSIGN_OR_RETURN(hand_spec, LoadAndValidateJobSpec(absl::GetFlag(FLAGS_spec)));
    peers = absl::StrSplit(absl::GetFlag(FLAGS_peers), ',', absl::SkipEmpty());
    if (static_cast<int>(peers.size()) != hand_spec->pipeline().num_stages() ||
        stage >= static_cast<int>(peers.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--peers: need one address per stage (pipeline.num_stages = ",
          hand_spec->pipeline().num_stages(), "), got ", peers.size(), "; --stage is ", stage));
    }
    listen = peers[stage];
  }

  // Metrics and links come up before joining, so their addresses can be told.
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsHttpServer metrics_server(registry);
  ASSIGN_OR_RETURN(const int metrics_port, metrics_server.Start(absl::GetFlag(FLAGS_metrics_address)));
  auto inbox = std::make_shared<Inbox>(64);
  StageLinkService link_service;
  int link_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &link_port);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.RegisterService(&link_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || link_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  const std::string link_address = absl::StrCat(host, ":", link_port);
  const std::string metrics_address = absl::StrCat(host, ":", metrics_port);

  std::unique_ptr<v1::JobControl::Stub> control;
  v1::JobSpec spec;
  int trace_max_spans = 0;
  if (launched) {
    control = v1::JobControl::NewStub(grpc::CreateChannel(absl::GetFlag(FLAGS_job_control),
                                                          grpc::InsecureChannelCredentials()));
    ASSIGN_OR_RETURN(Joined joined, JoinJob(*control, stage, link_address, metrics_address));
    spec = joined.spec;
    peers = joined.addresses;
    trace_max_spans = joined.trace_max_spans;
  } else {
    spec = *hand_spec;
  }
  const int P = spec.pipeline().num_stages();
  if (stage >= P || static_cast<int>(peers.size()) != P) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " does not fit a job of ", P,
                                                   " stages with ", peers.size(), " addresses"));
  }
  LOG(INFO) << "job=" << spec.name() << " stage=" << stage << "/" << P << " pid=" << getpid()
            << " link=" << link_address
            << " metrics=http://" << metrics_address << "/metrics";

  bool reported = false;
  absl::Status status =
      RunStage(spec, stage, peers, inbox, link_service, *registry, control.get(), trace_max_spans,
               &reported);
  if (!status.ok() && !reported && control) {
    // Failed before the runtime could report: tell the launcher why.
    v1::StageReport report;
    report.set_job_name(spec.name());
    report.set_stage(stage);
    report.set_error(std::string(status.message()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReportAck ack;
    control->Report(&context, report, &ack);
  }
  inbox->Close();
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_exit_delay_seconds)));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return status;
}

}  // namespace
}  // namespace paci

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one pipeline stage: --job_control=HOST:PORT --stage=S, or --spec=FILE --stage=S "
      "--peers=A,B,...");
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  absl::Status status = paci::Main();
  if (!status.ok()) {
    LOG(ERROR) << "stage " << absl::GetFlag(FLAGS_stage) << " failed: " << status.message();
    return 1;
  }
  return 0;
}
