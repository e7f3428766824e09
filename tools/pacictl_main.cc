// pacictl: trains locally through the whole system, and is the command-line
// client of a coordinator.
//
//   pacictl train SPEC.yaml [--summary=PATH] [--trace=PATH]
//   pacictl parity SPEC.yaml [--seeds=1,2,3] [--steps=N] [--out=DIR]
//   pacictl submit SPEC.yaml [--labels=K=V,...] | get NAME | watch NAME | cancel NAME
//   pacictl sample --checkpoint=DIR --prompt=TEXT ... | export --checkpoint=DIR --out=FILE
//           (they run paci_model, which links Torch)
//   pacictl prepare-data INPUT... --out=DIR [--tokenizer=char|bpe|unigram]
//           [--tokenizer_model=FILE.model] [--vocab_size=N] [--shard_tokens=N]
//           [--text_field=NAME] [--skip_bad_lines]
//   pacictl list [--phase=P] [--selector=K=V,...] [--name_prefix=S] [--limit=N]
//                [--page_size=N] [--page_token=T]
//           [--coordinator=HOST:PORT] [--coordinator_auth_token_file=F]
//           [--coordinator_tls_ca=F] [--coordinator_tls_cert=F --coordinator_tls_key=F]

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "common/coordinator_client.h"
#include "common/flag_usage.h"
#include "common/text_formats.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "common/shutdown_signal.h"
#include "glog/logging.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "tools/job_view.h"
#include "tools/local_launcher.h"
#include "tools/parity.h"
#include "tools/kube_job.h"
#include "tools/kube_logs.h"
#include "tools/prepare_data.h"
#include "tools/progress_printer.h"

ABSL_FLAG(std::string, summary, "", "train: write the run summary as JSON to this path");
ABSL_FLAG(std::string, trace, "",
          "train: record a timeline of every stage and write it to this path as Chrome trace "
          "JSON (open in ui.perfetto.dev or chrome://tracing)");
ABSL_FLAG(int, trace_max_spans, 100000,
          "with --trace: spans kept per stage, the first ones (about 6 per micro-batch)");
ABSL_FLAG(std::string, worker_flags, "",
          "train: extra flags for every worker, separated by spaces");
ABSL_FLAG(double, linger_seconds, 0,
          "train: keep the processes and their /metrics up this long after the job ends");
ABSL_FLAG(std::string, worker_binary, "", "train: paci_worker; default: beside pacictl");
ABSL_FLAG(std::string, coordinator_binary, "",
          "train: paci_coordinator; default: beside pacictl");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "the coordinator to talk to");
ABSL_FLAG(std::string, phase, "", "list: only jobs in this phase (QUEUED, RUNNING, ...)");
ABSL_FLAG(std::string, selector, "", "list: only jobs with these labels, K=V[,K=V...]");
ABSL_FLAG(std::string, name_prefix, "", "list: only jobs whose name starts with this");
ABSL_FLAG(int, limit, 0, "list: at most this many jobs (0: every job, page after page)");
ABSL_FLAG(int, page_size, 0, "list: jobs per request (0: the coordinator's default, 100; max 1000)");
ABSL_FLAG(std::string, page_token, "", "list: start at this page (printed by a --limit list)");
ABSL_FLAG(std::string, labels, "", "submit: the job's labels, K=V[,K=V...]");
ABSL_FLAG(std::string, out, "",
          "prepare-data: the dataset folder to write; parity: the folder for the runs, the "
          "table and the plot (default parity-<job name>)");
ABSL_FLAG(std::string, tokenizer, "", "prepare-data: char (default), bpe or unigram");
ABSL_FLAG(std::string, tokenizer_model, "",
          "prepare-data: tokenize with this SentencePiece .model file instead");
ABSL_FLAG(std::string, tokenizer_json, "",
          "prepare-data: tokenize with this Hugging Face tokenizer.json instead");
ABSL_FLAG(std::string, text_field, "text", "prepare-data: the text field of .jsonl lines");
ABSL_FLAG(bool, skip_bad_lines, false,
          "prepare-data: skip (and report) .jsonl lines without a text field instead of failing");
