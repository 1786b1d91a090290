// A character-level text dataset: the bytes of a text (one file, or a tree of
// files: data/text_corpus.h), a vocabulary of the distinct bytes it holds or
// of all 256 bytes, and windows of seq_len tokens whose targets are the next
// tokens (the input shifted by one).
//
// The default corpus is perldiag.pod from the Debian package
// perl-modules-5.36 (installed by tools/setup): about 300 KB of plain ASCII
// English prose (Perl's explanations of its diagnostics) in POD markup. The
// larger one is the Linux documentation of kLinuxDocCorpus (about 24 MB).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace coppice {

inline constexpr const char* kDefaultTextCorpus = "/usr/share/perl/5.36.0/pod/perldiag.pod";
inline constexpr const char* kDefaultTextCorpusPackage = "perl-modules-5.36";
// Larger files are refused (a corpus is read whole into memory).
inline constexpr uint64_t kTextMaxBytes = uint64_t{1} << 30;

// The distinct bytes of a text, in increasing byte order; token i is chars()[i].
class CharVocab {
 public:
  CharVocab() { ids_.fill(-1); }
  explicit CharVocab(const std::string& text);
  // Every byte, token i being byte i: a vocabulary that does not depend on
  // the corpus (a model trained on one text reads any other).
  static CharVocab all_bytes();

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  const std::string& chars() const { return chars_; }
  bool contains(char c) const { return ids_[static_cast<unsigned char>(c)] >= 0; }
  // Throws coppice::Error for a byte not in the vocabulary / an id out of range.
  int64_t id(char c) const;
  char chr(int64_t id) const;
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::string chars_;
  std::array<int64_t, 256> ids_;
};

struct TextDatasetOptions {
  int64_t seq_len = 64;
  // Distance between the starts of consecutive windows; 0 means seq_len
  // (windows that overlap only where one's last target is the next's first input).
  int64_t stride = 0;
  // Tokens are all 256 bytes (CharVocab::all_bytes) instead of the distinct
  // bytes of the text.
  bool byte_vocab = false;
  // Where the text is a directory: the files read are those whose names end
  // in this ("" reads every file; data/text_corpus.h).
  std::string suffix;
};

// Example i: inputs tokens[i*stride, i*stride + seq_len), targets the same
// window moved one token on; both i64 [seq_len]. size() counts the windows
// that fit: (num_tokens - seq_len - 1) / stride + 1, or 0 when the text has
// seq_len tokens or fewer.
class CharTextDataset final : public Dataset {
 public:
  // Throws coppice::Error for seq_len < 1 or stride < 0.
  CharTextDataset(const std::string& text, TextDatasetOptions options = {}, std::string label = "text");
  // Reads the file or directory tree at `path` (read_text_corpus with
  // options.suffix, at most kTextMaxBytes); an error Status names the path
  // for what read_text_corpus refuses and for a text too short for one window.
  static absl::StatusOr<std::shared_ptr<CharTextDataset>> from_path(const std::string& path,
                                                                    TextDatasetOptions options = {});
  // The host memory a dataset of a `text_bytes`-byte text (at most
  // kTextMaxBytes) takes while it is made: the text and its tokens (i64 each).
  static int64_t memory_bytes(int64_t text_bytes) { return text_bytes * int64_t{9}; }

  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;  // inputs and targets i64 [B, seq_len]
  std::string name() const override;

  const CharVocab& vocab() const { return vocab_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t stride() const { return stride_; }

 private:
  CharVocab vocab_;
  std::vector<int64_t> tokens_;
  int64_t seq_len_;
  int64_t stride_;
  int64_t size_;
  std::string label_;
};

}  // namespace coppice
