#include "tools/summary_json.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace paci {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

void CollectInt64Fields(const Descriptor* message, std::set<std::string>* names,
                        std::set<const Descriptor*>* seen) {
  if (!seen->insert(message).second) return;
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
        field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
      names->insert(field->name());
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectInt64Fields(field->message_type(), names, seen);
    }
  }
}

bool IsInteger(const std::string& text, size_t begin, size_t end) {
  if (begin < end && text[begin] == '-') ++begin;
  if (begin == end) return false;
  for (size_t i = begin; i < end; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  return true;
}

// Rewrites `"key": "123"` as `"key": 123` for the given keys. Inside a JSON
// string every quote is escaped, so `": "` only ever ends a key and starts a
// string value.
std::string UnquoteIntegers(const std::string& json, const std::set<std::string>& keys) {
  static constexpr char kKeyEnd[] = "\": \"";
  std::string out;
  out.reserve(json.size());
  size_t i = 0;
  while (true) {
    const size_t key_end = json.find(kKeyEnd, i);
    if (key_end == std::string::npos) break;
    const size_t key_begin = json.rfind('"', key_end - 1) + 1;
    const size_t value_begin = key_end + 4;
    const size_t value_end = json.find('"', value_begin);
    if (keys.count(json.substr(key_begin, key_end - key_begin)) > 0 &&
        value_end != std::string::npos && IsInteger(json, value_begin, value_end)) {
      out.append(json, i, value_begin - 1 - i);
      out.append(json, value_begin, value_end - value_begin);
      i = value_end + 1;
    } else {
      out.append(json, i, value_begin - i);
      i = value_begin;
    }
  }
  out.append(json, i, std::string::npos);
  return out;
}

}  // namespace

absl::StatusOr<std::string> RunSummaryToJson(const v1::RunSummary& summary) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (const auto status = google::protobuf::util::MessageToJsonString(summary, &json, options);
      !status.ok()) {
    return absl::InternalError(absl::StrCat("RunSummary to JSON: ", status.ToString()));
  }
  static const std::set<std::string>* const kInt64Fields = [] {
    auto* names = new std::set<std::string>;
    std::set<const Descriptor*> seen;
    CollectInt64Fields(v1::RunSummary::descriptor(), names, &seen);
    return names;
  }();
  return UnquoteIntegers(json, *kInt64Fields);
}

}  // namespace paci
