#include "data/text_corpus.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "data/text.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

// A tree whose walk order differs from creation order: b/, a.rst.txt,
// a/z.rst.txt, a/c.rst.txt, and files that the suffix leaves out.
std::string make_tree() {
  const std::string dir = testing::temp_dir() + "/tree";
  fs::create_directories(dir + "/b");
  fs::create_directories(dir + "/a");
  testing::write_file(dir + "/b/x.rst.txt", "bx\n");
  testing::write_file(dir + "/a.rst.txt", "top");  // no final newline: one is added
  testing::write_file(dir + "/a/z.rst.txt", "az\n");
  testing::write_file(dir + "/a/c.rst.txt", "ac\n");
  testing::write_file(dir + "/a/skip.html", "<html>");
  testing::write_file(dir + "/b/empty.rst.txt", "");
  return dir;
}

TEST(TextCorpus, ReadsADirectoryInPathOrder) {
  const std::string dir = make_tree();
  absl::StatusOr<std::string> text = read_text_corpus(dir, ".rst.txt", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  // Bytewise order of the relative paths: "a.rst.txt" < "a/c.rst.txt" ('.' < '/').
  EXPECT_EQ(*text, "top\nac\naz\nbx\n");
  // The same tree gives the same bytes again.
  EXPECT_EQ(*read_text_corpus(dir, ".rst.txt", 1 << 20), *text);
  // An empty suffix takes every file.
  absl::StatusOr<std::string> all = read_text_corpus(dir, "", 1 << 20);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, "top\nac\n<html>\naz\nbx\n");
}

TEST(TextCorpus, ReadsAFileWhole) {
  const std::string path = testing::write_file(testing::temp_dir() + "/one.txt", "no newline");
  absl::StatusOr<std::string> text = read_text_corpus(path, "", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "no newline");
}

TEST(TextCorpus, ErrorsNameThePath) {
  const std::string dir = testing::temp_dir();
  const auto message = [](const absl::StatusOr<std::string>& s) { return std::string(s.status().message()); };

  auto missing = read_text_corpus(dir + "/nope", "", 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(message(missing).find(dir + "/nope"), std::string::npos);
  EXPECT_NE(message(missing).find("not found"), std::string::npos);

  fs::create_directories(dir + "/none");
  testing::write_file(dir + "/none/a.md", "x");
  auto none = read_text_corpus(dir + "/none", ".rst.txt", 1 << 20);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(message(none).find("no file whose name ends in '.rst.txt'"), std::string::npos) << none.status();

  fs::create_directories(dir + "/empty_dir");
  EXPECT_FALSE(read_text_corpus(dir + "/empty_dir", "", 1 << 20).ok());

  auto device = read_text_corpus("/dev/null", "", 1 << 20);
  ASSERT_FALSE(device.ok());
  EXPECT_NE(message(device).find("is a character device, neither a file nor a directory"), std::string::npos)
      << device.status();
}

TEST(TextCorpus, SpecialFilesAreRefusedWithoutBlocking) {
  ::alarm(20);  // a FIFO that blocked would end the test here
  const std::string dir = make_tree();
  const auto message = [](const absl::StatusOr<std::string>& s) { return std::string(s.status().message()); };
  ASSERT_EQ(::mkfifo((dir + "/fifo.txt").c_str(), 0644), 0);
  auto top = read_text_corpus(dir + "/fifo.txt", "", 1 << 20);
  EXPECT_EQ(message(top), "text corpus " + dir + "/fifo.txt: is a FIFO, neither a file nor a directory");

  // In a tree: one the suffix takes is refused, naming it; others are left out.
  ASSERT_EQ(::mkfifo((dir + "/a/p.rst.txt").c_str(), 0644), 0);
  auto tree = read_text_corpus(dir, ".rst.txt", 1 << 20);
  EXPECT_EQ(message(tree), "text corpus " + dir + ": a/p.rst.txt is a FIFO, not a regular file");
  fs::remove(dir + "/a/p.rst.txt");
  EXPECT_TRUE(read_text_corpus(dir, ".rst.txt", 1 << 20).ok());  // fifo.txt does not end in .rst.txt
  // Behind a symbolic link too.
  fs::create_symlink(dir + "/fifo.txt", dir + "/b/l.rst.txt");
  EXPECT_EQ(message(read_text_corpus(dir, ".rst.txt", 1 << 20)),
            "text corpus " + dir + ": b/l.rst.txt is a FIFO, not a regular file");
  ::alarm(0);
}

TEST(TextCorpus, OversizedTreeIsRefusedBeforeItIsRead) {
  const std::string dir = make_tree();
  // 12 bytes of .rst.txt files and the newline after "top": 13 fit, 12 do not.
  EXPECT_TRUE(read_text_corpus(dir, ".rst.txt", 13).ok());
  auto over = read_text_corpus(dir, ".rst.txt", 12);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(over.status().message()).find("larger than the limit of 12 bytes"), std::string::npos)
      << over.status();
  // A sparse file past the limit: refused by its size, none of it read.
  const std::string big = dir + "/b/big.rst.txt";
  testing::write_file(big, "x");
  fs::resize_file(big, kTextMaxBytes + 1);
  auto huge = read_text_corpus(dir, ".rst.txt", kTextMaxBytes);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(std::string(huge.status().message()).find("b/big.rst.txt"), std::string::npos) << huge.status();
}

TEST(TextCorpus, DatasetFromADirectoryWithAByteVocabulary) {
  const std::string dir = make_tree();
  TextDatasetOptions o;
  o.seq_len = 4;
  o.suffix = ".rst.txt";
  o.byte_vocab = true;
  auto ds = CharTextDataset::from_path(dir, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->vocab().size(), 256);
  // Token ids are the byte values themselves.
  ASSERT_EQ((*ds)->tokens().size(), 13u);
  EXPECT_EQ((*ds)->tokens()[0], 't');
  EXPECT_EQ((*ds)->tokens()[3], '\n');
  // Without it, the vocabulary is the distinct bytes: "\nabcoptxz".
  o.byte_vocab = false;
  auto distinct = CharTextDataset::from_path(dir, o);
  ASSERT_TRUE(distinct.ok()) << distinct.status();
  EXPECT_EQ((*distinct)->vocab().chars(), "\nabcoptxz");
}

TEST(CharVocab, AllBytesMapsEveryByteToItself) {
  const CharVocab v = CharVocab::all_bytes();
  ASSERT_EQ(v.size(), 256);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(v.id(static_cast<char>(b)), b);
    EXPECT_EQ(static_cast<unsigned char>(v.chr(b)), b);
  }
}

}  // namespace
}  // namespace coppice
