#include "tensor/io/input_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace coppice {
namespace {

std::string write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string message(const absl::Status& s) { return std::string(s.message()); }

// Whatever goes wrong, a test never waits on a FIFO: the alarm ends it.
class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ::alarm(20); }
  void TearDown() override { ::alarm(0); }
  std::string dir_ = testing::temp_dir("input_file");
};

TEST_F(InputFileTest, ReadsARegularFile) {
  const std::string path = write(dir_ + "/a.txt", "hello\n");
  absl::StatusOr<InputFile> f = InputFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 6u);
  EXPECT_EQ(f->path(), path);
  absl::StatusOr<std::string> all = f->read_all(100);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, "hello\n");
  EXPECT_EQ(*read_file_bytes(path), "hello\n");
  EXPECT_EQ(*read_file_bytes(write(dir_ + "/empty", "")), "");
}

TEST_F(InputFileTest, ReadsBlockingAfterTheCheck) {
  absl::StatusOr<InputFile> f = InputFile::open(write(dir_ + "/a", "x"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(::fcntl(f->fd(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(f->fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST_F(InputFileTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  absl::StatusOr<InputFile> f = InputFile::open(fifo);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(message(f.status()), fifo + ": is a FIFO, not a regular file");
  EXPECT_EQ(message(read_file_bytes(fifo).status()), fifo + ": is a FIFO, not a regular file");

  // Behind a symbolic link: what it names counts.
  const std::string link = dir_ + "/link.yaml";
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  EXPECT_EQ(message(InputFile::open(link).status()), link + ": is a FIFO, not a regular file");
}

TEST_F(InputFileTest, RefusesDevicesDirectoriesAndSockets) {
  EXPECT_EQ(message(InputFile::open("/dev/zero").status()), "/dev/zero: is a character device, not a regular file");
  EXPECT_EQ(message(InputFile::open(dir_).status()), dir_ + ": is a directory, not a regular file");
  EXPECT_TRUE(absl::IsInvalidArgument(InputFile::open(dir_).status()));

  // A Unix socket, bound by a relative name (a test's temporary directory may
  // be longer than sun_path).
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "sock");
  const int bound = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_EQ(bound, 0) << std::strerror(errno);
  EXPECT_EQ(message(InputFile::open(dir_ + "/sock").status()), dir_ + "/sock: is a socket, not a regular file");
  ::close(s);
}

TEST_F(InputFileTest, NamesThePathAndTheReason) {
  const absl::Status missing = InputFile::open(dir_ + "/nope").status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_EQ(message(missing), dir_ + "/nope: cannot open: No such file or directory");
  ASSERT_EQ(::symlink("nowhere", (dir_ + "/dangling").c_str()), 0);
  EXPECT_FALSE(InputFile::open(dir_ + "/dangling").ok());
  const std::string file = write(dir_ + "/plain", "x");
  EXPECT_EQ(message(InputFile::open(file + "/under").status()), file + "/under: cannot open: Not a directory");
}

TEST_F(InputFileTest, FileTypeAtFollowsLinksWithoutOpening) {
  const std::string fifo = dir_ + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::symlink(fifo.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_TRUE(S_ISFIFO(*file_type_at(dir_ + "/link")));
  EXPECT_TRUE(S_ISDIR(*file_type_at(dir_)));
  EXPECT_TRUE(S_ISREG(*file_type_at(write(dir_ + "/f", "x"))));
  EXPECT_TRUE(absl::IsNotFound(file_type_at(dir_ + "/nope").status()));
  EXPECT_STREQ(file_type_name(*file_type_at("/dev/null")), "a character device");
}

TEST_F(InputFileTest, ReadsNoFurtherThanTheLimit) {
  const std::string path = write(dir_ + "/big", std::string(3000, 'x'));
  EXPECT_EQ(message(read_file_bytes(path, 2048).status()), path + ": 3000 bytes, more than the limit of 2048");
  EXPECT_TRUE(read_file_bytes(path, 3000).ok());
  // A /proc file says its size is 0: it is read to its end, within the limit.
  absl::StatusOr<std::string> status = read_file_bytes("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("Name:"), std::string::npos);
  EXPECT_EQ(message(read_file_bytes("/proc/self/status", 10).status()),
            "/proc/self/status: more than the limit of 10 bytes");
}

}  // namespace
}  // namespace coppice
