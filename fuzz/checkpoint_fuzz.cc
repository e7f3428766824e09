// A checkpoint shard as it lies on a shared volume: any bytes, loaded by
// LoadShard into a tiny one-stage model. The first input byte picks how the
// rest becomes the file:
//   even: the bytes as they are (the footer, its size and CRC-32 checked first);
//   odd:  the bytes as the archive, followed by a footer that matches them, so
//         the input reaches LibTorch's archive reader and the shard's own checks.
// LoadShard must answer every file with a shard's metadata or DataLoss,
// FailedPrecondition or NotFound, never crash, and on every error leave the
// model's parameters and the optimizer's step count as they were.
//
// The seed corpus (fuzz/corpus/checkpoint) is SaveShard's output for this
// model, in both forms; write it again after a change of the shard format with
//   PACI_CHECKPOINT_FUZZ_WRITE_SEEDS=fuzz/corpus/checkpoint build-asan/fuzz/checkpoint_fuzz
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "worker/model/test_models.h"
#include "worker/runtime/checkpoint.h"

namespace {

struct Fixture {
  Fixture() : model(Config(), paci::PartitionStage(1, 1, 0)) {
    torch::set_num_threads(1);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
    optimizer = std::make_unique<paci::AdamW>(params, paci::AdamWOptions{});
    for (auto& item : model->named_parameters()) original[item.key()] = item.value().clone();
    for (auto& [name, t] : optimizer->State()) original_state.emplace_back(name, t.clone());
    char dir_template[] = "/tmp/paci-checkpoint-fuzz-XXXXXX";
    dir = mkdtemp(dir_template);
    path = dir + "/stage-0-of-1.pt";
    meta.job_name = "fuzz";
    meta.model_fingerprint = model->Fingerprint();
  }
  static paci::GptConfig Config() {
    return paci::TinyGpt({/*vocab_size=*/11, /*num_layers=*/1, /*d_model=*/8, /*num_heads=*/2,
                          /*seq_len=*/4});
  }
  bool Unchanged() {
    if (optimizer->steps() != 0) return false;
    for (auto& item : model->named_parameters()) {
      if (!torch::equal(item.value(), original.at(item.key()))) return false;
    }
    return true;
  }
  void Restore() {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) item.value().copy_(original.at(item.key()));
    optimizer->SetState(0, original_state);
  }
  paci::GptStage model;
  std::unique_ptr<paci::AdamW> optimizer;
  std::map<std::string, torch::Tensor> original;
  std::vector<std::pair<std::string, torch::Tensor>> original_state;
  std::string dir;
  std::string path;
  paci::ShardMeta meta;
};

Fixture& TheFixture() {
  static auto* fixture = new Fixture();
  return *fixture;
}

// The footer SaveShard writes: magic, archive size (8 bytes), CRC-32 (4 bytes).
std::string WithFooter(const std::string& archive) {
  std::string file = archive + "PACICKP1";
  const uint64_t size = archive.size();
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(archive.data()), static_cast<uInt>(archive.size())));
  file.append(reinterpret_cast<const char*>(&size), sizeof(size));
  file.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return file;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// SaveShard's file for the fixture, and the seeds made of it.
void WriteSeeds(const std::string& dir) {
  Fixture& f = TheFixture();
  if (!paci::SaveShard(f.path, f.meta, f.model, *f.optimizer).ok()) std::abort();
  std::ifstream in(f.path, std::ios::binary);
  std::stringstream file;
  file << in.rdbuf();
  const std::string bytes = file.str();
  WriteFile(dir + "/shard-as-written.bin", std::string(1, '\0') + bytes);
  WriteFile(dir + "/archive-with-footer-made.bin", "\x01" + bytes.substr(0, bytes.size() - 20));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("PACI_CHECKPOINT_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  TheFixture();
  std::atexit([] { std::filesystem::remove_all(TheFixture().dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = TheFixture();
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  WriteFile(f.path, (data[0] & 1) ? WithFooter(rest) : rest);
  const auto loaded = paci::LoadShard(f.path, f.meta, f.model, *f.optimizer);
  if (loaded.ok()) {
    f.Restore();
    return 0;
  }
  const absl::StatusCode code = loaded.status().code();
  if (code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kFailedPrecondition &&
      code != absl::StatusCode::kNotFound) {
    std::abort();
  }
  if (loaded.status().message().find(f.path) == std::string::npos) std::abort();  // names the file
  if (!f.Unchanged()) std::abort();
  return 0;
}
