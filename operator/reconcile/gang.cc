#include "operator/reconcile/gang.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::Field;
using kube::MetaString;
using kube::ObjectKey;
using kube::StringField;

absl::StatusOr<int64_t> ParseQuantity(const std::string& resource, const std::string& text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < t.size() && (absl::ascii_isdigit(t[digits]) || t[digits] == '.' ||
                               (digits == 0 && t[digits] == '+'))) {
    ++digits;
  }
  const std::string number = t.substr(0, digits), suffix = t.substr(digits);
  double value = 0;
  static const std::map<std::string, double> kSuffixes = {
      {"", 1},       {"n", 1e-9},          {"u", 1e-6},          {"m", 1e-3},
      {"k", 1e3},    {"M", 1e6},           {"G", 1e9},           {"T", 1e12},
      {"P", 1e15},   {"E", 1e18},          {"Ki", 1024.0},       {"Mi", 1048576.0},
      {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0},
      {"Ei", 1152921504606846976.0}};
  double multiplier = 0;
  if (auto it = kSuffixes.find(suffix); it != kSuffixes.end()) {
    multiplier = it->second;
  } else if (suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int exponent = 0;
    if (absl::SimpleAtoi(suffix.substr(1), &exponent) && exponent >= -18 && exponent <= 18) {
      multiplier = std::pow(10.0, exponent);
    }
  }
  if (number.empty() || multiplier == 0 || !absl::SimpleAtod(number, &value) ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(resource, " quantity \"", text, "\" is not a Kubernetes quantity"));
  }
  const double scaled = value * multiplier * (resource == "cpu" ? 1000.0 : 1.0);
  if (scaled > 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(resource, " quantity \"", text, "\" is too large"));
  }
  return static_cast<int64_t>(std::ceil(scaled - 1e-9));
}

namespace {

// A quantity as a user would write it.
std::string Amount(const std::string& resource, int64_t value) {
  if (resource == "cpu") {
    return value % 1000 == 0 ? absl::StrCat(value / 1000) : absl::StrCat(value, "m");
  }
  if (resource == "memory" || resource == "ephemeral-storage") {
    static constexpr std::pair<const char*, int64_t> kUnits[] = {
        {"Gi", int64_t{1} << 30}, {"Mi", int64_t{1} << 20}, {"Ki", int64_t{1} << 10}};
    for (const auto& [unit, size] : kUnits) {
      if (value != 0 && value % size == 0) return absl::StrCat(value / size, unit);
    }
  }
  return absl::StrCat(value);
}

std::string Amounts(const Resources& amounts, const Resources& shown) {
  std::vector<std::string> parts;
  for (const auto& [resource, wanted] : shown) {
    if (resource == "pods" || wanted == 0) continue;
    auto it = amounts.find(resource);
    parts.push_back(absl::StrCat(resource, " ", Amount(resource, it == amounts.end() ? 0 : it->second)));
  }
  return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
}

// Adds a requests (or overhead) map to `into`; malformed quantities count 0
// (the API server refuses them, so a pod it lists has none).
void AddAmounts(const json& amounts, Resources& into, bool keep_max = false) {
  if (!amounts.is_object()) return;
  for (const auto& [resource, text] : amounts.items()) {
    absl::StatusOr<int64_t> value =
        ParseQuantity(resource, text.is_string() ? text.get<std::string>() : text.dump());
    if (!value.ok()) continue;
    int64_t& slot = into[resource];
    slot = keep_max ? std::max(slot, *value) : slot + *value;
  }
}

bool Tolerates(const json& pod, const json& taint) {
  const json& tolerations = Field(Field(pod, "spec"), "tolerations");
  if (!tolerations.is_array()) return false;
  for (const json& t : tolerations) {
    const std::string effect = StringField(t, "effect"), key = StringField(t, "key");
    if (!effect.empty() && effect != StringField(taint, "effect")) continue;
    if (StringField(t, "operator") == "Exists") {
      if (key.empty() || key == StringField(taint, "key")) return true;
    } else if (key == StringField(taint, "key") &&
               StringField(t, "value") == StringField(taint, "value")) {
      return true;
    }
  }
  return false;
}

struct Node {
  const json* object;
  std::string name;
  Resources allocatable;
  Resources free;
};

// Why `pod` may not go to `node`, or "" when it may.
std::string Excluded(const json& pod, const Node& node) {
  const json& n = *node.object;
  bool ready = false;
  const json& conditions = Field(Field(n, "status"), "conditions");
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (StringField(c, "type") == "Ready") ready = StringField(c, "status") == "True";
    }
  }
  if (!ready) return "not Ready";
  if (Field(Field(n, "spec"), "unschedulable") == json(true)) return "cordoned";
  const json& taints = Field(Field(n, "spec"), "taints");
  if (taints.is_array()) {
    for (const json& taint : taints) {
      const std::string effect = StringField(taint, "effect");
      if ((effect == "NoSchedule" || effect == "NoExecute") && !Tolerates(pod, taint)) {
        return "a taint they do not tolerate";
      }
    }
  }
  const json& selector = Field(Field(pod, "spec"), "nodeSelector");
  const json& labels = Field(Field(n, "metadata"), "labels");
  if (selector.is_object()) {
    for (const auto& [key, value] : selector.items()) {
      if (!labels.contains(key) || labels[key] != value) return "not their nodeSelector";
    }
  }
  return "";
}

