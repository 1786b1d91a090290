#include "data/text.h"

#include <utility>

#include "absl/status/status.h"
#include "data/text_corpus.h"

namespace coppice {

CharVocab::CharVocab(const std::string& text) {
  ids_.fill(-1);
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    ids_[b] = static_cast<int64_t>(chars_.size());
    chars_.push_back(static_cast<char>(b));
  }
}

CharVocab CharVocab::all_bytes() {
  CharVocab v;
  for (int b = 0; b < 256; ++b) {
    v.ids_[b] = b;
    v.chars_.push_back(static_cast<char>(b));
  }
  return v;
}

int64_t CharVocab::id(char c) const {
  const int64_t i = ids_[static_cast<unsigned char>(c)];
  COPPICE_CHECK(i >= 0, "CharVocab.id: byte ", int{static_cast<unsigned char>(c)}, " is not in the vocabulary of ",
                size());
  return i;
}

char CharVocab::chr(int64_t id) const {
  COPPICE_CHECK(id >= 0 && id < size(), "CharVocab.chr: id ", id, " is outside [0, ", size(), ")");
  return chars_[static_cast<size_t>(id)];
}

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(id(c));
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t i : ids) out.push_back(chr(i));
  return out;
}

CharTextDataset::CharTextDataset(const std::string& text, TextDatasetOptions options, std::string label)
    : vocab_(options.byte_vocab ? CharVocab::all_bytes() : CharVocab(text)),
      tokens_(vocab_.encode(text)),
      seq_len_(options.seq_len),
      label_(std::move(label)) {
  COPPICE_CHECK(options.seq_len >= 1, "CharTextDataset: seq_len must be >= 1, got ", options.seq_len);
  COPPICE_CHECK(options.stride >= 0, "CharTextDataset: stride must be >= 0 (0: seq_len), got ", options.stride);
  stride_ = options.stride == 0 ? seq_len_ : options.stride;
  const auto n = static_cast<int64_t>(tokens_.size());
  size_ = n > seq_len_ ? (n - seq_len_ - 1) / stride_ + 1 : 0;
}

absl::StatusOr<std::shared_ptr<CharTextDataset>> CharTextDataset::from_path(const std::string& path,
                                                                            TextDatasetOptions options) {
  if (options.seq_len < 1 || options.stride < 0) {
    return absl::InvalidArgumentError(str_cat("text ", path, ": seq_len must be >= 1 and stride >= 0, got ",
                                              options.seq_len, " and ", options.stride));
  }
  absl::StatusOr<std::string> bytes = read_text_corpus(path, options.suffix, kTextMaxBytes);
  if (!bytes.ok()) return bytes.status();  // names the path
  if (static_cast<int64_t>(bytes->size()) <= options.seq_len) {
    return absl::InvalidArgumentError(str_cat("text ", path, ": ", bytes->size(),
                                              " bytes, too short for one window of seq_len ", options.seq_len,
                                              " plus its next-char target"));
  }
  return std::make_shared<CharTextDataset>(*bytes, options, path);
}

std::string CharTextDataset::name() const {
  return str_cat("CharTextDataset ", label_, " (", size_, " windows of ", seq_len_, ")");
}

Batch CharTextDataset::get_batch(const std::vector<int64_t>& indices) const {
  check_indices(indices);
  const auto b = static_cast<int64_t>(indices.size());
  Tensor inputs = Tensor::empty({b, seq_len_}, DType::kI64);
  Tensor targets = Tensor::empty({b, seq_len_}, DType::kI64);
  int64_t* in = inputs.data<int64_t>();
  int64_t* tg = targets.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const int64_t* src = tokens_.data() + indices[static_cast<size_t>(r)] * stride_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = src[t];
      tg[r * seq_len_ + t] = src[t + 1];
    }
  }
  return Batch{std::move(inputs), std::move(targets), indices};
}

}  // namespace coppice
