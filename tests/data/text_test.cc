#include "data/text.h"

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "data/loader.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace coppice {
namespace {

TEST(CharVocab, SortedDistinctBytes) {
  CharVocab v(std::string("hello, world"));
  EXPECT_EQ(v.chars(), " ,dehlorw");
  EXPECT_EQ(v.size(), 9);
  EXPECT_EQ(v.id('h'), 4);
  EXPECT_EQ(v.chr(4), 'h');
  EXPECT_TRUE(v.contains('w'));
  EXPECT_FALSE(v.contains('z'));
  std::vector<int64_t> ids = v.encode("world");
  EXPECT_EQ(v.decode(ids), "world");
  EXPECT_THROW(v.id('z'), Error);
  EXPECT_THROW(v.chr(9), Error);
  EXPECT_THROW(v.encode("zz"), Error);
  CharVocab bytes(std::string("\xff\x00\x80", 3));
  EXPECT_EQ(bytes.chars(), std::string("\x00\x80\xff", 3));
}

TEST(CharTextDataset, WindowsAndNextCharTargets) {
  TextDatasetOptions o;
  o.seq_len = 3;
  CharTextDataset ds("abcdefghij", o);  // 10 tokens
  EXPECT_EQ(ds.size(), 3);              // (10 - 3 - 1) / 3 + 1
  EXPECT_EQ(ds.vocab().size(), 10);
  Batch b = ds.get_batch({0, 2});
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.inputs.dtype(), DType::kI64);
  EXPECT_EQ(ds.vocab().decode(b.inputs.select(0, 0).to_vector<int64_t>()), "abc");
  EXPECT_EQ(ds.vocab().decode(b.targets.select(0, 0).to_vector<int64_t>()), "bcd");
  EXPECT_EQ(ds.vocab().decode(b.inputs.select(0, 1).to_vector<int64_t>()), "ghi");
  EXPECT_EQ(ds.vocab().decode(b.targets.select(0, 1).to_vector<int64_t>()), "hij");
  EXPECT_THROW(ds.get_batch({3}), Error);

  o.stride = 1;
  CharTextDataset overlapping("abcdefghij", o);
  EXPECT_EQ(overlapping.size(), 7);
  EXPECT_EQ(overlapping.vocab().decode(overlapping.get_batch({6}).targets.to_vector<int64_t>()), "hij");
  o.seq_len = 10;
  EXPECT_EQ(CharTextDataset("abcdefghij", o).size(), 0);  // no room for the last target
  o.seq_len = 0;
  EXPECT_THROW(CharTextDataset("abc", o), Error);
}

TEST(CharTextDataset, RealCorpus) {
  // perldiag.pod from perl-modules-5.36: plain ASCII English.
  TextDatasetOptions o;
  o.seq_len = 128;
  absl::StatusOr<std::shared_ptr<CharTextDataset>> ds = CharTextDataset::from_path(kDefaultTextCorpus, o);
  ASSERT_TRUE(ds.ok()) << ds.status() << " (tools/setup installs " << kDefaultTextCorpusPackage << ")";
  const CharTextDataset& text = **ds;
  EXPECT_GT(text.tokens().size(), 200'000u);
  EXPECT_EQ(text.size(), (static_cast<int64_t>(text.tokens().size()) - 128 - 1) / 128 + 1);
  EXPECT_GE(text.vocab().size(), 60);
  EXPECT_LE(text.vocab().size(), 100);
  for (char c : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,\n")) {
    EXPECT_TRUE(text.vocab().contains(c)) << int{c};
  }
  for (char c : text.vocab().chars()) EXPECT_LT(static_cast<unsigned char>(c), 128u);  // ASCII
  EXPECT_NE(text.vocab().decode(text.tokens()).find("You said something that may not be interpreted"),
            std::string::npos);

  // Batched through a loader: targets are the inputs moved on by one.
  DataLoaderOptions lo;
  lo.batch_size = 16;
  lo.shuffle = true;
  lo.seed = 5;
  DataLoader loader(*ds, lo);
  Batch b = loader.batch(0, 0);
  EXPECT_EQ(b.inputs.shape(), (Shape{16, 128}));
  std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), tg = b.targets.to_vector<int64_t>();
  for (size_t r = 0; r < 16; ++r) {
    for (size_t t = 0; t + 1 < 128; ++t) ASSERT_EQ(tg[r * 128 + t], in[r * 128 + t + 1]);
    const int64_t start = b.indices[r] * 128;
    EXPECT_EQ(tg[r * 128 + 127], text.tokens()[static_cast<size_t>(start + 128)]);
  }
}

TEST(CharTextDataset, FileErrors) {
  const std::string dir = testing::temp_dir();
  TextDatasetOptions o;
  o.seq_len = 8;
  auto missing = CharTextDataset::from_path(dir + "/nope.txt", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find(dir + "/nope.txt"), std::string::npos);
  auto empty = CharTextDataset::from_path(testing::write_file(dir + "/empty.txt", ""), o);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(std::string(empty.status().message()).find("too short"), std::string::npos) << empty.status();
  auto short_file = CharTextDataset::from_path(testing::write_file(dir + "/short.txt", "12345678"), o);
  ASSERT_FALSE(short_file.ok());
  auto fits = CharTextDataset::from_path(testing::write_file(dir + "/fits.txt", "123456789"), o);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ((*fits)->size(), 1);
  o.seq_len = 0;
  EXPECT_FALSE(CharTextDataset::from_path(dir + "/fits.txt", o).ok());
}

TEST(CharTextDataset, OversizedFileIsRefusedBeforeItIsRead) {
  const std::string path = testing::write_file(testing::temp_dir() + "/huge.txt", "x");
  std::filesystem::resize_file(path, kTextMaxBytes + 1);  // sparse: no disk used
  auto huge = CharTextDataset::from_path(path);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(std::string(huge.status().message()), path + ": 1073741825 bytes, more than the limit of 1073741824");
  std::filesystem::remove(path);
  EXPECT_EQ(CharTextDataset::memory_bytes(1000), 9000);
}

}  // namespace
}  // namespace coppice
