// paci_model: a trained model put to use, from the checkpoint directory of a
// job of any number of stages (its latest complete step).
//
//   paci_model sample --checkpoint=DIR --prompt=TEXT [--max_tokens=N]
//                     [--temperature=T] [--top_k=K] [--seed=S]
//   paci_model export --checkpoint=DIR --out=FILE
//   paci_model export --format=hf --checkpoint=DIR --out=FOLDER [--max_shard_bytes=N]
//
// pacictl sample and pacictl export run it (pacictl itself never links Torch).

#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <glog/logging.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/main_support.h"
#include "common/status_macros.h"
#include "worker/model/gpt_weights.h"
#include "worker/model/hf_format.h"
#include "worker/model/inference_model.h"
#include "worker/model/model_export.h"
#include "worker/model/sampler.h"
#include "worker/runtime/checkpoint_reader.h"

ABSL_FLAG(std::string, checkpoint, "", "a job's checkpoint.directory");
ABSL_FLAG(std::string, prompt, "", "sample: the text to continue");
ABSL_FLAG(int, max_tokens, 200, "sample: tokens to generate");
ABSL_FLAG(double, temperature, 1.0, "sample: softmax temperature; 0: always the likeliest token");
ABSL_FLAG(int, top_k, 0, "sample: draw among the K likeliest tokens only; 0: among all");
ABSL_FLAG(uint64_t, seed, 1, "sample: the seed of the draws (the same seed, the same text)");
ABSL_FLAG(std::string, out, "", "export: the TorchScript file (or, --format=hf, folder) to write");
ABSL_FLAG(std::string, format, "torchscript",
          "export: torchscript (one file, torch.jit.load) or hf (a Hugging Face model folder: "
          "config.json, model.safetensors, tokenizer files; transformers' from_pretrained)");
ABSL_FLAG(int64_t, max_shard_bytes, int64_t{5} << 30,
          "export --format=hf: the most tensor bytes in one .safetensors shard");

namespace paci {
namespace {

constexpr char kUsage[] =
    "samples from or exports a checkpoint:\n"
    "  paci_model sample --checkpoint=DIR --prompt=TEXT [--max_tokens=N] [--temperature=T]\n"
    "                    [--top_k=K] [--seed=S]\n"
    "  paci_model export [--format=torchscript|hf] --checkpoint=DIR --out=FILE|FOLDER\n"
    "                    [--max_shard_bytes=N]";

// The checkpoint's model, as the training model and as the inference module.
struct LoadedModel {
  ModelCheckpoint checkpoint;
  GptStage reference{nullptr};
  torch::jit::Module module;
};

absl::StatusOr<LoadedModel> Load() {
  const std::string directory = absl::GetFlag(FLAGS_checkpoint);
  if (directory.empty()) return absl::InvalidArgumentError("--checkpoint: must be set");
  LoadedModel loaded;
  ASSIGN_OR_RETURN(loaded.checkpoint, ReadCheckpoint(directory));
  const ModelCheckpoint& c = loaded.checkpoint;
  LOG(INFO) << "checkpoint " << directory << ": job " << c.job_name << ", step " << c.step
            << ", written by " << c.num_stages << " stage(s), tokenizer " << c.tokenizer->kind();
  ASSIGN_OR_RETURN(loaded.reference,
                   GptFromWeights(c.config, c.parameters, absl::StrCat("checkpoint ", directory)));
  loaded.checkpoint.parameters.clear();  // the model holds them now
  ASSIGN_OR_RETURN(loaded.module, BuildInferenceModule(loaded.reference));
  return loaded;
}

absl::Status RunSample() {
  SampleOptions options;
  options.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  options.temperature = absl::GetFlag(FLAGS_temperature);
  options.top_k = absl::GetFlag(FLAGS_top_k);
  options.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(LoadedModel loaded, Load());
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  bool started = false;  // the prompt goes first, once sampling has begun
  const auto print = [&](std::string_view piece) {
    if (!started) std::cout << prompt;
    started = true;
    std::cout << piece << std::flush;
  };
  const absl::StatusOr<std::string> text =
      Sample(loaded.module, *loaded.checkpoint.tokenizer, prompt, options, print);
  if (text.ok()) print("\n");
  return text.status();
}

absl::Status RunExport() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out: must be set");
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "torchscript" && format != "hf") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: must be torchscript or hf, got \"", format, "\""));
  }
  ASSIGN_OR_RETURN(LoadedModel loaded, Load());
  if (format == "hf") {
    NamedWeights weights;
    for (const auto& item : loaded.reference->named_parameters(/*recurse=*/true)) {
      weights[item.key()] = item.value();
    }
    HfExportOptions options;
    options.max_shard_bytes = absl::GetFlag(FLAGS_max_shard_bytes);
    RETURN_IF_ERROR(WriteHfFolder(loaded.reference->config(), weights,
                                  *loaded.checkpoint.tokenizer, out, options));
    LOG(INFO) << "wrote the Hugging Face model folder " << out;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(
      ExportModel(loaded.reference, loaded.module, *loaded.checkpoint.tokenizer, out));
  LOG(INFO) << "wrote " << out;
  return absl::OkStatus();
}

}  // namespace
}  // namespace paci

int main(int argc, char** argv) {
  const std::vector<char*> args = paci::InitMain(argc, argv, "paci_model", paci::kUsage);
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command != "sample" && command != "export") {
    std::cerr << "usage: " << paci::kUsage << "\n";
    return 2;
  }
  return paci::MainExitCode(command == "sample" ? paci::RunSample() : paci::RunExport(),
                            "paci_model");
}