ABSL_FLAG(int, vocab_size, 0, "prepare-data: with bpe or unigram, the tokens to train");
ABSL_FLAG(int64_t, shard_tokens, int64_t{16} << 20, "prepare-data: tokens per shard");
ABSL_FLAG(bool, reuse, false,
          "prepare-data: keep an --out that holds the dataset of these inputs and options "
          "(exit 0); refuse one made otherwise");
ABSL_FLAG(std::string, message_file, "",
          "prepare-data: also write the closing line, or the error, to this file "
          "(a pod's terminationMessagePath)");
ABSL_FLAG(std::string, kubeconfig, "",
          "logs, get/watch trainingjob/NAME: the kubeconfig (default: $KUBECONFIG's first "
          "file, else ~/.kube/config)");
ABSL_FLAG(std::string, namespace, "",
          "logs, get/watch trainingjob/NAME: the TrainingJob's namespace (default: the "
          "kubeconfig's)");
ABSL_FLAG(int, stage, 0, "logs: the stage whose pod's log to print");
ABSL_FLAG(int, replica, 0, "logs: with pipeline.dataParallel, the replica of that stage");
ABSL_FLAG(bool, dataset, false, "logs: the dataset initializer's pod instead");
ABSL_FLAG(int, tail, 0, "logs: only the last N lines (0: all)");
ABSL_FLAG(bool, follow, false, "logs: go on printing what the pod writes until it ends");
ABSL_FLAG(std::string, model_binary, "", "sample, export: paci_model; default: beside pacictl");
ABSL_FLAG(std::string, seeds, "1,2,3",
          "parity: the seeds (model.init_seed and data.seed) of the pairs of runs");
ABSL_FLAG(int64_t, steps, 0, "parity: optimizer steps of every run (0: the spec's training.steps)");


