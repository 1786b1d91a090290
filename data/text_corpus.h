// A text corpus read into memory: one file, or every file of a directory tree
// whose name ends in a suffix, in a fixed order, so that the same tree gives
// the same bytes (and the same training/validation split) on every machine.
//
// The default large corpus is the reStructuredText of the Linux 6.1
// documentation that the Debian package linux-doc-6.1 installs (tools/setup):
// 3183 files of plain English and code under kLinuxDocCorpus, about 24 MB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace coppice {

inline constexpr const char* kLinuxDocCorpus = "/usr/share/doc/linux-doc-6.1/html/_sources";
inline constexpr const char* kLinuxDocCorpusSuffix = ".rst.txt";
inline constexpr const char* kLinuxDocCorpusPackage = "linux-doc-6.1";

// The bytes of `path`. A regular file is read whole. A directory is walked
// recursively (directory symlinks are not followed) and its regular files
// whose names end in `suffix` ("" takes every file) are read in order of
// their paths relative to `path` (bytewise), each followed by a newline
// where it does not end in one.
//
// Nothing but regular files is opened (tensor/io/input_file.h): a FIFO, a
// socket or a device at `path`, or one whose name ends in `suffix` in the
// tree, is refused, naming it and what it is.
//
// Errors name the path: not found, neither a file nor a directory, a
// directory that cannot be walked, a directory holding no file ending in
// `suffix`, a file that cannot be read, and a corpus larger than `max_bytes`
// (refused as soon as the sizes say so, before the rest is read).
absl::StatusOr<std::string> read_text_corpus(const std::string& path, const std::string& suffix, uint64_t max_bytes);

// One file of a corpus tree: its path relative to the tree's root ('/'
// separated) and its bytes as read.
struct CorpusDocument {
  std::string path;
  std::string text;
};

// The files of the directory tree at `path` whose names end in `suffix`, one
// document each, in the order read_text_corpus concatenates them (for
// readers that need the files apart: data/doc_graph.h). Refuses what
// read_text_corpus refuses, with the same messages; a regular file at `path`
// is refused too (a tree is needed to tell documents apart).
absl::StatusOr<std::vector<CorpusDocument>> read_text_corpus_documents(const std::string& path,
                                                                       const std::string& suffix, uint64_t max_bytes);

}  // namespace coppice
