#include "data/doc_graph.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "data/text_corpus.h"
#include "sparse/csr.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

constexpr size_t kMinWordLength = 3;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// "a/b/../c/./d" -> "a/c/d"; a ".." above the root leaves "" (no document).
std::string normalize_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string part = path.substr(start, slash - start);
    if (part == "..") {
      if (parts.empty()) return "";
      parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = slash + 1;
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

std::string directory_of(const std::string& document) {
  const size_t slash = document.rfind('/');
  return slash == std::string::npos ? "" : document.substr(0, slash);
}

struct Reference {
  bool is_doc;         // :doc: or a toctree entry (else :ref:)
  std::string target;  // reference_target of the text between the backticks, or the entry
};

// Every :doc:`...` and :ref:`...` of `text` (the text may span lines).
std::vector<Reference> references_in(const std::string& text) {
  std::vector<Reference> refs;
  for (const char* role : {":doc:`", ":ref:`"}) {
    const std::string r = role;
    size_t at = 0;
    while ((at = text.find(r, at)) != std::string::npos) {
      const size_t open = at + r.size();
      const size_t close = text.find('`', open);
      if (close == std::string::npos) break;
      refs.push_back({r == ":doc:`", reference_target(text.substr(open, close - open))});
      at = close + 1;
    }
  }
  return refs;
}

// The entries of every `.. toctree::` directive of `text`: the lines after
// it indented deeper than it (blank lines included), less its options
// (":maxdepth: 2") and "self"; each as reference_target reads it (an entry
// may be `title <target>`).
std::vector<Reference> toctree_entries_in(const std::string& text) {
  std::vector<Reference> refs;
  const auto indent_of = [](const std::string& line) {
    size_t k = 0;
    while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
    return k;
  };
  std::vector<std::string> lines;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (trim(lines[i]).rfind(".. toctree::", 0) != 0) continue;
    const size_t directive = indent_of(lines[i]);
    for (++i; i < lines.size(); ++i) {
      const std::string entry = trim(lines[i]);
      if (entry.empty()) continue;
      if (indent_of(lines[i]) <= directive) {
        --i;  // the directive ended; this line may start another
        break;
      }
      if (entry.front() == ':' || entry == "self") continue;
      refs.push_back({true, reference_target(entry)});
    }
  }
  return refs;
}

// The labels a document defines: lines ".. _label:" (lower-cased).
std::vector<std::string> labels_in(const std::string& text) {
  std::vector<std::string> labels;
  size_t line = 0;
  while (line < text.size()) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos) end = text.size();
    const std::string l = trim(text.substr(line, end - line));
    if (l.rfind(".. _", 0) == 0 && l.size() > 5 && l.back() == ':') {
      std::string label = trim(l.substr(4, l.size() - 5));
      // A label with a colon inside is written with backticks: .. _`a: b`:
      if (label.size() >= 2 && label.front() == '`' && label.back() == '`') label = label.substr(1, label.size() - 2);
      if (!label.empty()) labels.push_back(lower(label));
    }
    line = end + 1;
  }
  return labels;
}

// A document's words (ASCII letter runs, lower-cased, kMinWordLength or
// longer) and their counts.
std::map<std::string, int64_t> word_counts(const std::string& text) {
  std::map<std::string, int64_t> counts;
  std::string word;
  for (size_t i = 0; i <= text.size(); ++i) {
    const unsigned char c = i < text.size() ? static_cast<unsigned char>(text[i]) : ' ';
    if (std::isalpha(c) != 0 && c < 128) {
      word.push_back(static_cast<char>(std::tolower(c)));
    } else {
      if (word.size() >= kMinWordLength) ++counts[word];
      word.clear();
    }
  }
  return counts;
}

// FNV-1a 64 of the path, then the seed's bytes: the split is a property of
// the document's name.
uint64_t split_hash(const std::string& path, uint64_t seed) {
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](unsigned char byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  for (char c : path) mix(static_cast<unsigned char>(c));
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(seed >> (8 * i)));
  return h;
}

absl::Status check_options(const DocGraphOptions& o) {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError(str_cat("doc graph: ", what)); };
  if (o.vocabulary < 1) return bad(str_cat("vocabulary must be >= 1, got ", o.vocabulary));
  if (o.min_class_documents < 1) return bad(str_cat("min_class_documents must be >= 1, got ", o.min_class_documents));
  if (!(o.train_fraction >= 0.0 && o.train_fraction <= 1.0))
    return bad(str_cat("train_fraction must be in [0, 1], got ", o.train_fraction));
  if (!(o.validation_fraction >= 0.0 && o.validation_fraction <= 1.0))
    return bad(str_cat("validation_fraction must be in [0, 1], got ", o.validation_fraction));
  if (o.train_fraction + o.validation_fraction > 1.0)
    return bad(str_cat("train_fraction + validation_fraction must be <= 1, got ", o.train_fraction, " + ",
                       o.validation_fraction));
  return absl::OkStatus();
}

}  // namespace

