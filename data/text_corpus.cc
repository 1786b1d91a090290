#include "data/text_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensor/error.h"
#include "tensor/io/input_file.h"

namespace coppice {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The regular files under `dir` whose names end in `suffix`, as paths
// relative to `dir`, sorted bytewise. A FIFO, a socket or a device whose name
// ends in `suffix` is refused, naming it (found from the directory entry,
// never opened): the corpus would silently lack it.
absl::StatusOr<std::vector<std::string>> corpus_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) return absl::NotFoundError(str_cat("text corpus ", dir, ": cannot read the directory: ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    const fs::file_status status = it->status(type_ec);  // follows a symbolic link
    if (type_ec || fs::is_directory(status) || !ends_with(it->path().filename().string(), suffix)) continue;
    const std::string relative = it->path().lexically_relative(dir).generic_string();
    if (fs::is_fifo(status) || fs::is_socket(status) || fs::is_character_file(status) || fs::is_block_file(status)) {
      struct stat st;
      const char* what = ::stat(it->path().c_str(), &st) == 0 ? file_type_name(st.st_mode) : "a special file";
      return absl::InvalidArgumentError(
          str_cat("text corpus ", dir, ": ", relative, " is ", what, ", not a regular file"));
    }
    if (fs::is_regular_file(status)) files.push_back(relative);
  }
  if (ec) return absl::NotFoundError(str_cat("text corpus ", dir, ": cannot walk the directory: ", ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

namespace {

// A corpus tree's files, checked, then read one at a time and handed to
// `take` in order (so that the caller keeps one copy of the bytes). With
// count_newlines, the newline read_text_corpus adds after a file that does not
// end in one counts against max_bytes.
absl::Status read_tree(const std::string& path, const std::string& suffix, uint64_t max_bytes, bool count_newlines,
                       const std::function<void(const std::string&, std::string&&)>& take) {
  absl::StatusOr<std::vector<std::string>> files = corpus_files(path, suffix);
  if (!files.ok()) return files.status();
  if (files->empty()) {
    return absl::NotFoundError(
        str_cat("text corpus ", path, ": no file whose name ends in '", suffix, "' (data.suffix) under it"));
  }
  const auto too_large = [&](const std::string& at) {
    return absl::ResourceExhaustedError(
        str_cat("text corpus ", path, ": larger than the limit of ", max_bytes, " bytes (reached at ", at, ")"));
  };
  // Sizes first, so that an oversized tree is refused before it is read.
  uint64_t total = 0;
  std::vector<uint64_t> sizes;
  for (const std::string& relative : *files) {
    std::error_code size_ec;
    const uintmax_t size = fs::file_size(fs::path(path) / relative, size_ec);
    if (size_ec) {
      return absl::NotFoundError(str_cat("text corpus ", path, ": cannot stat ", relative, ": ", size_ec.message()));
    }
    total += size;
    if (total > max_bytes) return too_large(relative);
    sizes.push_back(size);
  }
  uint64_t read = 0;  // bytes so far, with the newlines read_text_corpus adds
  for (size_t i = 0; i < files->size(); ++i) {
    const std::string& relative = (*files)[i];
    if (read + sizes[i] > max_bytes) return too_large(relative);
    // A file that grew since its size was read is refused by
    // read_file_bytes, naming it.
    absl::StatusOr<std::string> bytes = read_file_bytes((fs::path(path) / relative).string(), max_bytes - read);
    if (!bytes.ok()) return bytes.status();
    read += bytes->size();
    if (count_newlines && !bytes->empty() && bytes->back() != '\n') {
      if (read >= max_bytes) return too_large(relative);
      ++read;
    }
    take(relative, std::move(*bytes));
  }
  return absl::OkStatus();
}

// The type of `path`: a directory or a regular file, or an error naming it.
absl::StatusOr<mode_t> corpus_type(const std::string& path) {
  const absl::StatusOr<mode_t> type = file_type_at(path);
  if (!type.ok()) {
    if (absl::IsNotFound(type.status())) return absl::NotFoundError(str_cat("text corpus ", path, ": not found"));
    return absl::Status(type.status().code(), str_cat("text corpus ", type.status().message()));
  }
  if (!S_ISREG(*type) && !S_ISDIR(*type)) {
    return absl::InvalidArgumentError(
        str_cat("text corpus ", path, ": is ", file_type_name(*type), ", neither a file nor a directory"));
  }
  return type;
}

}  // namespace

absl::StatusOr<std::string> read_text_corpus(const std::string& path, const std::string& suffix, uint64_t max_bytes) {
  // A file is opened by read_file_bytes, which checks what it opened; a
  // directory is walked. Anything else (a FIFO, a device) is never opened.
  const absl::StatusOr<mode_t> type = corpus_type(path);
  if (!type.ok()) return type.status();
  if (S_ISREG(*type)) return read_file_bytes(path, max_bytes);
  std::string text;
  const absl::Status status =
      read_tree(path, suffix, max_bytes, /*count_newlines=*/true, [&](const std::string&, std::string&& bytes) {
        text += bytes;
        if (!bytes.empty() && bytes.back() != '\n') text.push_back('\n');
      });
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<std::vector<CorpusDocument>> read_text_corpus_documents(const std::string& path,
                                                                       const std::string& suffix, uint64_t max_bytes) {
  const absl::StatusOr<mode_t> type = corpus_type(path);
  if (!type.ok()) return type.status();
  if (!S_ISDIR(*type)) {
    return absl::InvalidArgumentError(
        str_cat("text corpus ", path, ": is a regular file, not a directory of documents"));
  }
  std::vector<CorpusDocument> documents;
  const absl::Status status = read_tree(path, suffix, max_bytes, /*count_newlines=*/false,
                                        [&](const std::string& relative, std::string&& bytes) {
                                          documents.push_back({relative, std::move(bytes)});
                                        });
  if (!status.ok()) return status;
  return documents;
}

}  // namespace coppice
