#pragma once

// Internal to the reconcile library (operator/reconcile): what a pod's .status
// (as JSON) says of how it runs or how it ended, for the reconcile's
// conditions, Events and messages. Pure readers: no network, no clock.

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace paci::op {

// What keeps a worker pod from running, as its status says: a container
// waiting to be pulled or created, or crashing; or no node for it.
// {reason, message}; an empty reason when nothing does.
std::pair<std::string, std::string> PodTrouble(const nlohmann::json& pod);

// How a worker pod's container ended, to go inside the caller's parentheses:
// ", OOMKilled, exit code 137", or "" when none has.
std::string HowItEnded(const nlohmann::json& pod);

// The termination message of a pod's container (its closing line or error).
std::string TerminationMessage(const nlohmann::json& pod);

}  // namespace paci::op
