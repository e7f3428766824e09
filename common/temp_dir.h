#pragma once

#include <string>

namespace paci {

// A folder of its own under the system's temporary directory, named
// "<prefix>-XXXXXX", removed with all it holds when destroyed. path() is
// empty when it could not be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace paci