namespace {

constexpr char kUsage[] =
    "usage: pacictl train SPEC.yaml [--summary=PATH] [--trace=PATH] [--trace_max_spans=N]\n"
    "       pacictl parity SPEC.yaml [--seeds=1,2,3] [--steps=N] [--out=DIR]\n"
    "       pacictl submit SPEC.yaml [--labels=K=V,...]\n"
    "       pacictl list [--phase=PHASE] [--selector=K=V,...] [--name_prefix=S]\n"
    "                    [--limit=N] [--page_size=N] [--page_token=T]\n"
    "       pacictl get NAME | watch NAME | cancel NAME\n"
    "       pacictl get|watch trainingjob/NAME [--namespace=NS] [--kubeconfig=FILE]\n"
    "       pacictl sample --checkpoint=DIR --prompt=TEXT [--max_tokens=N] [--temperature=T]\n"
    "                      [--top_k=K] [--seed=S]\n"
    "       pacictl export [--format=hf] --checkpoint=DIR --out=FILE|FOLDER\n"
    "       pacictl prepare-data INPUT... --out=DIR [--tokenizer=char|bpe|unigram]\n"
    "                    [--tokenizer_model=FILE.model] [--tokenizer_json=FILE]\n"
    "                    [--vocab_size=N] [--shard_tokens=N]\n"
    "                    [--text_field=NAME] [--skip_bad_lines] [--reuse]\n"
    "                    [--message_file=FILE]\n"
    "       pacictl logs TRAININGJOB [--stage=N] [--replica=R] [--dataset] [--tail=N] [--follow]\n"
    "                    [--namespace=NS] [--kubeconfig=FILE]\n"
    "       pacictl help\n"
    "\n"
    "train   runs the job in SPEC.yaml on this machine through the whole system: a\n"
    "        coordinator and one paci_worker per stage on 127.0.0.1, live progress,\n"
    "        a summary table at the end. --summary=PATH also writes it as JSON;\n"
    "        --trace=PATH writes each stage's timeline as Chrome trace JSON.\n"
    "parity  the loss-parity check: trains SPEC.yaml and its flush twin (1f1b-flush,\n"
    "        the same model, data, global batch and optimizer) for each seed, one run\n"
    "        at a time, and reports the final validation loss gap to the flush paired\n"
    "        by seed with its spread, tokens/s, and the speed-up in wall time to the\n"
    "        flush's losses: a table, parity.json and parity.png (with gnuplot) in\n"
    "        --out. --steps=N shortens every run to N steps.\n"
    "submit  sends SPEC.yaml to the coordinator (idempotent on the job's name).\n"
    "get     one job's phase, reason, conditions and stages.\n"
    "list    the jobs in submission order, fetched page by page; filters by phase,\n"
    "        labels and name prefix. --limit=N stops after N jobs and prints the\n"
    "        --page_token that continues the list.\n"
    "watch   live progress of a job until it ends; exits 0 when it succeeded.\n"
    "        get and watch of trainingjob/NAME (also tj/NAME) read a TrainingJob on\n"
    "        Kubernetes through the API server, as kubectl does: its phase and why,\n"
    "        progress, conditions and the pods of its stages.\n"
    "cancel  stops a job's stages; it ends Cancelled.\n"
    "sample  continues TEXT with the model of a checkpoint directory (its latest step).\n"
    "export  writes that model as TorchScript (torch.jit.load) with its tokenizer, or with\n"
    "        --format=hf as a Hugging Face model folder (transformers' from_pretrained).\n"
    "        sample and export run paci_model (--model_binary; default: beside pacictl).\n"
    "prepare-data  tokenizes text files (INPUT: a file, a folder's files or a glob)\n"
    "        on all cores into a dataset folder for data.dataset: char tokens, a bpe or\n"
    "        unigram SentencePiece model trained on the inputs (--vocab_size), the\n"
    "        model in --tokenizer_model, or a Hugging Face tokenizer.json in\n"
    "        --tokenizer_json (byte-level BPE as GPT-2 and Llama 3 use). A .jsonl\n"
    "        input is one JSON object a line, its --text_field (default text) a\n"
    "        document; a bad line names its file and line, and --skip_bad_lines goes\n"
    "        on past it. Inputs may be gzipped (.gz).\n"
    "        Nothing is written on error. --reuse keeps an --out that already holds\n"
    "        the dataset of the same inputs and options (a dataset initializer's rerun).\n"
    "logs    a TrainingJob's pod log on Kubernetes, through the API server as kubectl\n"
    "        logs reads it: the pod of --stage (and --replica), or with --dataset its\n"
    "        dataset initializer's; --follow goes on until the pod ends.\n"
    "The client commands talk to --coordinator (default 127.0.0.1:7070) with\n"
    "--coordinator_auth_token_file, --coordinator_tls_ca and (mutual TLS)\n"
    "--coordinator_tls_cert/--coordinator_tls_key when it asks for them.\n"
    "Exit codes: 0 success, 1 failed, 2 usage or spec error, 130 interrupted.\n";

// --labels or --selector into `labels`; false, having said why, when an item is not K=V.
bool ParseLabels(const std::string& text, const std::string& flag,
                 google::protobuf::Map<std::string, std::string>* labels) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pairs =
      paci::ParseKeyValues(text, flag);
  if (!pairs.ok()) {
    std::cerr << "pacictl: " << pairs.status().message() << "\n";
    return false;
  }
  for (auto& [key, value] : *pairs) (*labels)[key] = std::move(value);
  return true;
}

std::string Sibling(const std::string& flag, const std::string& name, const std::string& subdir) {
  if (!flag.empty()) return access(flag.c_str(), X_OK) == 0 ? flag : "";
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const absl::StatusOr<std::string> found = paci::FindSiblingBinary(self.string(), name, subdir);
  return found.ok() ? *found : "";
}

