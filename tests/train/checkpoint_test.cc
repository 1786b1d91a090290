// Checkpoints (train/checkpoint.h): a round trip restores weights, masks,
// optimizer and updater state and the trainer's position; keep_last prunes;
// a partially written temporary file never replaces the last good
// checkpoint; corrupt or foreign files fail with an error naming the file.
#include "train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "optim/sgd.h"
#include "sparse/io/sparse_safetensors.h"
#include "tensor/io/safetensors.h"
#include "tests/train/train_test_util.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;
using testing_train::make_mlp;
using testing_train::parameter_bits;
using testing_train::sparsify_weights;
using testing_train::temp_dir;

struct Fixture {
  std::shared_ptr<MLP> model;
  std::vector<std::string> layers;
  std::unique_ptr<Sgd> opt;
  std::unique_ptr<MaskUpdater> updater;
};

// A sparse MLP with one SGD step taken (so there is momentum state).
Fixture make_setup(uint64_t seed, bool step) {
  Fixture s;
  s.model = make_mlp({6, 8, 3}, seed);
  s.layers = sparsify_weights(*s.model, 0.5, seed);
  name_parameters(*s.model);
  s.opt = std::make_unique<Sgd>(s.model->parameters(), SgdOptions{0.1, 0.9});
  MaskUpdaterConfig u;
  u.end_step = 100;
  u.interval = 10;
  u.growth = "random";
  s.updater = std::make_unique<MaskUpdater>(u);
  for (const std::string& n : s.layers) s.updater->add_layer(n, s.model->parameter(n).value());
  if (step) {
    Tensor x = from_vector(std::vector<float>(12, 0.5f), {2, 6});
    Variable loss = sum((*s.model)(Variable(x)));
    loss.backward();
    s.opt->step();
  }
  return s;
}

TrainerState some_state(int64_t step) {
  TrainerState t;
  t.step = step;
  t.epoch = 2;
  t.batch = 3;
  t.rng_seed = 42;
  t.rng_offset = 1234567;
  t.lr_step = step;
  t.data_seed = 9;
  t.extra["note"] = "hello";
  return t;
}

TEST(Checkpoint, RoundTripRestoresEverything) {
  const std::string dir = temp_dir("ckpt_roundtrip");
  Fixture a = make_setup(1, true);
  auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(17));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/" + checkpoint_file_name(17));

  // Readable as a plain safetensors file with the documented names.
  auto plain = read_safetensors(*path);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_NE(plain->find("model.fc1.weight.crow_indices"), nullptr);
  EXPECT_NE(plain->find("model.fc1.weight.values"), nullptr);
  EXPECT_NE(plain->find("optim.fc1.weight.momentum_buffer"), nullptr);
  EXPECT_NE(plain->find("updater.fc1.weight.ever_active"), nullptr);
  EXPECT_EQ(plain->metadata.at("coppice.format.model.fc1.weight"), "csr");
  EXPECT_EQ(plain->metadata.at("trainer.step"), "17");

  Fixture b = make_setup(2, false);  // other weights, other masks, no state
  auto st = load_checkpoint(*path, *b.model, *b.opt, b.updater.get());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->step, 17);
  EXPECT_EQ(st->epoch, 2);
  EXPECT_EQ(st->batch, 3);
  EXPECT_EQ(st->rng_seed, 42u);
  EXPECT_EQ(st->rng_offset, 1234567u);
  EXPECT_EQ(st->lr_step, 17);
  EXPECT_EQ(st->data_seed, 9u);
  EXPECT_EQ(st->extra.at("note"), "hello");
  EXPECT_EQ(parameter_bits(*b.model), parameter_bits(*a.model));
  for (const std::string& n : a.layers) {
    const Variable& pa = a.model->parameter(n);
    const Variable& pb = b.model->parameter(n);
    EXPECT_EQ(pb.value().format(), "csr");
    // The optimizer holds the loaded parameter, with the saved momentum.
    const ParamState* sa = a.opt->state(pa);
    const ParamState* sb = b.opt->state(pb);
    ASSERT_NE(sb, nullptr) << n;
    EXPECT_EQ(sb->step, sa->step);
    EXPECT_EQ(sb->tensors.at("momentum_buffer").to_vector<float>(), sa->tensors.at("momentum_buffer").to_vector<float>());
  }
  const auto ua = a.updater->state_tensors(), ub = b.updater->state_tensors();
  ASSERT_EQ(ua.size(), ub.size());
  for (const auto& [k, t] : ua) EXPECT_EQ(ub.at(k).to_vector<int64_t>(), t.to_vector<int64_t>()) << k;
}

