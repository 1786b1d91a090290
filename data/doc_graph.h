// A document graph read from a tree of reStructuredText (the Linux
// documentation of data/text_corpus.h's kLinuxDocCorpus by default), for
// node classification:
//
//   nodes     the documents (files whose names end in the suffix), in
//             read_text_corpus_documents' order;
//   edges     their cross-references, undirected and without self-loops:
//             :doc:`target` (relative to the referring document's directory,
//             or from the root when it starts with '/') and :ref:`label`
//             (resolved to the document that defines `.. _label:`; labels
//             compare case-insensitively, as Sphinx's do). A reference
//             written `title <target>` takes the target. References that
//             resolve to no document (genindex, a label nobody defines) are
//             counted, not edges. With `toctree`, each entry of a
//             `.. toctree::` directive is a :doc: reference too (Sphinx
//             resolves it as one; a glob entry links every document it
//             matches): the tables of contents that tie each directory's
//             index to its documents;
//   features  each document's bag of words as a CSR [documents, vocabulary]
//             f32: words are maximal runs of ASCII letters, lower-cased, of 3
//             letters or more; the vocabulary is the `vocabulary` words in the
//             most documents (ties by the word), in that order; a document's
//             value for a word is log(1 + count) * log(documents / document
//             frequency) (tf-idf), each row scaled to unit L2 norm;
//   labels    the top-level directory of the document's path. Documents at
//             the root, and directories with fewer than min_class_documents
//             documents, share the class "other" (too small to learn
//             alone). Classes are the kept directory names in bytewise order,
//             then "other" where any document has it;
//   split     a document trains, validates or tests by a hash of its path
//             (FNV-1a 64-bit of the relative path and the seed, as a fraction
//             of 2^64, against train_fraction and train_fraction +
//             validation_fraction): the same document stays in its split
//             when other files come or go.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "tensor/tensor.h"

namespace coppice {

struct DocGraphOptions {
  std::string path;  // the tree's root ("" = kLinuxDocCorpus)
  std::string suffix = ".rst.txt";
  int64_t vocabulary = 2000;         // words kept as features
  int64_t min_class_documents = 20;  // smaller directories join "other"
  double train_fraction = 0.6;       // of the documents, by the hash of the path
  double validation_fraction = 0.2;  // the rest tests
  uint64_t seed = 0;                 // mixed into the split's hash
  bool toctree = false;              // toctree entries are references too
  uint64_t max_bytes = uint64_t{1} << 30;

  std::string root() const;  // path, or kLinuxDocCorpus for ""
};

enum class NodeSplit : int8_t { kTrain, kValidation, kTest };

struct DocGraph {
  std::vector<std::string> documents;   // relative paths without the suffix
  std::vector<std::string> vocabulary;  // column j of features is vocabulary[j]
  std::vector<std::string> classes;     // label c is classes[c]
  // Each undirected edge once, as (i, j) with i < j, sorted.
  std::vector<std::pair<int64_t, int64_t>> edges;
  Tensor features;               // CSR f32 [documents, vocabulary.size()]
  Tensor labels;                 // i64 [documents]
  std::vector<NodeSplit> split;  // per document
  int64_t references = 0;        // :doc: and :ref: references (and toctree entries) read
  int64_t unresolved = 0;        // of which resolved to no document

  int64_t num_nodes() const { return static_cast<int64_t>(documents.size()); }
  // The symmetric adjacency as a CSR f32 [nodes, nodes]: 1 at (i, j) and
  // (j, i) for each edge, nothing on the diagonal.
  Tensor adjacency() const;
};

// Reads the tree at options.root() (read_text_corpus_documents) and builds
// the graph. Errors name the path (not found, not a directory, no file ending
// in the suffix, unreadable, too large, no word in any document) or the
// option that is out of range
// (vocabulary < 1, min_class_documents < 1, fractions outside [0, 1] or
// summing past 1).
absl::StatusOr<DocGraph> load_doc_graph(const DocGraphOptions& options);

// What a reference names, from the text between its backticks: the target of
// `title <target>`, else the whole text, without a leading '~' or '!' and
// surrounding whitespace. Exposed for tests.
std::string reference_target(const std::string& text);

// The whole graph as one example for full-batch training: a batch of index 0
// is inputs = the CSR features [nodes, vocabulary] (not stacked, not
// densified) and targets = the labels [nodes] with every node outside
// `split` set to kIgnoredLabel, which the loss and the accuracy leave out.
// So size() is 1; the model sees every node (a graph layer mixes in the
// neighbours of any split), but only the split's nodes are scored.
inline constexpr int64_t kIgnoredLabel = -100;  // CrossEntropyOptions::ignore_index's default

class DocGraphSplitDataset final : public Dataset {
 public:
  DocGraphSplitDataset(std::shared_ptr<const DocGraph> graph, NodeSplit split);

  int64_t size() const override { return 1; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;  // indices must be {0}
  std::string name() const override;

  const DocGraph& graph() const { return *graph_; }
  int64_t nodes_in_split() const { return nodes_; }

 private:
  std::shared_ptr<const DocGraph> graph_;
  NodeSplit split_;
  Tensor targets_;
  int64_t nodes_ = 0;
};

}  // namespace coppice