// pacictl sample|export: runs paci_model with the same command and flags,
// which are paci_model's and so not parsed here, but for --model_binary.
// Returns only when paci_model cannot be run.
int RunModelCommand(int argc, char** argv) {
  std::vector<char*> own = {argv[0]};
  std::vector<char*> passed = {const_cast<char*>("paci_model"), argv[1]};
  for (int i = 2; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    if (absl::StartsWith(flag, "--model_binary=") || absl::StartsWith(flag, "-model_binary=")) {
      own.push_back(argv[i]);
    } else if ((flag == "--model_binary" || flag == "-model_binary") && i + 1 < argc) {
      own.push_back(argv[i]);
      own.push_back(argv[++i]);
    } else {
      passed.push_back(argv[i]);
    }
  }
  absl::ParseCommandLine(static_cast<int>(own.size()), own.data());
  const std::string binary = Sibling(absl::GetFlag(FLAGS_model_binary), "paci_model", "worker");
  if (binary.empty()) {
    std::cerr << "pacictl: cannot find paci_model beside pacictl; pass --model_binary\n";
    return paci::kExitUsage;
  }
  passed.push_back(nullptr);
  execv(binary.c_str(), passed.data());
  std::cerr << "pacictl: cannot run " << binary << ": " << std::strerror(errno) << "\n";
  return paci::kExitTrainingFailed;
}

int PrepareData(const std::vector<std::string>& inputs) {
  paci::PrepareDataOptions options;
  options.inputs = inputs;
  options.out = absl::GetFlag(FLAGS_out);
  options.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  options.tokenizer_model = absl::GetFlag(FLAGS_tokenizer_model);
  options.tokenizer_json = absl::GetFlag(FLAGS_tokenizer_json);
  options.text_field = absl::GetFlag(FLAGS_text_field);
  options.skip_bad_lines = absl::GetFlag(FLAGS_skip_bad_lines);
  options.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  options.shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  options.reuse = absl::GetFlag(FLAGS_reuse);
  options.message_file = absl::GetFlag(FLAGS_message_file);
  options.progress = &std::cerr;
  options.redraw_in_place = isatty(STDERR_FILENO) == 1;
  const absl::StatusOr<paci::PrepareDataResult> result = paci::PrepareData(options);
  if (!result.ok()) {
    std::cerr << "pacictl: prepare-data: " << result.status().message() << "\n";
    return paci::ExitCodeOf(result.status());
  }
  return paci::kExitSucceeded;
}

// The API server of --kubeconfig (as kubectl finds it); nullptr, having said
// why, when it cannot be read.
std::unique_ptr<paci::kube::KubeClient> KubeFromFlags(const std::string& command) {
  const std::string kubeconfig = paci::KubeconfigPath(absl::GetFlag(FLAGS_kubeconfig));
  absl::StatusOr<paci::kube::KubeClientOptions> options = paci::kube::LoadKubeconfig(kubeconfig);
  if (!options.ok()) {
    std::cerr << "pacictl: " << command << ": " << options.status().message() << "\n";
    return nullptr;
  }
  return std::make_unique<paci::kube::KubeClient>(*std::move(options));
}

// `get trainingjob/NAME` and `watch trainingjob/NAME`: the TrainingJob through
// the API server. watch draws the live line and a line for each phase, then
// the details; exits 0 when the job succeeded.
int TrainingJobCommand(const std::string& command, const std::string& name) {
  std::unique_ptr<paci::kube::KubeClient> kube = KubeFromFlags(command);
  if (kube == nullptr) return paci::kExitUsage;
  const std::string ns = absl::GetFlag(FLAGS_namespace);
  absl::StatusOr<nlohmann::json> job;
  if (command == "get") {
    job = paci::GetTrainingJob(*kube, ns, name);
  } else {
    paci::ProgressPrinter printer(std::cerr, isatty(STDERR_FILENO) == 1);
    std::string last_phase;
    job = paci::WatchTrainingJob(*kube, ns, name, [&](const nlohmann::json& now) {
      if (const std::string phase = paci::PhaseLine(now); phase != last_phase) {
        printer.PrintAbove("trainingjob " + name + " " + phase);
        last_phase = phase;
      }
      printer.Update(paci::ViewOfTrainingJob(now, absl::Now()), absl::Now());
    });
    if (job.ok()) printer.Finish(paci::ViewOfTrainingJob(*job, absl::Now()));
  }
  if (!job.ok()) {
    std::cerr << "pacictl: " << command << ": " << job.status().message() << "\n";
    return paci::ExitCodeOf(job.status());
  }
  std::cout << paci::FormatTrainingJob(*job, absl::Now()) << std::flush;
  if (command == "get") return paci::kExitSucceeded;
  return paci::TrainingJobSucceeded(*job) ? paci::kExitSucceeded : paci::kExitTrainingFailed;
}

