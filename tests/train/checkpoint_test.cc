// Checkpoints (train/checkpoint.h, train/checkpoint_files.h): a round trip
// restores weights, masks, optimizer and updater state and the trainer's
// position; keep_last prunes the run's own checkpoints; a partially written
// temporary file never replaces the last good checkpoint; corrupt, foreign or
// out-of-range files fail with an error naming the file and leave the
// components untouched; a resume from a directory takes the newest
// checkpoint of the run that started there last.
#include "train/checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/io/sparse_safetensors.h"
#include "tensor/error.h"
#include "tensor/io/safetensors.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint_files.h"

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

TrainerState some_state(int64_t step, const std::string& run_id = "00000000000000a1") {
  TrainerState t;
  t.run_id = run_id;
  t.fingerprint["optimizer.lr"] = "0.10000000000000001";
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
  EXPECT_EQ(*path, dir + "/" + checkpoint_file_name(17, "00000000000000a1"));
  EXPECT_EQ(*path, dir + "/ckpt-0000000017-00000000000000a1.safetensors");

  // Readable as a plain safetensors file with the documented names.
  auto plain = read_safetensors(*path);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_NE(plain->find("model.fc1.weight.crow_indices"), nullptr);
  EXPECT_NE(plain->find("model.fc1.weight.values"), nullptr);
  EXPECT_NE(plain->find("optim.fc1.weight.momentum_buffer"), nullptr);
  EXPECT_NE(plain->find("updater.fc1.weight.ever_active"), nullptr);
  EXPECT_EQ(plain->metadata.at("coppice.format.model.fc1.weight"), "csr");
  EXPECT_EQ(plain->metadata.at("trainer.step"), "17");
  EXPECT_EQ(plain->metadata.at("trainer.format"), "coppice-checkpoint-2");
  EXPECT_EQ(plain->metadata.at("trainer.run_id"), "00000000000000a1");
  EXPECT_EQ(plain->metadata.at("job.optimizer.lr"), "0.10000000000000001");
  EXPECT_EQ(plain->metadata.at("checksum.model.fc1.weight.values").size(), 8u);
  EXPECT_EQ(plain->metadata.at("checksum.metadata").size(), 8u);

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
  EXPECT_EQ(st->run_id, "00000000000000a1");
  EXPECT_EQ(st->fingerprint.at("optimizer.lr"), "0.10000000000000001");
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
    EXPECT_EQ(sb->tensors.at("momentum_buffer").to_vector<float>(),
              sa->tensors.at("momentum_buffer").to_vector<float>());
  }
  const auto ua = a.updater->state_tensors(), ub = b.updater->state_tensors();
  ASSERT_EQ(ua.size(), ub.size());
  for (const auto& [k, t] : ua) EXPECT_EQ(ub.at(k).to_vector<int64_t>(), t.to_vector<int64_t>()) << k;
}

TEST(Checkpoint, KeepLastPrunesTheOldestOfTheRunOnly) {
  const std::string dir = temp_dir("ckpt_keep");
  Fixture a = make_setup(1, true);
  // An older run's checkpoints, with higher steps than the new run reaches.
  for (int64_t step : {50, 60}) {
    ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(step, "00000000000000b0")).ok());
  }
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(step), 2).ok());
  }
  auto list = list_checkpoints(dir);
  ASSERT_TRUE(list.ok());
  std::vector<std::pair<int64_t, std::string>> got;
  for (const CheckpointEntry& e : *list) got.emplace_back(e.step, e.run_id);
  const std::vector<std::pair<int64_t, std::string>> want = {
      {15, "00000000000000a1"}, {20, "00000000000000a1"}, {50, "00000000000000b0"}, {60, "00000000000000b0"}};
  EXPECT_EQ(got, want);
  EXPECT_NE(other_runs_note(dir, "00000000000000a1").find("2 checkpoints of run 00000000000000b0 (steps 50..60)"),
            std::string::npos)
      << other_runs_note(dir, "00000000000000a1");
}

