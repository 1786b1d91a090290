// Metrics and progress (train/metrics.h, train/progress.h): JSON lines that
// parse, model statistics, the progress line's text and its two modes, and
// the records run_training writes.
#include "train/metrics.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/moe.h"
#include "optim/sgd.h"
#include "tests/train/train_test_util.h"
#include "train/loop.h"
#include "train/progress.h"

namespace coppice {
namespace {

using testing_train::blob_loader;
using testing_train::make_mlp;
using testing_train::sparsify_weights;

std::string temp_path(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(base != nullptr ? base : "/tmp") / name).string();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A JSON syntax check (tensor/io/json.h reads integers only; metrics hold
// floating-point numbers).
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s) : s_(s) {}
  bool valid() {
    ws();
    if (!value()) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool lit(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  bool str() {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      if (s_[i_] == '\\') {
        ++i_;
        continue;
      }
      if (static_cast<unsigned char>(s_[i_]) < 0x20) return false;
      if (s_[i_] == '"') {
        ++i_;
        return true;
      }
    }
    return false;
  }
  bool num() {
    const char* b = s_.c_str() + i_;
    char* e = nullptr;
    std::strtod(b, &e);
    if (e == b || !(std::isdigit(static_cast<unsigned char>(*b)) || *b == '-')) return false;
    i_ += static_cast<size_t>(e - b);
    return true;
  }
  bool value() {
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return true;
      }
      for (;;) {
        ws();
        if (c == '{') {
          if (!str()) return false;
          ws();
          if (i_ >= s_.size() || s_[i_++] != ':') return false;
        }
        if (!value()) return false;
        ws();
        if (i_ >= s_.size()) return false;
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (s_[i_] == close) {
          ++i_;
          return true;
        }
        return false;
      }
    }
    if (c == '"') return str();
    if (lit("true") || lit("false") || lit("null")) return true;
    return num();
  }
  const std::string& s_;
  size_t i_ = 0;
};

bool valid_json(const std::string& s) { return JsonChecker(s).valid(); }

TEST(Metrics, JsonObjectIsValidJson) {
  JsonObject o;
  o.add("a", 1.5).add("b", int64_t{-3}).add("nan", std::nan("")).add("s", "q\"uote\n");
  o.add("m", std::map<std::string, double>{{"x", 0.25}}).add("t", true);
  EXPECT_TRUE(valid_json(o.str())) << o.str();
  EXPECT_FALSE(valid_json("{\"a\":}"));
  EXPECT_NE(o.str().find("\"nan\":null"), std::string::npos);
}

TEST(Metrics, ModelStatsCountSparseWeights) {
  auto model = make_mlp({10, 20, 5}, 1);
  ModelStats dense = model_stats(*model);
  EXPECT_EQ(dense.dense_parameters, 10 * 20 + 20 + 20 * 5 + 5);
  EXPECT_EQ(dense.linear_flops_dense, 2 * (10 * 20 + 20 * 5));
  EXPECT_EQ(dense.linear_flops_sparse, dense.linear_flops_dense);
  sparsify_weights(*model, 0.5, 3);
  ModelStats sparse = model_stats(*model);
  ASSERT_EQ(sparse.layers.size(), 2u);
  EXPECT_EQ(sparse.layers[0].format, "csr");
  EXPECT_EQ(sparse.layers[0].nnz, 100);
  EXPECT_DOUBLE_EQ(sparse.layers[0].density, 0.5);
  EXPECT_EQ(sparse.linear_flops_sparse, 2 * (100 + 50));
  EXPECT_EQ(sparse.stored_parameters, 100 + 20 + 50 + 5);
}

// A mixture of experts counts what a token runs: its router and top_k of
// the experts' two products.
TEST(Metrics, ModelStatsCountTheExpertsATokenRuns) {
  MoEOptions o;
  o.dim = 8;
  o.hidden = 16;
  o.experts = 4;
  o.top_k = 2;
  MoE moe(o);
  const ModelStats s = model_stats(moe);
  const int64_t router = 2 * 4 * 8, experts = 2 * 2 * (16 * 8) * 2;  // top_k of w1 and w2
  EXPECT_EQ(s.linear_flops_dense, router + experts);
  EXPECT_EQ(s.linear_flops_sparse, s.linear_flops_dense);
}

