#pragma once

// Gang scheduling at the scheduler: a TrainingJob's worker pods are created
// behind a scheduling gate (Kubernetes' spec.schedulingGates), so the
// scheduler leaves them alone; the operator removes the gate from all of them
// at once, and only when the nodes have room for every one. Two jobs that
// together need more than the cluster holds then never each hold part of
// their pods waiting for the rest: one runs, the other waits at the gate
// with a condition saying for what.
//
// PlanGang is the decision, a pure function of the nodes and the pods the API
// server lists. It places the gated pods as the scheduler's resource fit does
// (requests against a node's allocatable, less what the pods on it and the
// pods still waiting for the scheduler request), honouring each node's
// readiness, cordon, taints and the pods' nodeSelector; affinity and
// topology spread are the scheduler's alone. It is a plan, not a binding:
// the scheduler places the released pods, and a pod it cannot place is
// reported by the WorkersBlocked condition (pod_status.h).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace paci::op {

// The gate on every worker pod the operator creates.
inline constexpr char kGangGate[] = "paci.dev/gang";

// Amounts of resources in the units the scheduler compares: "cpu" in
// millicores, "memory" and "ephemeral-storage" in bytes, "pods" and extended
// resources (nvidia.com/gpu) in units.
using Resources = std::map<std::string, int64_t>;

// A Kubernetes quantity ("500m", "2", "8Gi", "1.5", "1e3") of `resource` in
// the units above, rounded up. InvalidArgument naming the text when it is none.
absl::StatusOr<int64_t> ParseQuantity(const std::string& resource, const std::string& text);

// What a pod asks of a node: its containers' requests summed (each init
// container's alone when larger), its overhead, and one "pods".
Resources PodRequests(const nlohmann::json& pod);

// Whether `pod` carries kGangGate.
bool HasGangGate(const nlohmann::json& pod);
// Its spec.schedulingGates without kGangGate (the merge patch's list).
nlohmann::json GatesWithoutGang(const nlohmann::json& pod);

struct GangPlan {
  bool fits = false;
  // When it does not: "WaitingForCapacity" (it would fit on the nodes as
  // they are, were they empty of other pods) or "Unschedulable" (no node
  // set could ever hold them); a message naming what is missing.
  std::string reason;
  std::string message;
};

// Whether every pod of `gated` (one job's pods at the gate) can be placed at
// once on `nodes`, beside `pods` (every pod in the cluster the API server
// lists, including `gated` themselves, which are skipped by name): a pod bound
// to a node uses that node; one released but not yet bound uses room on the
// first node it fits; a finished one or another job's gated one uses none.
GangPlan PlanGang(const std::vector<nlohmann::json>& gated, const std::vector<nlohmann::json>& nodes,
                  const std::vector<nlohmann::json>& pods);

}  // namespace paci::op