int Logs(const std::string& job) {
  std::unique_ptr<paci::kube::KubeClient> kube = KubeFromFlags("logs");
  if (kube == nullptr) return paci::kExitUsage;
  paci::LogsRequest request;
  request.job = job;
  request.namespace_ = absl::GetFlag(FLAGS_namespace);
  request.stage = absl::GetFlag(FLAGS_stage);
  request.replica = absl::GetFlag(FLAGS_replica);
  request.dataset = absl::GetFlag(FLAGS_dataset);
  request.tail_lines = absl::GetFlag(FLAGS_tail);
  absl::Status read;
  if (absl::GetFlag(FLAGS_follow)) {
    read = paci::FollowLogs(*kube, request,
                            [](std::string_view data) { std::cout << data << std::flush; });
  } else {
    absl::StatusOr<std::string> log = paci::ReadLogs(*kube, request);
    if (log.ok()) std::cout << *log << std::flush;
    read = log.status();
  }
  if (!read.ok()) {
    std::cerr << "pacictl: logs: " << read.message() << "\n";
    return paci::ExitCodeOf(read);
  }
  return paci::kExitSucceeded;
}

// What every local run of train and parity takes from the flags and the
// terminal: the binaries (false, having said why, when they cannot be
// found), progress on stderr, `shutdown` to stop it.
bool LauncherFromFlags(const paci::ShutdownSignal* shutdown, paci::LocalLauncherOptions* options) {
  options->worker_binary = Sibling(absl::GetFlag(FLAGS_worker_binary), "paci_worker", "worker");
  options->coordinator_binary =
      Sibling(absl::GetFlag(FLAGS_coordinator_binary), "paci_coordinator", "server");
  if (options->worker_binary.empty() || options->coordinator_binary.empty()) {
    std::cerr << "pacictl: cannot find paci_worker and paci_coordinator beside pacictl; pass "
                 "--worker_binary and --coordinator_binary\n";
    return false;
  }
  options->out = &std::cerr;
  options->redraw_in_place = isatty(STDERR_FILENO) == 1;
  options->shutdown = shutdown;
  return true;
}

int Train(const std::string& spec_path) {
  paci::LocalLauncherOptions options;
  options.spec_path = spec_path;
  options.summary_path = absl::GetFlag(FLAGS_summary);
  options.trace_path = absl::GetFlag(FLAGS_trace);
  options.trace_max_spans = absl::GetFlag(FLAGS_trace_max_spans);
  if (options.trace_max_spans < 1) {
    std::cerr << "pacictl: --trace_max_spans: must be at least 1\n";
    return paci::kExitUsage;
  }
  options.worker_flags = absl::StrSplit(absl::GetFlag(FLAGS_worker_flags), ' ', absl::SkipEmpty());
  options.linger = absl::Seconds(absl::GetFlag(FLAGS_linger_seconds));
  paci::ShutdownSignal shutdown;  // SIGINT and SIGTERM stop the run, exit 130
  if (!LauncherFromFlags(&shutdown, &options)) return paci::kExitUsage;
  return paci::LocalLauncher(options).Run();
}

int Parity(const std::string& spec_path) {
  paci::ParityOptions options;
  options.spec_path = spec_path;
  options.seeds.clear();
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_seeds), ',', absl::SkipWhitespace())) {
    int seed = 0;
    if (!absl::SimpleAtoi(item, &seed)) {
      std::cerr << "pacictl: --seeds: must be integers separated by commas, got \""
                << absl::GetFlag(FLAGS_seeds) << "\"\n";
      return paci::kExitUsage;
    }
    options.seeds.push_back(seed);
  }
  options.steps = absl::GetFlag(FLAGS_steps);
  options.out_dir = absl::GetFlag(FLAGS_out);
  paci::ShutdownSignal shutdown;  // SIGINT and SIGTERM stop the run in progress, exit 130
  if (!LauncherFromFlags(&shutdown, &options.launch)) return paci::kExitUsage;
  return paci::RunParity(options);
}

