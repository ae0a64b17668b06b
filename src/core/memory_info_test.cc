// The /proc/meminfo reader: a fake file's fields in bytes, clear errors for a missing file
// or field, and the real file of this machine.
#include "core/memory_info.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"

namespace pagoda {
namespace {

std::string ErrorOf(std::string_view field, const std::string& path) {
  try {
    ReadMeminfoBytes(field, path);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    return e.what();
  }
  return "";
}

TEST(ReadMeminfoBytesTest, ParsesMeminfo) {
  const std::string path = ::testing::TempDir() + "/meminfo";
  std::ofstream(path) << "MemTotal:       16000000 kB\nMemFree:  100 kB\n"
                         "MemAvailable:    8000000 kB\n";
  EXPECT_EQ(ReadMeminfoBytes("MemAvailable", path), 8000000LL * 1024);
  EXPECT_EQ(ReadMeminfoBytes("MemTotal", path), 16000000LL * 1024);
  EXPECT_EQ(ReadMeminfoBytes("MemFree", path), 100LL * 1024);
  std::ofstream(path) << "MemTotal: 5 kB\n";
  EXPECT_THROW(ReadMeminfoBytes("MemAvailable", path), Error);
  EXPECT_EQ(ErrorOf("MemAvailable", path), path + ": no readable MemAvailable line");
  EXPECT_THROW(ReadMeminfoBytes("MemAvailable", path + ".missing"), Error);
  EXPECT_EQ(ErrorOf("MemAvailable", path + ".missing"), path + ".missing: cannot open");
  EXPECT_GT(ReadMeminfoBytes("MemAvailable"), 0);  // the real /proc/meminfo
}

TEST(ReadMeminfoBytesTest, RejectsAFieldWithoutItsUnit) {
  const std::string path = ::testing::TempDir() + "/meminfo_no_unit";
  std::ofstream(path) << "MemAvailable: 8000000\nMemTotal: -1 kB\n";
  EXPECT_EQ(ErrorOf("MemAvailable", path), path + ": no readable MemAvailable line");
  EXPECT_EQ(ErrorOf("MemTotal", path), path + ": no readable MemTotal line");
}

TEST(ReadMeminfoBytesTest, MachineFiguresAreReadFromProc) {
  EXPECT_GT(AvailableMemoryBytes(), 0);
  EXPECT_GE(TotalMemoryBytes(), AvailableMemoryBytes());
}

}  // namespace
}  // namespace pagoda
