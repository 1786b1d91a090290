// The limits on a job's YAML (train/yaml_limits.h): size, nesting checked on
// the text before yaml-cpp reads it (exact for every way YAML nests, blind to
// what cannot nest), nodes with aliases expanded; and that a job file or a
// --set value that breaks one is refused with one line naming it.
#include "train/yaml_limits.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"
#include "train/config.h"

namespace coppice {
namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string text_error(const std::string& text) {
  const absl::Status s = check_yaml_text(text, "t.yaml", "the job file");
  return s.ok() ? "" : std::string(s.message());
}

std::string tree_error(const std::string& text) {
  const absl::Status s = check_yaml_tree(YAML::Load(text), "t.yaml");
  return s.ok() ? "" : std::string(s.message());
}

std::string too_deep_at(int line, int column) {
  return str_cat("t.yaml: line ", line, ", column ", column, ": nested deeper than 64 levels (limit)");
}

// Each way YAML nests, as a document `depth` collections deep.
struct Style {
  const char* name;
  std::function<std::string(int depth)> document;
};

const std::vector<Style>& styles() {
  static const std::vector<Style> all = {
      {"flow lists", [](int d) { return std::string(d, '[') + std::string(d, ']'); }},
      {"flow lists under a key", [](int d) { return "a: " + std::string(d - 1, '[') + std::string(d - 1, ']'); }},
      {"flow maps", [](int d) { return repeat("{a: ", d) + "x" + std::string(d, '}'); }},
      {"single-pair maps in flow lists",
       [](int d) { return (d % 2 ? "b: " : "") + repeat("[a: ", d / 2) + "x" + std::string(d / 2, ']'); }},
      {"maps by indentation",
       [](int d) {
         std::string s;
         for (int i = 0; i < d; ++i) s += std::string(i, ' ') + "a:\n";
         return s;
       }},
      {"lists by indentation",
       [](int d) {
         std::string s;
         for (int i = 0; i < d; ++i) s += std::string(i, ' ') + "-\n";
         return s;
       }},
      {"compact lists", [](int d) { return repeat("- ", d) + "x\n"; }},
      {"complex keys", [](int d) { return repeat("? ", d) + "x\n"; }},
      {"lists in maps at the same column",
       [](int d) {  // a:\n- b:\n  - c: ... (two levels a line)
         std::string s = "a:\n";
         int depth = 1;
         for (int i = 0; depth + 2 <= d; ++i, depth += 2) s += std::string(2 * i, ' ') + "- a:\n";
         if (depth < d) s += std::string(2 * ((depth - 1) / 2), ' ') + "- x\n";
         return s;
       }},
      {"maps in compact lists", [](int d) { return repeat("- ", d - 1) + "a: x\n"; }},
      {"multi-line flows with comments",
       [](int d) {
         std::string s = "a: # [[[[\n";
         for (int i = 1; i < d; ++i) s += "  [ # ]]]\n";
         return s + std::string(d - 1, ']') + "\n";
       }},
  };
  return all;
}

int tree_depth(const YAML::Node& n) {
  int deepest = 0;
  for (auto it = n.begin(); it != n.end(); ++it) {
    deepest = std::max(deepest, n.IsMap() ? std::max(tree_depth(it->first), tree_depth(it->second)) : tree_depth(*it));
  }
  return n.IsMap() || n.IsSequence() ? deepest + 1 : 0;
}

// The scan counts exactly what yaml-cpp builds: a document at the limit
// passes both checks, one a level deeper fails both.
TEST(YamlLimitsTest, NestingAtTheLimitInEveryStyle) {
  for (const Style& style : styles()) {
    for (int depth : {kMaxYamlDepth, kMaxYamlDepth + 1}) {
      const std::string doc = style.document(depth);
      YAML::Node root = YAML::Load(doc);
      ASSERT_EQ(tree_depth(root), depth) << style.name << ":\n" << doc;
      const bool ok = depth <= kMaxYamlDepth;
      EXPECT_EQ(text_error(doc).empty(), ok) << style.name << ": " << text_error(doc);
      EXPECT_EQ(tree_error(doc).empty(), ok) << style.name << ": " << tree_error(doc);
    }
  }
}

// Random trees around the limit, written by yaml-cpp's emitter in random
// styles (block and flow, compact lists, complex keys, quoted and literal
// scalars full of brackets, dashes and '#'): the scan refuses exactly those
// deeper than the limit.
void emit_random(YAML::Emitter& out, std::mt19937& rng, int depth, int target) {
  static const char* kParts[] = {"a", "fc1.weight", "[", "]", "{",  "}",  "- ", "#",  " #x", ": ",  "'",    "\"", "\\",
                                 "?", ",",          "|", ">", "&a", "*b", "!t", "\n", "  ",  "x:y", "--- ", "..."};
  if (depth >= target || (depth > 3 && rng() % 5 == 0)) {
    std::string s;
    for (int i = static_cast<int>(rng() % 8); i > 0; --i) s += kParts[rng() % (sizeof(kParts) / sizeof(kParts[0]))];
    const int style = static_cast<int>(rng() % 4);
    if (style == 1) out << YAML::Literal;
    if (style == 2) out << YAML::SingleQuoted;
    if (style == 3) out << YAML::DoubleQuoted;
    out << s;
    return;
  }
  const bool map = rng() % 2 == 0;
  out << (rng() % 3 == 0 ? YAML::Flow : YAML::Block) << (map ? YAML::BeginMap : YAML::BeginSeq);
  for (int i = 0, kids = 1 + static_cast<int>(rng() % 3); i < kids; ++i) {
    const int child_target = i == 0 ? target : std::min(target, depth + 1 + static_cast<int>(rng() % 5));
    if (map) {
      out << YAML::Key;
      if (rng() % 15 == 0) {
        emit_random(out, rng, depth + 1, std::min(target, depth + 3));
      } else {
        out << str_cat("k", i);
      }
      out << YAML::Value;
    }
    emit_random(out, rng, depth + 1, child_target);
  }
  out << (map ? YAML::EndMap : YAML::EndSeq);
}

TEST(YamlLimitsTest, ScanAgreesWithTheParserOnRandomDocuments) {
  std::mt19937 rng(15);
  int checked = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    YAML::Emitter out;
    emit_random(out, rng, 0, kMaxYamlDepth - 5 + static_cast<int>(rng() % 10));
    const std::string doc = out.c_str();
    YAML::Node root;
    try {
      root = YAML::Load(doc);
    } catch (const YAML::Exception&) {
      continue;  // the emitter writes a few keys it cannot read back
    }
    ++checked;
    const bool deep = tree_depth(root) > kMaxYamlDepth;
    ASSERT_EQ(text_error(doc).empty(), !deep) << "depth " << tree_depth(root) << ":\n" << doc;
  }
  EXPECT_GT(checked, 900);
}

