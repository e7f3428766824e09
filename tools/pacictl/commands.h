#pragma once

// pacictl's commands, one file per group; main.cc reads the command line and
// hands each command to its group:
//   local.cc        what runs on this machine beside pacictl: train, parity,
//                   sample and export (paci_model)
//   data.cc         prepare-data
//   kubernetes.cc   get|watch trainingjob/NAME and logs, through the API server
//   coordinator.cc  submit, get, list, watch and cancel against --coordinator
// Each returns pacictl's exit code (tools/exit_codes.h).

#include <string>
#include <vector>

#include "absl/flags/declare.h"

// prepare-data's dataset folder, parity's runs (main.cc).
ABSL_DECLARE_FLAG(std::string, out);

namespace paci::pacictl {

int Train(const std::string& spec_path);
int Parity(const std::string& spec_path);
// pacictl sample|export: runs paci_model with the same command and flags,
// which are paci_model's and so not parsed here, but for --model_binary.
// Returns only when paci_model cannot be run.
int RunModelCommand(int argc, char** argv);

int PrepareData(const std::vector<std::string>& inputs);

// `get trainingjob/NAME` and `watch trainingjob/NAME`: the TrainingJob through
// the API server. watch draws the live line and a line for each phase, then
// the details; exits 0 when the job succeeded.
int TrainingJobCommand(const std::string& command, const std::string& name);
int Logs(const std::string& job);

// Whether `command` is one of the coordinator's (submit, get, list, watch, cancel).
bool IsCoordinatorCommand(const std::string& command);
// Runs it against --coordinator.
int CoordinatorCommand(const std::string& command, const std::string& argument);

}  // namespace paci::pacictl