TEST(Checkpoint, APartialTemporaryFileNeverReplacesTheLastGoodOne) {
  const std::string dir = temp_dir("ckpt_partial");
  Fixture a = make_setup(1, true);
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5)).ok());
  const std::string good = dir + "/" + checkpoint_file_name(5, "00000000000000a1");
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
  EXPECT_FALSE(fs::exists(dir + "/" + checkpoint_file_name(10, "00000000000000a1")));
  std::ifstream again(good, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), good_bytes);

  auto latest = resolve_checkpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, good);
  Fixture b = make_setup(2, false);
  ASSERT_TRUE(load_checkpoint(latest->path, *b.model, *b.opt, b.updater.get()).ok());
  EXPECT_EQ(parameter_bits(*b.model), parameter_bits(*a.model));

  // The next successful write cleans the leftovers up.
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(10)).ok());
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// Another run's write in progress is never pruned: a temporary file is
// removed only by its writer, or once the writer (the pid in its name) is
// provably gone.
TEST(Checkpoint, PruningLeavesAnotherLiveWritersTemporaryFile) {
  const std::string dir = temp_dir("ckpt_tmp_owner");
  Fixture a = make_setup(1, true);
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5)).ok());
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string live_tmp =
      dir + "/.ckpt-0000000010-00000000000000b0.safetensors.tmp." + std::to_string(::getppid());
  const std::string dead_tmp = dir + "/.ckpt-0000000010-00000000000000c0.safetensors.tmp." + std::to_string(gone);
  std::ofstream(live_tmp) << "half";
  std::ofstream(dead_tmp) << "half";
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(10)).ok());
  EXPECT_TRUE(fs::exists(live_tmp));
  EXPECT_FALSE(fs::exists(dead_tmp));
}