TEST(Progress, LineTextAndModes) {
  ProgressLine p;
  p.epoch = 2;
  p.step = 120;
  p.total = 1000;
  p.loss = 0.43125;
  p.accuracy = 0.875;
  p.samples_per_second = 5230;
  p.eta_seconds = 83;
  EXPECT_EQ(format_progress(p), "epoch 2 step 120/1000 (12%) loss 0.4313 acc 87.5% 5230 samples/s ETA 0:01:23");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");

  const std::string plain_path = temp_path("progress_plain.txt");
  std::FILE* f = std::fopen(plain_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter plain(f);  // a file: not a terminal
    EXPECT_FALSE(plain.interactive());
    plain.report(p);
    plain.report(p);
    plain.finish();
  }
  std::fclose(f);
  EXPECT_EQ(read_lines(plain_path).size(), 2u);

  const std::string tty_path = temp_path("progress_tty.txt");
  f = std::fopen(tty_path.c_str(), "w");
  {
    ProgressReporter tty(f, 1);
    tty.report(p);
    p.step = 121;
    tty.report(p);
    tty.finish();
  }
  std::fclose(f);
  const std::vector<std::string> lines = read_lines(tty_path);
  ASSERT_EQ(lines.size(), 1u);  // redrawn in place: carriage returns, one line end
  EXPECT_EQ(lines[0].front(), '\r');
  EXPECT_NE(lines[0].find("step 121/1000"), std::string::npos);
}

TEST(Metrics, RunTrainingWritesTrainEvalAndSummaryRecords) {
  auto model = make_mlp({12, 16, 3}, 1);
  const std::vector<std::string> layers = sparsify_weights(*model, 0.5, 2);
  Sgd opt(model->parameters(), SgdOptions{0.05, 0.9});
  MaskUpdaterConfig u;
  u.end_step = 10;
  u.interval = 4;
  u.growth = "gradient";
  MaskUpdater updater(u);
  for (const std::string& n : layers) updater.add_layer(n, model->parameter(n).value());
  TrainComponents c(*model, blob_loader(64, 12, 3, 16, 1), opt);
  c.validation = blob_loader(32, 12, 3, 16, 2, false);
  c.test = blob_loader(32, 12, 3, 16, 3, false);
  c.mask_updater = &updater;
  c.steps = 8;
  c.log_every = 2;
  c.eval_every = 4;
  c.metrics_path = temp_path("metrics.jsonl");
  const std::string progress_path = temp_path("progress.txt");
  c.progress_out = std::fopen(progress_path.c_str(), "w");
  ASSERT_NE(c.progress_out, nullptr);
  c.progress_every = 4;
  const TrainingSummary s = run_training(c);
  std::fclose(c.progress_out);
  // Plain lines: two progress lines, two evaluations, the summary.
  const std::vector<std::string> progress = read_lines(progress_path);
  ASSERT_GE(progress.size(), 5u);
  EXPECT_EQ(progress[0].rfind("epoch 0 step 4/8 (50%) loss ", 0), 0u) << progress[0];
  EXPECT_EQ(progress[1].rfind("eval (validation) at step 4: loss ", 0), 0u) << progress[1];
  bool summary_printed = false;
  for (const std::string& line : progress) summary_printed = summary_printed || line.rfind("test accuracy ", 0) == 0;
  EXPECT_TRUE(summary_printed);

  int train = 0, eval = 0, summary = 0, updates = 0;
  for (const std::string& line : read_lines(c.metrics_path)) {
    ASSERT_TRUE(valid_json(line)) << line;
    if (line.find("\"kind\":\"train\"") != std::string::npos) {
      ++train;
      for (const char* key : {"\"step\"", "\"epoch\"", "\"loss\"", "\"accuracy\"", "\"lr\"", "\"density\"",
                              "\"fc1.weight\"", "\"time_s\"", "\"samples_per_s\""}) {
        EXPECT_NE(line.find(key), std::string::npos) << key << " in " << line;
      }
      if (line.find("\"mask_update\"") != std::string::npos) {
        ++updates;
        EXPECT_NE(line.find("\"itop_rate\""), std::string::npos) << line;
      }
    } else if (line.find("\"kind\":\"eval\"") != std::string::npos) {
      ++eval;
    } else if (line.find("\"kind\":\"summary\"") != std::string::npos) {
      ++summary;
      EXPECT_NE(line.find("\"test_accuracy\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"linear_flops_sparse\""), std::string::npos) << line;
    }
  }
  EXPECT_EQ(train, 6);    // steps 2, 4, 6, 8 and the update steps 1 and 5 (t = 0, 4)
  EXPECT_EQ(updates, 2);  // t = 0 and t = 4 (logged at steps 1 and 5)
  EXPECT_EQ(eval, 2);
  EXPECT_EQ(summary, 1);
  const std::string text = format_summary(s);
  EXPECT_NE(text.find("test accuracy"), std::string::npos) << text;
  EXPECT_NE(text.find("fc1.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("Linear FLOPs"), std::string::npos) << text;
}

}  // namespace
}  // namespace coppice