TEST(YamlLimitsTest, NestingMessagesSayWhere) {
  EXPECT_EQ(text_error("a: " + std::string(100000, '[')), too_deep_at(1, 67));
  EXPECT_EQ(text_error(repeat("{a: ", 100000)), too_deep_at(1, 257));
  EXPECT_EQ(text_error(repeat("- ", 100000) + "x"), too_deep_at(1, 129));
  std::string indented;
  for (int i = 0; i < 1000; ++i) indented += std::string(i, ' ') + "a:\n";
  EXPECT_EQ(text_error(indented), too_deep_at(65, 65));  // the key that opens the 65th map
  // The tree says where the node it could not open was written.
  EXPECT_EQ(tree_error("a:\n  b: " + std::string(80, '[') + std::string(80, ']')), too_deep_at(2, 68));
}

// Brackets, dashes and indentation that open nothing are not counted.
TEST(YamlLimitsTest, WhatCannotNestIsSkipped) {
  const std::string deep(1000, '[');
  const std::vector<std::string> fine = {
      "a: '" + deep + "'\n",                        // single-quoted
      "a: 'it''s " + deep + "'\n",                  // '' inside
      "a: \"" + repeat("\\\"[", 1000) + "\"\n",     // escaped quotes inside
      "a: \"multi\n  line " + deep + "\"\nb: 1\n",  // across lines
      "# " + deep + "\na: 1 # " + deep + "\n",      // comments
      "a: x" + deep + "\n",                         // inside a plain scalar
      "a: ['" + deep + "', \"" + deep + "\"]\n",    // quoted in a flow
      "a: [b, # " + deep + "\n  c]\n",              // a comment inside a flow
      "a: |\n" +
          [] {  // a block scalar's lines
            std::string s;
            for (int i = 0; i < 200; ++i) s += "  " + std::string(i, ' ') + "- a: [[[\n";
            return s;
          }() +
          "b: 1\n",
      "a: >-\n  " + deep + "\n\n  - - - - x\nb: [1]\n",
      "--- " + std::string(60, '[') + std::string(60, ']') + "\n...\n--- " + std::string(60, '[') + "\n",
  };
  for (const std::string& doc : fine) EXPECT_EQ(text_error(doc), "") << doc.substr(0, 200);
  // After a block scalar ends, what follows counts again.
  EXPECT_EQ(text_error("a: |\n  - - - -\nb: " + std::string(100, '[')), too_deep_at(3, 67));
}

