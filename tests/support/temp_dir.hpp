#pragma once
// TempDir: a fresh directory under $TMPDIR (or /tmp) for one test, removed with its contents
// when the fixture goes out of scope. Tests never write into the working directory.
#include <filesystem>
#include <string>

namespace ktune::test {

class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return m_path; }
  [[nodiscard]] std::string str() const { return m_path.string(); }
  // Writes `text` to path()/name (creating parent directories) and returns the full path.
  std::filesystem::path write(const std::string& name, const std::string& text) const;

private:
  std::filesystem::path m_path;
};

} // namespace ktune::test
