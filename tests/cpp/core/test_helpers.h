// Small helpers shared by the core tests: substring assertions with readable failure output
// (plain GoogleTest, no gmock), a self-deleting temporary directory and scoped environment
// variables.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace pf_test {

inline testing::AssertionResult contains(const char* text_expr, const char* sub_expr, const std::string& text,
                                         const std::string& sub) {
  if (text.find(sub) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << text_expr << " does not contain " << sub_expr << "\n  text: " << text
                                     << "\n  missing: " << sub;
}
inline testing::AssertionResult not_contains(const char* text_expr, const char* sub_expr, const std::string& text,
                                             const std::string& sub) {
  if (text.find(sub) == std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << text_expr << " contains " << sub_expr << "\n  text: " << text;
}
inline testing::AssertionResult starts_with(const char* text_expr, const char* prefix_expr, const std::string& text,
                                            const std::string& prefix) {
  if (text.rfind(prefix, 0) == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << text_expr << " does not start with " << prefix_expr << "\n  text: " << text
                                     << "\n  prefix: " << prefix;
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "plugflow_test_XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

// Sets (or with nullopt, unsets) an environment variable until the end of the scope.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = getenv(name_.c_str())) old_ = old;
    if (value) {
      setenv(name_.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace pf_test

#define EXPECT_CONTAINS(text, sub) EXPECT_PRED_FORMAT2(::pf_test::contains, text, sub)
#define EXPECT_NOT_CONTAINS(text, sub) EXPECT_PRED_FORMAT2(::pf_test::not_contains, text, sub)
#define EXPECT_STARTS_WITH(text, prefix) EXPECT_PRED_FORMAT2(::pf_test::starts_with, text, prefix)
