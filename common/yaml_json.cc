#include "common/yaml_json.h"

#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/text_formats.h"
#include "yaml-cpp/yaml.h"

namespace paci {
namespace {

// If `s` is a YAML 1.2 core-schema number ("+1", "007", ".5", "2.", "3e-3"),
// returns it as a valid JSON number; otherwise returns "".
std::string AsJsonNumber(absl::string_view s) {
  size_t i = 0;
  std::string json;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    if (s[i] == '-') json.push_back('-');
    ++i;
  }
  const auto digits = [&s, &i] {
    const size_t start = i;
    while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(start, i - start);
  };
  absl::string_view integer = digits();
  absl::string_view fraction;
  bool has_point = false;
  if (i < s.size() && s[i] == '.') {
    has_point = true;
    ++i;
    fraction = digits();
  }
  if (integer.empty() && fraction.empty()) return "";
  while (integer.size() > 1 && integer[0] == '0') integer.remove_prefix(1);
  absl::StrAppend(&json, integer.empty() ? "0" : integer);
  if (has_point) absl::StrAppend(&json, ".", fraction.empty() ? "0" : fraction);
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    json.push_back('e');
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) json.push_back(s[i++]);
    const absl::string_view exponent = digits();
    if (exponent.empty()) return "";
    absl::StrAppend(&json, exponent);
  }
  return i == s.size() ? json : "";
}

void AppendJsonScalar(const YAML::Node& node, std::string* out) {
  const std::string& s = node.Scalar();
  if (node.Tag() != "?") {  // Quoted or explicitly tagged: always a string.
    AppendJsonString(s, out);
  } else if (s == "true" || s == "True" || s == "TRUE") {
    out->append("true");
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out->append("false");
  } else if (std::string number = AsJsonNumber(s); !number.empty()) {
    out->append(number);
  } else {
    AppendJsonString(s, out);
  }
}

absl::Status AppendJson(const YAML::Node& node, absl::string_view what, bool keep_nulls,
                        std::string* out) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out->append("null");
      return absl::OkStatus();
    case YAML::NodeType::Scalar:
      AppendJsonScalar(node, out);
      return absl::OkStatus();
    case YAML::NodeType::Sequence: {
      out->push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i > 0) out->push_back(',');
        RETURN_IF_ERROR(AppendJson(node[i], what, keep_nulls, out));
      }
      out->push_back(']');
      return absl::OkStatus();
    }
    case YAML::NodeType::Map: {
      out->push_back('{');
      bool first = true;
      std::set<std::string> keys;
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: line %d: a key must be a plain name", what, entry.first.Mark().line + 1));
        }
        // yaml-cpp keeps duplicate keys; the JSON mapping would silently take the last.
        if (!keys.insert(entry.first.Scalar()).second) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: line %d: duplicate key \"%s\"", what, entry.first.Mark().line + 1,
              entry.first.Scalar()));
        }
        if (entry.second.IsNull() && !keep_nulls) continue;
        if (!first) out->push_back(',');
        first = false;
        AppendJsonString(entry.first.Scalar(), out);
        out->push_back(':');
        RETURN_IF_ERROR(AppendJson(entry.second, what, keep_nulls, out));
      }
      out->push_back('}');
      return absl::OkStatus();
    }
  }
  return absl::InternalError(absl::StrCat(what, ": unknown YAML node type"));
}

}  // namespace

absl::StatusOr<std::string> YamlMappingToJson(std::string_view text, absl::string_view what) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.msg));
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: YAML syntax error at line %d, column %d: %s", what, e.mark.line + 1,
        e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a mapping at the top level"));
  }
  std::string json;
  RETURN_IF_ERROR(AppendJson(root, what, /*keep_nulls=*/false, &json));
  return json;
}

absl::StatusOr<std::string> YamlNodeToJson(const YAML::Node& node, absl::string_view what) {
  std::string json;
  RETURN_IF_ERROR(AppendJson(node, what, /*keep_nulls=*/true, &json));
  return json;
}

}  // namespace paci