TEST(Checkpoint, KeepLastPrunesTheOldest) {
  const std::string dir = temp_dir("ckpt_keep");
  Fixture a = make_setup(1, true);
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(step), 2).ok());
  }
  auto list = list_checkpoints(dir);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].first, 15);
  EXPECT_EQ((*list)[1].first, 20);
  auto latest = resolve_checkpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir + "/" + checkpoint_file_name(20));
}

TEST(Checkpoint, APartialTemporaryFileNeverReplacesTheLastGoodOne) {
  const std::string dir = temp_dir("ckpt_partial");
  Fixture a = make_setup(1, true);
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5)).ok());
  const std::string good = dir + "/" + checkpoint_file_name(5);
  std::ifstream in(good, std::ios::binary);
  const std::string good_bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  // A writer killed half-way through step 10's checkpoint, and one killed
  // half-way through rewriting step 5's.
  AtomicWriteOptions crash;
  crash.simulate_crash_after_bytes = 100;
  EXPECT_FALSE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(10), 0, crash).ok());
  EXPECT_FALSE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5), 0, crash).ok());
  int tmp_files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++tmp_files;
  }
  EXPECT_EQ(tmp_files, 2);
  EXPECT_FALSE(fs::exists(dir + "/" + checkpoint_file_name(10)));
  std::ifstream again(good, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), good_bytes);

  auto latest = resolve_checkpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, good);
  Fixture b = make_setup(2, false);
  ASSERT_TRUE(load_checkpoint(*latest, *b.model, *b.opt, b.updater.get()).ok());
  EXPECT_EQ(parameter_bits(*b.model), parameter_bits(*a.model));

  // The next successful write cleans the leftovers up.
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(10)).ok());
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

void expect_load_error_naming(const std::string& path, const std::string& fragment) {
  Fixture b = make_setup(2, false);
  auto st = load_checkpoint(path, *b.model, *b.opt, b.updater.get());
  ASSERT_FALSE(st.ok());
  const std::string msg(st.status().message());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
}

TEST(Checkpoint, CorruptOrForeignFilesFailNamingTheFile) {
  const std::string dir = temp_dir("ckpt_corrupt");
  Fixture a = make_setup(1, true);
  auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
  ASSERT_TRUE(path.ok());
  std::ifstream in(*path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const std::string truncated = dir + "/truncated.safetensors";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_load_error_naming(truncated, "cannot be read");

  const std::string garbage = dir + "/garbage.safetensors";
  std::ofstream(garbage, std::ios::binary) << "this is not a safetensors file at all";
  expect_load_error_naming(garbage, "cannot be read");

  const std::string foreign = dir + "/plain.safetensors";
  ASSERT_TRUE(write_safetensors(foreign, {{"x", from_vector(std::vector<float>{1, 2}, {2})}}).ok());
  expect_load_error_naming(foreign, "not a Coppice training checkpoint");

  // A checkpoint of another model.
  auto other = make_mlp({6, 5, 3}, 1);
  name_parameters(*other);
  Sgd opt(other->parameters(), SgdOptions{0.1});
  auto other_path = save_checkpoint(dir + "/other", *other, opt, nullptr, some_state(1));
  ASSERT_TRUE(other_path.ok());
  Fixture b = make_setup(2, false);
  auto st = load_checkpoint(*other_path, *b.model, *b.opt, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.status().message()).find(*other_path), std::string::npos) << st.status();

  EXPECT_FALSE(resolve_checkpoint(dir + "/empty_missing").ok());
}

}  // namespace
}  // namespace coppice
