// The document graph of data/doc_graph.h: on a small tree written here
// (references of each form resolved or counted, labels and "other", the
// vocabulary and tf-idf rows, the split by path), its errors (a missing
// corpus, a file where a tree is needed, options out of range), the
// full-batch split datasets, and the real Linux documentation tools/setup
// installs (sizes it must keep).
#include "data/doc_graph.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/text_corpus.h"
#include "gtest/gtest.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "tests/data/test_util.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;
using testing::write_file;

// root.rst.txt, a/one, a/two, a/sub/three, b/four.
std::string small_tree() {
  const std::string d = temp_dir("docgraph");
  fs::create_directories(d + "/a/sub");
  fs::create_directories(d + "/b");
  write_file(d + "/root.rst.txt", "Root kernel text. See :doc:`a/one` and :ref:`genindex`.\n");
  write_file(d + "/a/one.rst.txt",
             ".. _One-Label:\n\nOne kernel memory memory. :doc:`two` :doc:`Four <../b/four>`\n"
             ":doc:`one` (itself) :doc:`/a/sub/three`\n");
  write_file(d + "/a/two.rst.txt", "Two kernel scheduler. :ref:`the first\n <one-label>`\n");
  write_file(d + "/a/sub/three.rst.txt", ".. _three:\n\nThree memory.\n");
  write_file(d + "/b/four.rst.txt", "Four kernel network network network. :ref:`~three` :ref:`nobody`\n");
  write_file(d + "/b/notes.txt", "not a document: :doc:`../a/one`\n");
  return d;
}

TEST(ReferenceTarget, TakesTheTargetOfATitledReference) {
  EXPECT_EQ(reference_target("Title <a/b>"), "a/b");
  EXPECT_EQ(reference_target(" plain "), "plain");
  EXPECT_EQ(reference_target("~mod.func"), "mod.func");
  EXPECT_EQ(reference_target("multi\n line <x>"), "x");
}

TEST(DocGraph, SmallTreeNodesEdgesLabelsAndFeatures) {
  DocGraphOptions o;
  o.path = small_tree();
  o.vocabulary = 4;
  o.min_class_documents = 2;
  const absl::StatusOr<DocGraph> g = load_doc_graph(o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->documents, (std::vector<std::string>{"a/one", "a/sub/three", "a/two", "b/four", "root"}));
  // one-two (:doc: relative, :ref: across lines, case-insensitive), one-four
  // (../), one-three (absolute), four-three (:ref:`~three`), root-one.
  EXPECT_EQ(g->edges, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 3}}));
  EXPECT_EQ(g->references, 9);
  EXPECT_EQ(g->unresolved, 2);  // genindex, nobody
  // a has 3 documents, b 1 (below min_class_documents), root is at the root.
  EXPECT_EQ(g->classes, (std::vector<std::string>{"a", "other"}));
  EXPECT_EQ(g->labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 1}));
  // Document frequencies: kernel 4, memory 2, network 1, ... ties by the word.
  ASSERT_EQ(g->vocabulary.size(), 4u);
  EXPECT_EQ(g->vocabulary[0], "kernel");
  EXPECT_EQ(g->features.format(), "csr");
  EXPECT_EQ(g->features.shape(), (Shape{5, 4}));
  const std::vector<float> dense = to_dense(g->features).to_vector<float>();
  for (int64_t i = 0; i < 5; ++i) {
    double norm2 = 0.0;
    for (int64_t j = 0; j < 4; ++j) norm2 += dense[i * 4 + j] * dense[i * 4 + j];
    if (norm2 > 0.0) { EXPECT_NEAR(norm2, 1.0, 1e-5) << g->documents[i]; }
  }
  const Tensor a = g->adjacency();
  EXPECT_EQ(a.format(), "csr");
  const std::vector<float> adj = to_dense(a).to_vector<float>();
  EXPECT_EQ(std::count(adj.begin(), adj.end(), 1.0f), 10);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(adj[i * 5 + j], adj[j * 5 + i]);
  }
}

TEST(DocGraph, ToctreeEntriesAreReferencesWhenAsked) {
  const std::string d = small_tree();
  write_file(d + "/index.rst.txt",
             "Top\n\n.. toctree::\n   :maxdepth: 2\n\n   self\n   Root <root>\n   a/sub/*\n   missing\n\n"
             "Text after.\n   .. toctree::\n\n      b/four\n");
  DocGraphOptions o;
  o.path = d;
  const DocGraph without = *load_doc_graph(o);
  o.toctree = true;
  const DocGraph with = *load_doc_graph(o);
  // index is node 4 (a/one, a/sub/three, a/two, b/four, index, root).
  EXPECT_EQ(without.references + 4, with.references);  // root, a/sub/*, missing, b/four
  EXPECT_EQ(without.unresolved + 1, with.unresolved);  // missing
  std::set<std::pair<int64_t, int64_t>> added(with.edges.begin(), with.edges.end());
  for (const auto& e : without.edges) added.erase(e);
  EXPECT_EQ(added, (std::set<std::pair<int64_t, int64_t>>{{1, 4}, {3, 4}, {4, 5}}));
}

