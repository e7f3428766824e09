// pacictl prepare-data: text files into a dataset folder of token shards.

#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "tools/exit_codes.h"
#include "tools/pacictl/commands.h"
#include "tools/prepare_data.h"

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

namespace paci::pacictl {

int PrepareData(const std::vector<std::string>& inputs) {
  PrepareDataOptions options;
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
  const absl::StatusOr<PrepareDataResult> result = paci::PrepareData(options);
  if (!result.ok()) {
    std::cerr << "pacictl: prepare-data: " << result.status().message() << "\n";
    return ExitCodeOf(result.status());
  }
  return kExitSucceeded;
}

}  // namespace paci::pacictl