// Aliases share nodes in yaml-cpp; walking them expands them. The walk stops
// at the node limit, and at the depth limit for an alias inside what it names.
TEST(YamlLimitsTest, AliasesAreBounded) {
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 20; ++i)
    laughs += str_cat("a", i, ": &a", i, " [", repeat(str_cat("*a", i - 1, ", "), 9), "*a", i - 1, "]\n");
  EXPECT_EQ(text_error(laughs), "");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(tree_error(laughs), "t.yaml: more than 100000 nodes (limit; an alias counts as a copy of what it names)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_EQ(tree_error("a: &a [*a]\n"), too_deep_at(1, 4));
  // Nesting through aliases: 40 levels named, used 30 levels down.
  EXPECT_NE(tree_error("a: &a " + std::string(40, '[') + std::string(40, ']') + "\nb: " + std::string(30, '[') + "*a" +
                       std::string(30, ']') + "\n")
                .find("nested deeper than 64 levels (limit)"),
            std::string::npos);
  // Legitimate sharing passes.
  EXPECT_EQ(tree_error("m: &m {name: magnitude, sparsity: 0.9}\nrules: [{sparsifier: *m}, {sparsifier: *m}]\n"), "");
}

TEST(YamlLimitsTest, NodeLimit) {
  // The root map, its key and the list: three nodes besides the items.
  const auto list = [](size_t items) { return "a: [" + repeat("1,", static_cast<int>(items) - 1) + "1]\n"; };
  EXPECT_EQ(tree_error(list(kMaxYamlNodes - 3)), "");
  EXPECT_EQ(tree_error(list(kMaxYamlNodes - 2)),
            "t.yaml: more than 100000 nodes (limit; an alias counts as a copy of what it names)");
}

// The scan is one pass: a megabyte of anything costs milliseconds (a scan
// that rescanned a line per character would take hours on these).
TEST(YamlLimitsTest, ScanIsLinear) {
  const size_t n = kMaxJobYamlBytes - 8;
  const std::vector<std::string> texts = {
      std::string(n, '\t') + "a: 1",
      "a: '" + std::string(n, '\'') + "'",
      "a: \"" + repeat("\\\"", n / 2) + "\"",
      "a: |\n" + repeat("  x\n", n / 4),
      std::string(n, ' ') + "a",
      repeat("a: 1\n", n / 5),
      "a: [" + repeat("1,", n / 2) + "1]",
      repeat("- x\n", n / 4),
      std::string(n, '\n'),
      "a: x" + repeat(":x", n / 2),
  };
  for (const std::string& text : texts) {
    const auto start = std::chrono::steady_clock::now();
    (void)check_yaml_text(text, "t.yaml", "the job file");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0)
        << text.substr(0, 40);
  }
}

