// pacictl: trains locally through the whole system, and is the command-line
// client of a coordinator and of TrainingJobs on Kubernetes. This file reads
// the command line and hands each command to its group (commands.h).
//
//   pacictl train SPEC.yaml [--summary=PATH] [--trace=PATH]
//   pacictl parity SPEC.yaml [--seeds=1,2,3] [--steps=N] [--out=DIR]
//   pacictl submit SPEC.yaml [--labels=K=V,...] | get NAME | watch NAME | cancel NAME
//   pacictl sample --checkpoint=DIR --prompt=TEXT ... | export --checkpoint=DIR --out=FILE
//           (they run paci_model, which links Torch)
//   pacictl prepare-data INPUT... --out=DIR [--tokenizer=char|bpe|unigram]
//   pacictl get|watch trainingjob/NAME, logs TRAININGJOB (through the API server)
//   pacictl list [--phase=P] [--selector=K=V,...] [--name_prefix=S] [--limit=N]
//           [--coordinator=HOST:PORT] [--coordinator_auth_token_file=F]
//           [--coordinator_tls_ca=F] [--coordinator_tls_cert=F --coordinator_tls_key=F]

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/flag_usage.h"
#include "glog/logging.h"
#include "tools/exit_codes.h"
#include "tools/kube_job.h"
#include "tools/pacictl/commands.h"

ABSL_FLAG(std::string, out, "",
          "prepare-data: the dataset folder to write; parity: the folder for the runs, the "
          "table and the plot (default parity-<job name>)");

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

}  // namespace

int main(int argc, char** argv) {
  paci::SetUsage(kUsage);
  const std::string first = argc >= 2 ? argv[1] : "";
  if (first == "sample" || first == "export") return paci::pacictl::RunModelCommand(argc, argv);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (command == "help" && args.size() == 2) {
    std::cout << kUsage;
    return paci::kExitSucceeded;
  }
  if (command == "prepare-data") return paci::pacictl::PrepareData({args.begin() + 2, args.end()});
  const bool needs_argument = command != "list";
  if (command.empty() || args.size() != (needs_argument ? 3u : 2u)) {
    std::cerr << kUsage;
    return paci::kExitUsage;
  }
  const std::string argument = needs_argument ? args[2] : "";
  if (command == "train") return paci::pacictl::Train(argument);
  if (command == "parity") return paci::pacictl::Parity(argument);
  if (command == "logs") return paci::pacictl::Logs(argument);
  if (std::optional<std::string> name = paci::TrainingJobName(argument);
      name && (command == "get" || command == "watch")) {
    return paci::pacictl::TrainingJobCommand(command, *name);
  }

  if (paci::pacictl::IsCoordinatorCommand(command)) {
    return paci::pacictl::CoordinatorCommand(command, argument);
  }
  std::cerr << kUsage;
  return paci::kExitUsage;
}
