#include "train/config_schema.h"

#include <gtest/gtest.h>

#include <string>

#include "yaml-cpp/yaml.h"

namespace coppice {
namespace {

TEST(ConfigSchema, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("lr", ""), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("batch_size", "bacth_size"), 1u);
  EXPECT_EQ(edit_distance("adma", "adam"), 1u);
}

TEST(ConfigSchema, ClosestMatch) {
  const std::vector<std::string> keys = {"batch_size", "validation_split", "shuffle", "seq_len"};
  EXPECT_EQ(closest_match("batchsize", keys), "batch_size");
  EXPECT_EQ(closest_match("Batch-Size", keys), "batch_size");
  EXPECT_EQ(closest_match("shufle", keys), "shuffle");
  EXPECT_EQ(closest_match("validation", keys), "validation_split");  // contained
  EXPECT_EQ(closest_match("zzz", keys), "");
}

TEST(ConfigSchema, EveryKeyHasItsSection) {
  for (const SchemaKey& k : job_schema()) {
    if (k.path.empty()) continue;
    std::string parent = k.path;
    if (parent.size() >= 2 && parent.compare(parent.size() - 2, 2, "[]") == 0) {
      parent.resize(parent.size() - 2);
    } else {
      const size_t dot = parent.rfind('.');
      parent = dot == std::string::npos ? "" : parent.substr(0, dot);
    }
    const SchemaKey* p = find_schema_key(parent);
    ASSERT_NE(p, nullptr) << k.path;
    EXPECT_TRUE(p->type == KeyType::kSection || p->type == KeyType::kList || p->type == KeyType::kFreeMap) << k.path;
    EXPECT_FALSE(k.doc.empty()) << k.path;
  }
  EXPECT_NE(find_schema_key("optimizer.lr"), nullptr);
  EXPECT_EQ(find_schema_key("optimizer.lr")->type, KeyType::kDouble);
  const std::vector<std::string> top = schema_children("");
  EXPECT_NE(std::find(top.begin(), top.end(), "mask_update"), top.end());
}

TEST(ConfigSchema, UnknownKeyMessages) {
  EXPECT_EQ(unknown_key_message("optimizer", "optimizer", "lrr"),
            "optimizer.lrr: unknown key; did you mean 'optimizer.lr'?");
  EXPECT_EQ(unknown_key_message("", "", "lr"), "lr: unknown key; did you mean 'optimizer.lr' (in another section)?");
  EXPECT_EQ(unknown_key_message("sparsity.rules[1]", "sparsity.rules[]", "fromat"),
            "sparsity.rules[1].fromat: unknown key; did you mean 'sparsity.rules[1].format'?");
  const std::string far = unknown_key_message("training", "training", "xyzzy");
  EXPECT_EQ(far,
            "training.xyzzy: unknown key; known keys here: epochs, steps, cuda_graph, on_nonfinite, "
            "max_consecutive_skips");
}

TEST(ConfigSchema, OverrideSetsScalarsAndCreatesSections) {
  YAML::Node root = YAML::Load("optimizer: {name: sgd, lr: 0.1}\nsparsity: {rules: [{name: a}, {name: b}]}\n");
  ASSERT_TRUE(apply_override(root, "optimizer.lr=0.5").ok());
  EXPECT_DOUBLE_EQ(root["optimizer"]["lr"].as<double>(), 0.5);
  ASSERT_TRUE(apply_override(root, "checkpoint.dir=/tmp/x").ok());
  EXPECT_EQ(root["checkpoint"]["dir"].as<std::string>(), "/tmp/x");
  ASSERT_TRUE(apply_override(root, "sparsity.rules.1.density=0.25").ok());
  EXPECT_DOUBLE_EQ(root["sparsity"]["rules"][1]["density"].as<double>(), 0.25);
  ASSERT_TRUE(apply_override(root, "sparsity.rules[0].format=csr").ok());
  EXPECT_EQ(root["sparsity"]["rules"][0]["format"].as<std::string>(), "csr");
  // A free-form map takes the rest of the path as one key.
  ASSERT_TRUE(apply_override(root, "sparsity.overrides.fc3.weight=0.5").ok());
  EXPECT_DOUBLE_EQ(root["sparsity"]["overrides"]["fc3.weight"].as<double>(), 0.5);
  ASSERT_TRUE(apply_override(root, "model.options.sizes=[8, 4, 2]").ok());
  EXPECT_TRUE(root["model"]["options"]["sizes"].IsSequence());
  // The rest of the tree is untouched.
  EXPECT_EQ(root["optimizer"]["name"].as<std::string>(), "sgd");
  EXPECT_EQ(root["sparsity"]["rules"][1]["name"].as<std::string>(), "b");
}

TEST(ConfigSchema, OverrideOnEmptyDocument) {
  YAML::Node root;
  ASSERT_TRUE(apply_override(root, "training.steps=10").ok());
  EXPECT_EQ(root["training"]["steps"].as<int>(), 10);
}

TEST(ConfigSchema, OverrideErrors) {
  YAML::Node root = YAML::Load("optimizer: {lr: 0.1}\nsparsity: {rules: [{name: a}]}\n");
  struct Case {
    std::string assignment, message;
  };
  const Case cases[] = {
      {"optimizer.lr", "--set optimizer.lr: expected key.path=value"},
      {"optimizer.lr=abc", "--set optimizer.lr: optimizer.lr expects a number, got 'abc'"},
      {"training.steps=1.5", "--set training.steps: training.steps expects an integer, got '1.5'"},
      {"logging.progress=maybe",
       "--set logging.progress: logging.progress expects a boolean (true/false), got 'maybe'"},
      {"optimizer.lrr=0.1", "--set: optimizer.lrr: unknown key; did you mean 'optimizer.lr'?"},
      {"optimiser.lr=0.1", "--set: optimiser: unknown key; did you mean 'optimizer'?"},
      {"sparsity.rules.3.density=0.1",
       "--set sparsity.rules.3.density: sparsity.rules has 1 entry; index 3 is out of range"},
      {"sparsity.rules.x=1", "--set sparsity.rules.x: sparsity.rules is a list; expected an index, got 'x'"},
      {"optimizer.lr.x=1", "--set optimizer.lr.x: optimizer.lr is a number, not a section"},
      {"optimizer=3", "--set optimizer: optimizer expects a section (a map), got '3'"},
  };
  for (const Case& c : cases) {
    YAML::Node copy = YAML::Clone(root);
    const absl::Status s = apply_override(copy, c.assignment);
    EXPECT_EQ(std::string(s.message()), c.message) << c.assignment;
  }
  EXPECT_DOUBLE_EQ(root["optimizer"]["lr"].as<double>(), 0.1);
}

}  // namespace
}  // namespace coppice