// The client commands.
class Client {
 public:
  explicit Client(std::unique_ptr<paci::CoordinatorClient> coordinator)
      : coordinator_(std::move(coordinator)) {}

  int Fail(const absl::Status& status) const {
    std::cerr << "pacictl: " << status.message() << " ("
              << (status.code() == absl::StatusCode::kUnavailable
                      ? "is a coordinator running at " + coordinator_->address() + "?"
                      : absl::StrCat("code ", static_cast<int>(status.code())))
              << ")\n";
    return paci::ExitCodeOf(paci::CoordinatorFailure(status));
  }

  int Submit(const std::string& path) {
    absl::StatusOr<paci::v1::JobSpec> spec = paci::LoadAndValidateJobSpec(path);
    if (!spec.ok()) {
      std::cerr << "pacictl: " << path << ": " << spec.status().message() << "\n";
      return paci::kExitUsage;
    }
    paci::v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    if (!ParseLabels(absl::GetFlag(FLAGS_labels), "--labels", request.mutable_labels())) {
      return paci::kExitUsage;
    }
    absl::StatusOr<paci::v1::Job> job = coordinator_->Submit(request, absl::Seconds(30));
    return job.ok() ? PrintPhase(*job) : Fail(job.status());
  }

  int Get(const std::string& name) {
    paci::v1::GetJobRequest request;
    request.set_name(name);
    absl::StatusOr<paci::v1::Job> job = coordinator_->Get(request, absl::Seconds(30));
    if (!job.ok()) return Fail(job.status());
    std::cout << paci::FormatJobDetails(*job, absl::Now());
    return paci::kExitSucceeded;
  }

  int List() {
    paci::v1::ListJobsRequest request;
    const std::string phase = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_phase));
    if (!phase.empty()) {
      paci::v1::JobPhase value;
      if (!paci::v1::JobPhase_Parse(phase, &value)) {
        std::cerr << "pacictl: --phase: one of QUEUED, RUNNING, RESTARTING, SUCCEEDED, FAILED, "
                     "CANCELLED\n";
        return paci::kExitUsage;
      }
      request.set_phase(value);
    }
    if (!ParseLabels(absl::GetFlag(FLAGS_selector), "--selector",
                     request.mutable_label_selector())) {
      return paci::kExitUsage;
    }
    const int limit = absl::GetFlag(FLAGS_limit);
    if (limit < 0 || absl::GetFlag(FLAGS_page_size) < 0) {
      std::cerr << "pacictl: --limit and --page_size: must not be negative\n";
      return paci::kExitUsage;
    }
    request.set_name_prefix(absl::GetFlag(FLAGS_name_prefix));
    request.set_page_size(absl::GetFlag(FLAGS_page_size));
    request.set_page_token(absl::GetFlag(FLAGS_page_token));
    request.set_omit_loss_history(true);  // the table needs only the latest losses
    // Page after page (AIP-158) until the end or --limit.
    std::vector<paci::v1::Job> jobs;
    std::string next;
    do {
      if (limit > 0) {
        const int left = limit - static_cast<int>(jobs.size());
        if (request.page_size() == 0 || request.page_size() > left) request.set_page_size(left);
      }
      absl::StatusOr<paci::v1::ListJobsResponse> response =
          coordinator_->List(request, absl::Seconds(30));
      if (!response.ok()) return Fail(response.status());
      for (paci::v1::Job& job : *response->mutable_jobs()) jobs.push_back(std::move(job));
      next = response->next_page_token();
      request.set_page_token(next);
    } while (!next.empty() && (limit == 0 || static_cast<int>(jobs.size()) < limit));
    std::cout << paci::FormatJobTable(jobs, absl::Now());
    if (!next.empty()) std::cerr << "more jobs follow: --page_token=" << next << "\n";
    return paci::kExitSucceeded;
  }

  int Watch(const std::string& name) {
    paci::v1::WatchJobRequest request;
    request.set_name(name);
    auto context = coordinator_->Context(absl::InfiniteDuration());
    auto reader = coordinator_->jobs().WatchJob(context.get(), request);
    paci::ProgressPrinter printer(std::cerr, isatty(STDERR_FILENO) == 1);
    paci::v1::Job job;
    paci::v1::JobPhase last_phase = paci::v1::JOB_PHASE_UNSPECIFIED;
    while (reader->Read(&job)) {
      if (job.status().phase() != last_phase) {
        last_phase = job.status().phase();
        printer.PrintAbove("job " + job.name() + " " + paci::v1::JobPhase_Name(last_phase) +
                           (job.status().message().empty() ? "" : ": " + job.status().message()));
      }
      printer.Update(paci::ViewOfJob(job, absl::Now()), absl::Now());
    }
    printer.Finish(paci::ViewOfJob(job, absl::Now()));
    const absl::Status status = paci::FromGrpc(reader->Finish(), "coordinator WatchJob " + name);
    if (!status.ok()) return Fail(status);
    if (job.status().phase() == paci::v1::SUCCEEDED) {
      std::cerr << "\n" << paci::FormatSummaryTable(paci::SummaryOfJob(job, 0));
      return paci::kExitSucceeded;
    }
    return paci::kExitTrainingFailed;
  }

  int Cancel(const std::string& name) {
    absl::StatusOr<paci::v1::Job> job = coordinator_->Cancel(name, absl::Seconds(30));
    return job.ok() ? PrintPhase(*job) : Fail(job.status());
  }

 private:
  // "job NAME PHASE" on stdout.
  static int PrintPhase(const paci::v1::Job& job) {
    std::cout << "job " << job.name() << " " << paci::v1::JobPhase_Name(job.status().phase())
              << "\n";
    return paci::kExitSucceeded;
  }

  const std::unique_ptr<paci::CoordinatorClient> coordinator_;
};

}  // namespace