TEST(YamlLimitsTest, SizeLimit) {
  std::string doc = "a: 1\n#";
  doc.resize(kMaxJobYamlBytes, 'x');
  EXPECT_EQ(text_error(doc), "");
  doc += 'x';
  EXPECT_EQ(text_error(doc), "t.yaml: the job file is 1048577 bytes, over the limit of 1048576 bytes (1 MiB)");
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return str_cat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST(YamlLimitsTest, ReadsNoFurtherThanTheLimit) {
  absl::StatusOr<std::string> r = read_job_yaml_file("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "/dev/zero: is a character device, not a regular file");
  const std::string path = temp_path("big.yaml");
  std::ofstream(path) << "a: 1\n" << std::string(3 << 20, '#');
  r = read_job_yaml_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), path + ": the job file is 3145733 bytes, over the limit of 1048576 bytes (1 MiB)");
  std::ofstream(path) << "a: 1\n";
  r = read_job_yaml_file(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "a: 1\n");
  std::remove(path.c_str());
  EXPECT_EQ(read_job_yaml_file(temp_path("none.yaml")).status().code(), absl::StatusCode::kNotFound);
}

TEST(YamlLimitsTest, SpecialFilesAreRefusedWithoutBlocking) {
  ::alarm(20);  // a FIFO that blocked would end the test here
  const std::string fifo = temp_path("fifo.yaml");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  absl::StatusOr<std::string> r = read_job_yaml_file(fifo);
  EXPECT_EQ(r.status().message(), fifo + ": is a FIFO, not a regular file");
  EXPECT_EQ(read_job_yaml_file(temp_path("")).status().message(),
            temp_path("") + ": is a directory, not a regular file");
  std::remove(fifo.c_str());
  ::alarm(0);
}

// Through the job loader: one line naming the file or the --set, and the limit.
TEST(YamlLimitsTest, JobsAreRefusedWithOneLine) {
  const std::string base =
      "model: {name: mlp, options: {sizes: [8, 3]}}\n"
      "data: {dataset: synthetic, synthetic: {examples: 64, test_examples: 32, features: 8, classes: 3}}\n"
      "training: {steps: 10}\n";
  ASSERT_TRUE(parse_job_config(base, {}, "job.yaml").ok()) << parse_job_config(base, {}, "job.yaml").status();
  auto error = [&](const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    absl::StatusOr<JobConfig> job = parse_job_config(yaml, overrides, "job.yaml");
    return job.ok() ? std::string("accepted") : std::string(job.status().message());
  };
  EXPECT_EQ(error(base + "x: " + std::string(100000, '[')),
            "job.yaml: line 4, column 67: nested deeper than 64 levels (limit)");
  EXPECT_EQ(error(base + repeat("- ", 100000)), "job.yaml: line 4, column 127: nested deeper than 64 levels (limit)");
  EXPECT_EQ(error(base + "#" + std::string(kMaxJobYamlBytes, 'x')),
            str_cat("job.yaml: the job file is ", base.size() + 1 + kMaxJobYamlBytes,
                    " bytes, over the limit of 1048576 bytes (1 MiB)"));
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 20; ++i)
    laughs += str_cat("a", i, ": &a", i, " [", repeat(str_cat("*a", i - 1, ", "), 9), "*a", i - 1, "]\n");
  EXPECT_EQ(error(laughs + base),
            "job.yaml: more than 100000 nodes (limit; an alias counts as a copy of what it names)");
  // A --set value is counted from where it goes (model.options: two levels down).
  EXPECT_EQ(error(base, {"model.options={sizes: " + std::string(100000, '[') + "}"}),
            "--set model.options: line 1, column 70: nested deeper than 64 levels (limit)");
  EXPECT_EQ(error(base, {"model.options=" + repeat("- ", 100000)}),
            "--set model.options: line 1, column 125: nested deeper than 64 levels (limit)");
  EXPECT_EQ(error(base, {"model.options=" + std::string(kMaxJobYamlBytes + 1, 'x')}),
            "--set model.options: the value is 1048577 bytes, over the limit of 1048576 bytes (1 MiB)");
  EXPECT_EQ(error(base, {"model.options={a: &a [x, x], b: &b [*a, *a, *a], c: [*b, *a]}"}),
            "model.options.a: unknown option of mlp; known: dtype, seed, sizes");
}

}  // namespace
}  // namespace coppice