bool Fits(const Resources& wanted, const Resources& free) {
  for (const auto& [resource, amount] : wanted) {
    if (amount == 0) continue;
    auto it = free.find(resource);
    if (it == free.end() || it->second < amount) return false;
  }
  return true;
}

void Take(const Resources& wanted, Resources& free) {
  for (const auto& [resource, amount] : wanted) free[resource] -= amount;
}

// Places each of `pods` (largest first) on the first node of `nodes` it may
// use and fits, taking from Node::free; the name of the first that does not
// fit, or "" when all do.
std::string Place(const std::vector<const json*>& pods, std::vector<Node>& nodes) {
  std::vector<std::pair<Resources, const json*>> order;
  for (const json* pod : pods) order.emplace_back(PodRequests(*pod), pod);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    auto get = [](const Resources& r, const char* k) {
      auto it = r.find(k);
      return it == r.end() ? int64_t{0} : it->second;
    };
    return std::make_pair(get(a.first, "cpu"), get(a.first, "memory")) >
           std::make_pair(get(b.first, "cpu"), get(b.first, "memory"));
  });
  for (const auto& [wanted, pod] : order) {
    bool placed = false;
    for (Node& node : nodes) {
      if (Excluded(*pod, node).empty() && Fits(wanted, node.free)) {
        Take(wanted, node.free);
        placed = true;
        break;
      }
    }
    if (!placed) return MetaString(*pod, "name");
  }
  return "";
}

}  // namespace

Resources PodRequests(const json& pod) {
  const json& spec = Field(pod, "spec");
  Resources sum, init;
  if (const json& containers = Field(spec, "containers"); containers.is_array()) {
    for (const json& c : containers) AddAmounts(Field(Field(c, "resources"), "requests"), sum);
  }
  if (const json& containers = Field(spec, "initContainers"); containers.is_array()) {
    for (const json& c : containers) {
      AddAmounts(Field(Field(c, "resources"), "requests"), init, /*keep_max=*/true);
    }
  }
  for (const auto& [resource, amount] : init) sum[resource] = std::max(sum[resource], amount);
  AddAmounts(Field(spec, "overhead"), sum);
  sum["pods"] += 1;
  return sum;
}

bool HasGangGate(const json& pod) {
  const json& gates = Field(Field(pod, "spec"), "schedulingGates");
  if (!gates.is_array()) return false;
  for (const json& gate : gates) {
    if (StringField(gate, "name") == kGangGate) return true;
  }
  return false;
}

json GatesWithoutGang(const json& pod) {
  json kept = json::array();
  const json& gates = Field(Field(pod, "spec"), "schedulingGates");
  if (gates.is_array()) {
    for (const json& gate : gates) {
      if (StringField(gate, "name") != kGangGate) kept.push_back(gate);
    }
  }
  return kept;
}