// A checkpoint renamed to another step or run is refused naming both, so
// that a directory resume cannot take it for the newest.
TEST(Checkpoint, ANameMustMatchTheContents) {
  EXPECT_TRUE(check_checkpoint_name("d/ckpt-0000000004-00000000000000a1.safetensors", 4, "00000000000000a1").ok());
  EXPECT_TRUE(check_checkpoint_name("d/ckpt-0000000004.safetensors", 4, "00000000000000a1").ok());
  EXPECT_TRUE(check_checkpoint_name("d/best.safetensors", 4, "00000000000000a1").ok());
  const absl::Status later =
      check_checkpoint_name("d/ckpt-0000000900-00000000000000a1.safetensors", 4, "00000000000000a1");
  ASSERT_FALSE(later.ok());
  const std::string m(later.message());
  EXPECT_NE(m.find("named for step 900"), std::string::npos) << m;
  EXPECT_NE(m.find("holds step 4"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt-0000000004-00000000000000a1.safetensors"), std::string::npos) << m;
  EXPECT_FALSE(check_checkpoint_name("d/ckpt-0000000004-00000000000000b2.safetensors", 4, "00000000000000a1").ok());
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
  EXPECT_EQ(resolve_checkpoint(dir + "/empty_missing").status().code(), absl::StatusCode::kNotFound);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every checkpoint is a state a run can go on from: an inf or a NaN in a
// weight or in the optimizer's state is never written, and a file that holds
// one (checksums made afresh: seal_checkpoint) is refused naming the entry.
TEST(Checkpoint, NonfiniteValuesAreNeverWrittenNorRead) {
  const std::string dir = temp_dir("ckpt_nonfinite");
  {
    Fixture a = make_setup(1, true);
    Variable b = a.model->parameter("fc1.bias");
    b.value().data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
    auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
    ASSERT_FALSE(path.ok());
    EXPECT_NE(std::string(path.status().message()).find("'model.fc1.bias' holds non-finite values"), std::string::npos)
        << path.status().message();
  }
  {
    Fixture a = make_setup(1, true);
    Variable w = a.model->parameter("fc2.weight");
    a.opt->mutable_state(w).tensors.at("momentum_buffer").data<float>()[0] = std::numeric_limits<float>::infinity();
    auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
    ASSERT_FALSE(path.ok());
    EXPECT_NE(std::string(path.status().message()).find("momentum_buffer' holds non-finite values"), std::string::npos)
        << path.status().message();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "nothing is left behind";

  Fixture a = make_setup(1, true);
  auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
  ASSERT_TRUE(path.ok()) << path.status().message();
  absl::StatusOr<SafetensorsFile> file = read_safetensors(*path);
  ASSERT_TRUE(file.ok());
  // Resealed as it is, the file reads as before.
  const std::string same = dir + "/same.safetensors";
  absl::StatusOr<std::string> bytes = seal_checkpoint(*file);
  ASSERT_TRUE(bytes.ok());
  std::ofstream(same, std::ios::binary) << *bytes;
  EXPECT_TRUE(read_checkpoint(same).ok());
  // One value poisoned, checksums made afresh: a well-formed file that lies.
  for (const std::string entry : {"model.fc1.weight.values", "model.fc2.bias", "optim.fc1.weight.momentum_buffer"}) {
    absl::StatusOr<SafetensorsFile> copy = read_safetensors(*path);
    ASSERT_TRUE(copy.ok());
    const Tensor* t = copy->find(entry);
    ASSERT_NE(t, nullptr) << entry;
    t->data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    const std::string poisoned = dir + "/poisoned.safetensors";
    std::ofstream(poisoned, std::ios::binary | std::ios::trunc) << *seal_checkpoint(*copy);
    expect_load_error_naming(poisoned, "entry '" + entry + "' holds non-finite values");
  }
}

TEST(Checkpoint, AFlippedByteAnywhereIsRefused) {
  const std::string dir = temp_dir("ckpt_flip");
  Fixture a = make_setup(1, true);
  auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
  ASSERT_TRUE(path.ok());
  const std::string bytes = read_bytes(*path);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  // Every byte of the data (values, indices, state) and a sample of the
  // header's value bytes: each flip is caught, none loads.
  std::vector<size_t> offsets;
  for (size_t i = 8 + header; i < bytes.size(); i += 7) offsets.push_back(i);
  offsets.push_back(bytes.size() - 1);
  const size_t step_at = bytes.find("\"trainer.step\":\"5\"");
  ASSERT_NE(step_at, std::string::npos);
  offsets.push_back(step_at + 16);  // the 5 of trainer.step
  const size_t lr_at = bytes.find("\"job.optimizer.lr\":\"0.1");
  ASSERT_NE(lr_at, std::string::npos);
  offsets.push_back(lr_at + 22);
  const std::string flipped = dir + "/flipped.safetensors";
  for (size_t off : offsets) {
    std::string b = bytes;
    b[off] = static_cast<char>(b[off] ^ 0x10);
    write_bytes(flipped, b);
    auto file = read_checkpoint(flipped);
    ASSERT_FALSE(file.ok()) << "a flip at byte " << off << " of " << bytes.size() << " loaded";
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << file.status();
    EXPECT_NE(std::string(file.status().message()).find(flipped), std::string::npos) << file.status();
  }
  // A flipped value byte names the entry.
  std::string b = bytes;
  b.back() = static_cast<char>(b.back() ^ 1);
  write_bytes(flipped, b);
  expect_load_error_naming(flipped, "does not match its checksum");
}

TEST(Checkpoint, OutOfRangeTrainerFieldsAreRefused) {
  const std::string dir = temp_dir("ckpt_range");
  Fixture a = make_setup(1, true);
  for (const auto& [field, value] : std::vector<std::pair<std::string, int64_t>>{
           {"trainer.step", -5}, {"trainer.epoch", -1}, {"trainer.batch", -3}, {"trainer.lr_step", -2}}) {
    TrainerState st = some_state(5);
    if (field == "trainer.step") st.step = value;
    if (field == "trainer.epoch") st.epoch = value;
    if (field == "trainer.batch") st.batch = value;
    if (field == "trainer.lr_step") st.lr_step = value;
    auto bytes = serialize_checkpoint(*a.model, *a.opt, a.updater.get(), st);
    ASSERT_TRUE(bytes.ok());
    const std::string path = dir + "/range.safetensors";
    write_bytes(path, *bytes);
    expect_load_error_naming(path, str_cat("metadata '", field, "' is ", value, ", below its least value"));
  }
  TrainerState st = some_state(5);
  st.run_id = "not-a-run-id";
  auto bytes = serialize_checkpoint(*a.model, *a.opt, a.updater.get(), st);
  ASSERT_TRUE(bytes.ok());
  write_bytes(dir + "/id.safetensors", *bytes);
  expect_load_error_naming(dir + "/id.safetensors", "'trainer.run_id' is not a run id");
}

TEST(Checkpoint, AnOlderFormatIsRefusedSayingWhy) {
  const std::string dir = temp_dir("ckpt_v1");
  Fixture a = make_setup(1, true);
  auto plain = flatten_sparse_tensors(a.model->state_dict(), {{"trainer.format", "coppice-checkpoint-1"}});
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(write_safetensors(dir + "/old.safetensors", plain->tensors, plain->metadata).ok());
  expect_load_error_naming(dir + "/old.safetensors", "older Coppice (format coppice-checkpoint-1)");
}

TEST(Checkpoint, AMisfitChangesNothing) {
  const std::string dir = temp_dir("ckpt_misfit");
  Fixture a = make_setup(1, true);
  // Adam state saved, SGD loading: refused after the model was checked, so
  // the model must still hold its own weights and masks.
  Adam adam(a.model->parameters(), AdamOptions{});
  auto path = save_checkpoint(dir, *a.model, adam, a.updater.get(), some_state(5));
  ASSERT_TRUE(path.ok());
  Fixture b = make_setup(2, true);
  const std::vector<std::string> before = parameter_bits(*b.model);
  std::vector<Variable> params_before;
  for (const auto& [n, p] : b.model->named_parameters()) params_before.push_back(p);
  const auto updater_before = b.updater->state_tensors();
  auto st = load_checkpoint(*path, *b.model, *b.opt, b.updater.get());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.status().message()).find("optimizer 'adam', not 'sgd'"), std::string::npos) << st.status();
  EXPECT_EQ(parameter_bits(*b.model), before);
  size_t i = 0;
  for (const auto& [n, p] : b.model->named_parameters()) EXPECT_TRUE(p.is_same(params_before[i++])) << n;
  EXPECT_NE(b.opt->state(params_before[0]), nullptr);  // its own state kept

  // A dense parameter where the model has CSR: refused, naming it.
  Fixture dense = make_setup(1, true);
  auto dense_model = make_mlp({6, 8, 3}, 1);
  name_parameters(*dense_model);
  Sgd dense_opt(dense_model->parameters(), SgdOptions{0.1, 0.9});
  auto dense_path = save_checkpoint(dir + "/dense", *dense_model, dense_opt, a.updater.get(), some_state(5));
  ASSERT_TRUE(dense_path.ok());
  auto st2 = load_checkpoint(*dense_path, *b.model, *b.opt, b.updater.get());
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(std::string(st2.status().message()).find("is dense in the checkpoint but csr in the model"),
            std::string::npos)
      << st2.status();
  EXPECT_EQ(parameter_bits(*b.model), before);
}

TEST(Checkpoint, TheOptimizerKeepsItsHyperparametersWhenAsked) {
  const std::string dir = temp_dir("ckpt_hyper");
  Fixture a = make_setup(1, true);
  auto path = save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(5));
  ASSERT_TRUE(path.ok());
  auto file = read_checkpoint(*path);
  ASSERT_TRUE(file.ok()) << file.status();
  Fixture b = make_setup(2, false);
  b.opt->set_option(0, "momentum", 0.5);
  ASSERT_TRUE(apply_checkpoint(*file, *b.model, *b.opt, b.updater.get(), /*restore_hyperparameters=*/false).ok());
  EXPECT_EQ(b.opt->option(0, "momentum"), 0.5);
  Fixture c = make_setup(2, false);
  c.opt->set_option(0, "momentum", 0.5);
  ASSERT_TRUE(apply_checkpoint(*file, *c.model, *c.opt, c.updater.get()).ok());
  EXPECT_EQ(c.opt->option(0, "momentum"), 0.9);
}

// The newest checkpoint of the run that started in the directory last, never
// another run's.
TEST(Checkpoint, ResolvingADirectoryFollowsTheLastRun) {
  const std::string dir = temp_dir("ckpt_runs");
  Fixture a = make_setup(1, true);
  const std::string old_run = "00000000000000b0", new_run = "00000000000000c0";
  for (int64_t step : {100, 1000}) {
    ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(step, old_run)).ok());
  }
  // No marker, one run: its newest.
  auto r = resolve_checkpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, dir + "/" + checkpoint_file_name(1000, old_run));
  EXPECT_NE(r->why.find("only run"), std::string::npos) << r->why;

  // A fresh run started there and died before its first checkpoint: the
  // older run's final checkpoint is not taken.
  ASSERT_TRUE(write_run_marker(dir, {new_run, "", 1}).ok());
  r = resolve_checkpoint(dir);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("run " + new_run + ", the last to start in '" + dir + "', wrote no checkpoint"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("2 checkpoints of run " + old_run + " (steps 100..1000)"), std::string::npos) << msg;

  // It wrote one at step 10: that one, though the old run's are higher.
  ASSERT_TRUE(save_checkpoint(dir, *a.model, *a.opt, a.updater.get(), some_state(10, new_run)).ok());
  r = resolve_checkpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, dir + "/" + checkpoint_file_name(10, new_run));
  EXPECT_NE(r->why.find("the last run to start in"), std::string::npos) << r->why;

  // A run that resumed from the old run's step 100 and wrote nothing yet:
  // the checkpoint it resumed from.
  const std::string fork = "00000000000000d0";
  const std::string from = dir + "/" + checkpoint_file_name(100, old_run);
  ASSERT_TRUE(write_run_marker(dir, {fork, from, 2}).ok());
  r = resolve_checkpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, from);
  EXPECT_FALSE(is_newest_of_its_run(from, old_run));
  EXPECT_TRUE(is_newest_of_its_run(dir + "/" + checkpoint_file_name(1000, old_run), old_run));

  // Without a marker, two runs: refused, listing them.
  fs::remove(fs::path(dir) / kRunMarkerName);
  r = resolve_checkpoint(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("holds checkpoints of 2 runs"), std::string::npos) << r.status();

  // A damaged marker is an error naming it, not a guess.
  write_bytes(dir + "/" + kRunMarkerName, "{\"run_id\": 7}");
  r = resolve_checkpoint(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find(kRunMarkerName), std::string::npos) << r.status();
}

}  // namespace
}  // namespace coppice