int main(int argc, char** argv) {
  paci::SetUsage(kUsage);
  const std::string first = argc >= 2 ? argv[1] : "";
  if (first == "sample" || first == "export") return RunModelCommand(argc, argv);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (command == "help" && args.size() == 2) {
    std::cout << kUsage;
    return paci::kExitSucceeded;
  }
  if (command == "prepare-data") return PrepareData({args.begin() + 2, args.end()});
  const bool needs_argument = command != "list";
  if (command.empty() || args.size() != (needs_argument ? 3u : 2u)) {
    std::cerr << kUsage;
    return paci::kExitUsage;
  }
  const std::string argument = needs_argument ? args[2] : "";
  if (command == "train") return Train(argument);
  if (command == "parity") return Parity(argument);
  if (command == "logs") return Logs(argument);
  if (std::optional<std::string> name = paci::TrainingJobName(argument);
      name && (command == "get" || command == "watch")) {
    return TrainingJobCommand(command, *name);
  }

  absl::StatusOr<paci::CoordinatorClientOptions> options =
      paci::CoordinatorClientOptionsFromFlags(absl::GetFlag(FLAGS_coordinator),
                                              /*reconnect_quickly=*/false);
  absl::StatusOr<std::unique_ptr<paci::CoordinatorClient>> coordinator =
      options.ok() ? paci::CoordinatorClient::Connect(*options)
                   : absl::StatusOr<std::unique_ptr<paci::CoordinatorClient>>(options.status());
  if (!coordinator.ok()) {
    std::cerr << "pacictl: " << coordinator.status().message() << "\n";
    return paci::kExitUsage;
  }
  Client client(*std::move(coordinator));
  if (command == "submit") return client.Submit(argument);
  if (command == "get") return client.Get(argument);
  if (command == "list") return client.List();
  if (command == "watch") return client.Watch(argument);
  if (command == "cancel") return client.Cancel(argument);
  std::cerr << kUsage;
  return paci::kExitUsage;
}