GangPlan PlanGang(const std::vector<json>& gated, const std::vector<json>& nodes,
                  const std::vector<json>& pods) {
  GangPlan plan;
  std::vector<Node> empty;
  for (const json& n : nodes) {
    Node node{&n, MetaString(n, "name"), {}, {}};
    const json& status = Field(n, "status");
    AddAmounts(Field(status, "allocatable").empty() ? Field(status, "capacity")
                                                    : Field(status, "allocatable"),
               node.allocatable);
    node.free = node.allocatable;
    empty.push_back(node);
  }
  std::vector<Node> now = empty;
  std::set<std::string> ours;
  std::vector<const json*> gang;
  Resources wanted;
  for (const json& pod : gated) {
    ours.insert(ObjectKey(pod));
    gang.push_back(&pod);
    for (const auto& [resource, amount] : PodRequests(pod)) wanted[resource] += amount;
  }
  // What the cluster's other pods hold: bound ones on their node, released
  // ones that wait for the scheduler wherever they fit first.
  std::vector<const json*> unbound;
  for (const json& pod : pods) {
    const std::string phase = StringField(Field(pod, "status"), "phase");
    const json& gates = Field(Field(pod, "spec"), "schedulingGates");
    if (ours.count(ObjectKey(pod)) != 0 || phase == "Succeeded" || phase == "Failed" ||
        (gates.is_array() && !gates.empty())) {
      continue;
    }
    const std::string node_name = StringField(Field(pod, "spec"), "nodeName");
    if (node_name.empty()) {
      unbound.push_back(&pod);
      continue;
    }
    for (Node& node : now) {
      if (node.name == node_name) Take(PodRequests(pod), node.free);
    }
  }
  for (const json* pod : unbound) Place({pod}, now);
  const std::vector<Node> free_now = now;  // before the gang takes any
  const std::string stuck = Place(gang, now);
  if (stuck.empty()) {
    plan.fits = true;
    return plan;
  }

  // Which nodes the gang may use at all, and what they hold.
  std::map<std::string, int> excluded;
  Resources usable, free;
  int usable_nodes = 0;
  for (size_t i = 0; i < empty.size(); ++i) {
    const std::string why = gang.empty() ? "" : Excluded(*gang.front(), empty[i]);
    if (!why.empty()) {
      ++excluded[why];
      continue;
    }
    ++usable_nodes;
    for (const auto& [resource, amount] : empty[i].allocatable) usable[resource] += amount;
    Node left = empty[i];
    for (const Node& n : free_now) {
      if (n.name == left.name) left.free = n.free;
    }
    for (const auto& [resource, amount] : left.free) free[resource] += std::max<int64_t>(amount, 0);
  }
  const std::string asks = absl::StrCat(gated.size(), " worker pods at the gate ask for ",
                                        Amounts(wanted, wanted), " together");
  if (usable_nodes == 0) {
    std::vector<std::string> reasons;
    for (const auto& [why, count] : excluded) reasons.push_back(absl::StrCat(count, " ", why));
    plan.reason = "Unschedulable";
    plan.message = absl::StrCat(asks, "; no node may take them (of ", nodes.size(),
                                " nodes: ", reasons.empty() ? "none" : absl::StrJoin(reasons, ", "),
                                ")");
    return plan;
  }
  std::vector<Node> clean = empty;
  if (const std::string never = Place(gang, clean); !never.empty()) {
    plan.reason = "Unschedulable";
    plan.message = absl::StrCat(asks, "; the ", usable_nodes,
                                " nodes they may use could not hold them all even if empty (",
                                Amounts(usable, wanted), " in all; pod ", never, " left out)");
    return plan;
  }
  plan.reason = "WaitingForCapacity";
  plan.message = absl::StrCat(asks, "; free now on the ", usable_nodes, " nodes they may use: ",
                              Amounts(free, wanted),
                              ". They are released to the scheduler together once all fit");
  return plan;
}

}  // namespace paci::op