std::string DocGraphOptions::root() const { return path.empty() ? std::string(kLinuxDocCorpus) : path; }

std::string reference_target(const std::string& text) {
  std::string t = trim(text);
  // `title <target>`: the target is between the last '<' and the closing '>'.
  const size_t open = t.rfind('<');
  if (open != std::string::npos && !t.empty() && t.back() == '>') t = t.substr(open + 1, t.size() - open - 2);
  t = trim(t);
  while (!t.empty() && (t.front() == '~' || t.front() == '!')) t.erase(0, 1);
  return trim(t);
}

Tensor DocGraph::adjacency() const {
  const int64_t n = num_nodes();
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
  for (const auto& [i, j] : edges) {
    rows[static_cast<size_t>(i)].push_back(static_cast<int32_t>(j));
    rows[static_cast<size_t>(j)].push_back(static_cast<int32_t>(i));
  }
  std::vector<int32_t> crow{0}, col;
  for (auto& r : rows) {
    std::sort(r.begin(), r.end());
    col.insert(col.end(), r.begin(), r.end());
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  std::vector<float> values(col.size(), 1.0f);
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(values), {n, n});
}

absl::StatusOr<DocGraph> load_doc_graph(const DocGraphOptions& options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  const std::string root = options.root();
  absl::StatusOr<std::vector<CorpusDocument>> read =
      read_text_corpus_documents(root, options.suffix, options.max_bytes);
  if (!read.ok()) return absl::Status(read.status().code(), str_cat("doc graph: ", read.status().message()));
  std::vector<CorpusDocument>& docs = *read;

  DocGraph g;
  const int64_t n = static_cast<int64_t>(docs.size());
  std::unordered_map<std::string, int64_t> by_path;  // document (no suffix) -> node
  for (int64_t i = 0; i < n; ++i) {
    std::string p = docs[static_cast<size_t>(i)].path;
    if (ends_with(p, options.suffix)) p.resize(p.size() - options.suffix.size());
    by_path.emplace(p, i);
    g.documents.push_back(std::move(p));
  }

  // Labels first (a :ref: may point at a document read later); the first
  // document in order that defines a label owns it.
  std::unordered_map<std::string, int64_t> by_label;
  for (int64_t i = 0; i < n; ++i) {
    for (const std::string& label : labels_in(docs[static_cast<size_t>(i)].text)) by_label.emplace(label, i);
  }

  std::set<std::pair<int64_t, int64_t>> edges;
  const auto link = [&edges](int64_t i, int64_t to) {
    if (to != i) edges.emplace(std::min(i, to), std::max(i, to));
  };
  for (int64_t i = 0; i < n; ++i) {
    const std::string& text = docs[static_cast<size_t>(i)].text;
    std::vector<Reference> refs = references_in(text);
    if (options.toctree) {
      for (Reference& r : toctree_entries_in(text)) refs.push_back(std::move(r));
    }
    for (const Reference& r : refs) {
      ++g.references;
      if (!r.is_doc) {
        const auto it = by_label.find(lower(r.target));
        if (it == by_label.end()) {
          ++g.unresolved;
        } else {
          link(i, it->second);
        }
        continue;
      }
      const std::string& doc = g.documents[static_cast<size_t>(i)];
      const std::string target = !r.target.empty() && r.target.front() == '/'
                                     ? normalize_path(r.target)
                                     : normalize_path(directory_of(doc) + "/" + r.target);
      if (target.find_first_of("*?[") != std::string::npos) {
        // A toctree glob (:glob:): every document whose path matches, '*'
        // not crossing a '/', as Sphinx's.
        bool any = false;
        for (int64_t j = 0; j < n; ++j) {
          if (::fnmatch(target.c_str(), g.documents[static_cast<size_t>(j)].c_str(), FNM_PATHNAME) == 0) {
            link(i, j);
            any = true;
          }
        }
        if (!any) ++g.unresolved;
        continue;
      }
      const auto it = by_path.find(target);
      if (it == by_path.end()) {
        ++g.unresolved;
      } else {
        link(i, it->second);
      }
    }
  }
  g.edges.assign(edges.begin(), edges.end());

  // Bag of words: document frequencies, the vocabulary, tf-idf rows.
  std::vector<std::map<std::string, int64_t>> counts;
  counts.reserve(static_cast<size_t>(n));
  std::unordered_map<std::string, int64_t> df;
  for (int64_t i = 0; i < n; ++i) {
    counts.push_back(word_counts(docs[static_cast<size_t>(i)].text));
    std::string().swap(docs[static_cast<size_t>(i)].text);  // read; the counts are what is kept
    for (const auto& [w, c] : counts.back()) ++df[w];
  }
  std::vector<std::pair<std::string, int64_t>> ranked(df.begin(), df.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (static_cast<int64_t>(ranked.size()) > options.vocabulary) ranked.resize(static_cast<size_t>(options.vocabulary));
  if (ranked.empty()) {
    return absl::InvalidArgumentError(str_cat("doc graph: ", root, ": no word of ", kMinWordLength,
                                              " letters or more in any of its ", n, " documents"));
  }
  std::unordered_map<std::string, int32_t> column;
  for (size_t j = 0; j < ranked.size(); ++j) {
    g.vocabulary.push_back(ranked[j].first);
    column.emplace(ranked[j].first, static_cast<int32_t>(j));
  }
  const int64_t v = static_cast<int64_t>(g.vocabulary.size());
  std::vector<int32_t> crow{0}, col;
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::pair<int32_t, double>> row;
    double norm2 = 0.0;
    for (const auto& [w, c] : counts[static_cast<size_t>(i)]) {
      const auto it = column.find(w);
      if (it == column.end()) continue;
      const double idf = std::log(static_cast<double>(n) / static_cast<double>(df[w]));
      const double x = std::log1p(static_cast<double>(c)) * idf;
      if (x == 0.0) continue;  // a word in every document tells nothing
      row.emplace_back(it->second, x);
      norm2 += x * x;
    }
    std::sort(row.begin(), row.end());
    const double scale = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
    for (const auto& [j, x] : row) {
      col.push_back(j);
      values.push_back(static_cast<float>(x * scale));
    }
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  g.features = sparse_csr(from_vector(crow), from_vector(col), from_vector(values), {n, v});

  // Classes: top-level directories with enough documents, then "other".
  std::map<std::string, int64_t> sizes;
  std::vector<std::string> top(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::string& d = g.documents[static_cast<size_t>(i)];
    const size_t slash = d.find('/');
    top[static_cast<size_t>(i)] = slash == std::string::npos ? "" : d.substr(0, slash);
    if (!top[static_cast<size_t>(i)].empty()) ++sizes[top[static_cast<size_t>(i)]];
  }
  std::map<std::string, int64_t> class_of;
  for (const auto& [name, count] : sizes) {
    if (count >= options.min_class_documents && name != "other") {
      class_of.emplace(name, static_cast<int64_t>(g.classes.size()));
      g.classes.push_back(name);
    }
  }
  std::vector<int64_t> labels(static_cast<size_t>(n));
  int64_t other = -1;
  for (int64_t i = 0; i < n; ++i) {
    const auto it = class_of.find(top[static_cast<size_t>(i)]);
    if (it != class_of.end()) {
      labels[static_cast<size_t>(i)] = it->second;
    } else {
      if (other < 0) other = static_cast<int64_t>(g.classes.size());
      labels[static_cast<size_t>(i)] = other;
    }
  }
  if (other >= 0) g.classes.push_back("other");
  g.labels = from_vector(labels);

  for (int64_t i = 0; i < n; ++i) {
    // The top 53 bits as a fraction in [0, 1).
    const double u = static_cast<double>(split_hash(g.documents[static_cast<size_t>(i)], options.seed) >> 11) /
                     static_cast<double>(uint64_t{1} << 53);
    g.split.push_back(u < options.train_fraction                                 ? NodeSplit::kTrain
                      : u < options.train_fraction + options.validation_fraction ? NodeSplit::kValidation
                                                                                 : NodeSplit::kTest);
  }
  return g;
}

// ---- DocGraphSplitDataset ------------------------------------------------------------

DocGraphSplitDataset::DocGraphSplitDataset(std::shared_ptr<const DocGraph> graph, NodeSplit split)
    : graph_(std::move(graph)), split_(split) {
  COPPICE_CHECK(graph_ != nullptr, "DocGraphSplitDataset: the graph is null");
  std::vector<int64_t> t = graph_->labels.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i) {
    if (graph_->split[i] == split_) {
      ++nodes_;
    } else {
      t[i] = kIgnoredLabel;
    }
  }
  targets_ = from_vector(t);
}

Batch DocGraphSplitDataset::get_batch(const std::vector<int64_t>& indices) const {
  check_indices(indices);
  COPPICE_CHECK(indices.size() == 1, name(), ".get_batch: the graph is one example (full batch); got ", indices.size(),
                " indices (data.batch_size must be 1)");
  return Batch{graph_->features, targets_, indices};
}

std::string DocGraphSplitDataset::name() const {
  const char* s = split_ == NodeSplit::kTrain ? "train" : split_ == NodeSplit::kValidation ? "validation" : "test";
  return str_cat("DocGraph (", graph_->num_nodes(), " documents, ", s, " split: ", nodes_, ")");
}

}  // namespace coppice