TEST(DocGraph, SplitIsByPathAndFollowsTheFractions) {
  DocGraphOptions o;
  o.path = small_tree();
  o.train_fraction = 1.0;
  o.validation_fraction = 0.0;
  const DocGraph all_train = *load_doc_graph(o);
  for (NodeSplit s : all_train.split) EXPECT_EQ(s, NodeSplit::kTrain);
  o.train_fraction = 0.5;
  o.validation_fraction = 0.25;
  const DocGraph a = *load_doc_graph(o);
  const DocGraph b = *load_doc_graph(o);
  EXPECT_EQ(a.split, b.split);
  // A document keeps its split when another file goes.
  fs::remove(o.path + "/b/four.rst.txt");
  const DocGraph c = *load_doc_graph(o);
  for (size_t i = 0; i < c.documents.size(); ++i) {
    for (size_t j = 0; j < a.documents.size(); ++j) {
      if (a.documents[j] == c.documents[i]) { EXPECT_EQ(a.split[j], c.split[i]) << c.documents[i]; }
    }
  }
}

TEST(DocGraph, ErrorsNameThePathOrTheOption) {
  DocGraphOptions o;
  o.path = "/nonexistent/linux-doc";
  absl::StatusOr<DocGraph> g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/nonexistent/linux-doc"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("not found"), std::string::npos) << g.status();

  const std::string d = small_tree();
  o.path = d + "/root.rst.txt";
  g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("not a directory"), std::string::npos) << g.status();

  o.path = d;
  o.suffix = ".md";
  g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'.md'"), std::string::npos) << g.status();

  const std::string wordless = temp_dir("docgraph_wordless");
  write_file(wordless + "/x.rst.txt", "12 34 .. ab\n");
  o.path = wordless;
  o.suffix = ".rst.txt";
  g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(wordless + ": no word of 3 letters"), std::string::npos) << g.status();

  o.path = d;
  o.train_fraction = 0.9;
  o.validation_fraction = 0.2;
  g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("train_fraction + validation_fraction"), std::string::npos) << g.status();
  o.validation_fraction = 0.1;
  o.vocabulary = 0;
  g = load_doc_graph(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("vocabulary"), std::string::npos) << g.status();
}

TEST(DocGraphSplitDataset, OneFullBatchWithTheOtherSplitsIgnored) {
  DocGraphOptions o;
  o.path = small_tree();
  o.train_fraction = 0.5;
  o.validation_fraction = 0.25;
  auto g = std::make_shared<const DocGraph>(*load_doc_graph(o));
  int64_t seen = 0;
  for (NodeSplit s : {NodeSplit::kTrain, NodeSplit::kValidation, NodeSplit::kTest}) {
    DocGraphSplitDataset d(g, s);
    EXPECT_EQ(d.size(), 1);
    const Batch b = d.get_batch({0});
    EXPECT_EQ(b.inputs.format(), "csr");  // the features as they are
    const std::vector<int64_t> t = b.targets.to_vector<int64_t>();
    const std::vector<int64_t> labels = g->labels.to_vector<int64_t>();
    int64_t scored = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (g->split[i] == s) {
        EXPECT_EQ(t[i], labels[i]);
        ++scored;
      } else {
        EXPECT_EQ(t[i], kIgnoredLabel);
      }
    }
    EXPECT_EQ(scored, d.nodes_in_split());
    seen += scored;
  }
  EXPECT_EQ(seen, g->num_nodes());
  DocGraphSplitDataset d(g, NodeSplit::kTrain);
  EXPECT_THROW(d.get_batch({0, 0}), Error);
  EXPECT_THROW(d.get_batch({1}), Error);
}

// The corpus the GPT job reads (tools/setup installs linux-doc-6.1).
TEST(DocGraph, LinuxDocumentation) {
  DocGraphOptions o;  // the defaults the jobs use
  const absl::StatusOr<DocGraph> g = load_doc_graph(o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_nodes(), 3183);
  EXPECT_GT(g->edges.size(), 1000u);
  EXPECT_GT(g->classes.size(), 10u);
  EXPECT_EQ(g->classes.back(), "other");
  EXPECT_EQ(g->features.shape(), (Shape{3183, 2000}));
  EXPECT_EQ(g->features.format(), "csr");

  // The toctree ties nearly every document in (configs/docgraph_*.yaml).
  o.toctree = true;
  const absl::StatusOr<DocGraph> t = load_doc_graph(o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const DocGraph* x : {&*g, &*t}) {
    std::vector<bool> linked(static_cast<size_t>(x->num_nodes()));
    const std::vector<int64_t> labels = x->labels.to_vector<int64_t>();
    int64_t within = 0;
    for (const auto& [i, j] : x->edges) {
      linked[static_cast<size_t>(i)] = linked[static_cast<size_t>(j)] = true;
      within += labels[static_cast<size_t>(i)] == labels[static_cast<size_t>(j)] ? 1 : 0;
    }
    const int64_t n_linked = std::count(linked.begin(), linked.end(), true);
    std::cout << (x == &*t ? "with toctree: " : ":doc:/:ref: only: ") << x->edges.size() << " edges, " << n_linked
              << " documents linked, " << within << " edges within a class, " << x->references << " references ("
              << x->unresolved << " unresolved)\n";
    if (x == &*t) { EXPECT_GT(n_linked, 3000); }
  }
}

}  // namespace
}  // namespace coppice
