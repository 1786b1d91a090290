// Writes the fuzz harnesses' seed corpora with the project's own writers, so
// they follow the current file formats (tests/fuzz/BUILD):
//
//   bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz
//
// writes tests/fuzz/corpus/<harness>/* and tests/fuzz/job_config.dict. Rerun
// it after a change of a format (checkpoints, safetensors, IDX, the job
// schema); corpus_test checks that the files named valid-* are still
// accepted and those named bad-* refused. Files are overwritten by name;
// other files in a corpus directory (say, a crash reproducer added as a
// regression input) are left alone. Everything is seeded: a rerun on the
// same code writes the same bytes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_io.h"
#include "tensor/io/safetensors.h"
#include "tensor/ops.h"
#include "tests/data/test_util.h"
#include "tests/fuzz/checkpoint_fixture.h"
#include "train/checkpoint.h"
#include "train/config_schema.h"

namespace coppice::fuzz {
namespace {

namespace fs = std::filesystem;

std::string g_root;  // the tests/fuzz directory

void write(const std::string& harness, const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::path(g_root) / "corpus" / harness;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("make_corpus: cannot write ", (dir / name).string());
}

std::string ok_or_die(const absl::StatusOr<std::string>& s) {
  if (!s.ok()) fail("make_corpus: ", s.status().ToString());
  return *s;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a literal header and data.
std::string raw_safetensors(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string flip_byte(std::string s, size_t at) {
  s[at % s.size()] = static_cast<char>(s[at % s.size()] ^ 0x5a);
  return s;
}

// ------------------------------------------------------------ safetensors --

void safetensors_corpus() {
  const Tensor f32 = from_vector(std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f}, {2, 3});
  const Tensor i64 = from_vector(std::vector<int64_t>{0, -1, 1LL << 40}, {3});
  const Tensor u8 = from_vector(std::vector<uint8_t>{0, 1, 254, 255}, {2, 2});
  const Tensor f64 = from_vector(std::vector<double>{3.0}, {});
  const Tensor b = from_vector(std::vector<uint8_t>{1, 0, 1}, {3}).to(DType::kBool);
  const Tensor i32 = from_vector(std::vector<int32_t>{7, -7}, {1, 2});
  const Tensor bf16 = f32.to(DType::kBF16);
  const Tensor f16 = f32.to(DType::kF16);
  const Tensor empty = Tensor::empty({0, 4}, DType::kF32);
  const std::string all = ok_or_die(serialize_safetensors({{"w", f32},
                                                           {"idx", i64},
                                                           {"pixels", u8},
                                                           {"scalar", f64},
                                                           {"flags", b},
                                                           {"i32", i32},
                                                           {"bf16", bf16},
                                                           {"f16", f16},
                                                           {"empty", empty}},
                                                          {{"format", "pt"}, {"note", "seed"}}));
  write("safetensors", "valid-all-dtypes.safetensors", all);
  write("safetensors", "valid-metadata-only.safetensors", ok_or_die(serialize_safetensors({}, {{"a", "b"}})));
  write("safetensors", "valid-one.safetensors", ok_or_die(serialize_safetensors({{"x", f32}})));
  // Near misses.
  write("safetensors", "bad-truncated.safetensors", all.substr(0, all.size() - 5));
  write("safetensors", "bad-length-prefix.safetensors", le64(1ULL << 62) + all.substr(8));
  write("safetensors", "bad-flipped-header.safetensors", flip_byte(all, 20));
  write("safetensors", "bad-overlap.safetensors",
        raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        std::string(8, '\0')));
  write("safetensors", "bad-dtype.safetensors",
        raw_safetensors(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0')));
  write("safetensors", "bad-shape-overflow.safetensors",
        raw_safetensors(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", ""));
  write("safetensors", "bad-duplicate-key.safetensors", raw_safetensors(R"({"__metadata__":{"k":"1","k":"2"}})", ""));
  write("safetensors", "bad-deep.safetensors",
        raw_safetensors(R"({"__metadata__":)" + std::string(200, '[') + std::string(200, ']') + "}", ""));
}

// ----------------------------------------------------- sparse safetensors --

void sparse_safetensors_corpus() {
  const Tensor dense = from_vector(std::vector<float>{1, 0, 0, 2, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 5, 0,
                                                      6, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 8, 0, 9, 0, 0},
                                   {4, 8});
  const std::vector<std::pair<std::string, FormatOptions>> formats = {{"coo", {}},
                                                                      {"csr", {}},
                                                                      {"csc", {}},
                                                                      {"bsr", FormatOptions::block(2)},
                                                                      {"blocked_ell", FormatOptions::block(2)},
                                                                      {"nm", FormatOptions::nm(2, 4)},
                                                                      {"masked", {}}};
  NamedTensors every;
  for (const auto& [format, options] : formats) {
    const Tensor t = to_format(dense, format, options);
    every.emplace_back("w_" + format, t);
    write("sparse_safetensors", "valid-" + format + ".safetensors",
          ok_or_die(serialize_sparse_safetensors({{"w", t}, {"bias", from_vector(std::vector<float>{1, 2}, {2})}})));
  }
  const std::string all = ok_or_die(serialize_sparse_safetensors(every, {{"user", "kept"}}));
  write("sparse_safetensors", "valid-every-format.safetensors", all);

  // Near misses: a CSR whose parts or metadata disagree.
  const Tensor crow = from_vector(std::vector<int32_t>{0, 1, 3}, {3});
  const Tensor col = from_vector(std::vector<int32_t>{2, 0, 9}, {3});  // 9 is out of range
  const Tensor val = from_vector(std::vector<float>{1, 2, 3}, {3});
  const std::map<std::string, std::string> csr_meta = {{"coppice.format.w", "csr"}, {"coppice.shape.w", "[2, 4]"}};
  write("sparse_safetensors", "bad-csr-index.safetensors",
        ok_or_die(
            serialize_safetensors({{"w.crow_indices", crow}, {"w.col_indices", col}, {"w.values", val}}, csr_meta)));
  write("sparse_safetensors", "bad-missing-part.safetensors",
        ok_or_die(serialize_safetensors({{"w.crow_indices", crow}, {"w.values", val}}, csr_meta)));
  write("sparse_safetensors", "bad-shape-metadata.safetensors",
        ok_or_die(serialize_safetensors({{"w.crow_indices", crow},
                                         {"w.col_indices", from_vector(std::vector<int32_t>{2, 0, 1}, {3})},
                                         {"w.values", val}},
                                        {{"coppice.format.w", "csr"}, {"coppice.shape.w", "[99999999999999999, 4]"}})));
  write("sparse_safetensors", "bad-format.safetensors",
        ok_or_die(
            serialize_safetensors({{"w.values", val}}, {{"coppice.format.w", "ellpack"}, {"coppice.shape.w", "[3]"}})));
  write("sparse_safetensors", "bad-truncated.safetensors", all.substr(0, all.size() / 2));
}

// ------------------------------------------------ level tensors in safetensors --

void level_safetensors_corpus() {
  const Tensor dense = from_vector(std::vector<float>{1, 0, 0, 2, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 5, 0,
                                                      6, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 8, 0, 9, 0, 0},
                                   {4, 8});
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  const std::vector<std::pair<std::string, FormatOptions>> formats = {{"coo", {}},
                                                                      {"csr", {}},
                                                                      {"bsr", FormatOptions::block(2)},
                                                                      {"blocked_ell", FormatOptions::block(2)},
                                                                      {"nm", FormatOptions::nm(2, 4)}};
  for (const auto& [format, options] : formats) {
    levels::add_level_tensor("w_" + format, levels::level_tensor_of(to_format(dense, format, options), "corpus"),
                             tensors, metadata);
  }
  const levels::LevelFormat hybrid =
      levels::parse_level_format("blocked 2x4 (dense, compressed, compressed(non-unique), singleton)", "corpus");
  levels::add_level_tensor("w_hybrid", levels::level_from_mask(dense, ne(dense, 0.0), hybrid, "corpus"), tensors,
                           metadata);
  const std::string all = ok_or_die(serialize_safetensors(tensors, metadata));
  write("level_safetensors", "valid-every-kind.safetensors", all);

  // Near misses: a CSR-like tensor whose parts, text or shape are wrong.
  const Tensor pos = from_vector(std::vector<int32_t>{0, 1, 3}, {3});
  const Tensor crd = from_vector(std::vector<int32_t>{2, 0, 9}, {3});  // 9 is out of range
  const Tensor val = from_vector(std::vector<float>{1, 2, 3}, {3});
  const std::map<std::string, std::string> csr = {{"coppice.levels.w", "(dense, compressed)"},
                                                  {"coppice.shape.w", "[2, 4]"}};
  write("level_safetensors", "bad-coordinate.safetensors",
        ok_or_die(serialize_safetensors({{"w.positions_1", pos}, {"w.coordinates_1", crd}, {"w.values", val}}, csr)));
  write("level_safetensors", "bad-missing-part.safetensors",
        ok_or_die(serialize_safetensors({{"w.positions_1", pos}, {"w.values", val}}, csr)));
  write("level_safetensors", "bad-declaration.safetensors",
        ok_or_die(serialize_safetensors({{"w.values", val}},
                                        {{"coppice.levels.w", "(dense, sparse)"}, {"coppice.shape.w", "[3]"}})));
  write("level_safetensors", "bad-overflow.safetensors",
        ok_or_die(serialize_safetensors({{"w.values", val}}, {{"coppice.levels.w", "(dense, dense, dense)"},
                                                              {"coppice.shape.w", "[2147483648, 2147483648, 4]"}})));
  write("level_safetensors", "bad-truncated.safetensors", all.substr(0, all.size() / 2));
}

// ------------------------------------------------------------- checkpoint --

void checkpoint_corpus() {
  TrainerState state;
  state.step = 12;
  state.epoch = 1;
  state.batch = 4;
  state.rng_seed = 3;
  state.rng_offset = 96;
  state.lr_step = 12;
  state.data_seed = 5;
  state.extra["note"] = "seed corpus";
  CheckpointComponents sgd = make_checkpoint_components(OptimizerKind::kSgd, true, 1, true);
  const std::string a = ok_or_die(serialize_checkpoint(*sgd.model, *sgd.optimizer, sgd.updater.get(), state));
  write("checkpoint", "valid-sgd-updater.safetensors", a);
  CheckpointComponents adam = make_checkpoint_components(OptimizerKind::kAdam, false, 2, true);
  const std::string b = ok_or_die(serialize_checkpoint(*adam.model, *adam.optimizer, nullptr, state));
  write("checkpoint", "valid-adam.safetensors", b);
  // Near misses: cut short, a flipped byte in the tensors' bytes (the end of
  // the file), and in the header.
  write("checkpoint", "bad-truncated.safetensors", a.substr(0, a.size() * 2 / 3));
  write("checkpoint", "bad-flipped-data.safetensors", flip_byte(a, a.size() - 3));
  write("checkpoint", "bad-flipped-header.safetensors", flip_byte(b, 40));
}

// -------------------------------------------------------------------- IDX --

void idx_corpus() {
  using testing::gzip;
  auto idx = [](uint8_t type, const std::vector<uint32_t>& dims, const std::string& data) {
    return testing::idx_bytes(type, dims, data);
  };
  std::string pixels;
  for (int i = 0; i < 2 * 3 * 3; ++i) pixels += static_cast<char>(i * 13);
  const std::string images = idx(0x08, {2, 3, 3}, pixels);
  const std::string labels = idx(0x08, {2}, std::string("\x03\x07", 2));
  std::string shorts;
  for (int i = 0; i < 4; ++i) shorts += std::string{static_cast<char>(0x80 >> i), static_cast<char>(i)};
  write("idx", "valid-images-u8.idx", images);
  write("idx", "valid-labels-u8.idx", labels);
  write("idx", "valid-i16.idx", idx(0x0B, {2, 2}, shorts));
  write("idx", "valid-f64.idx", idx(0x0E, {1}, std::string("\x40\x09\x21\xfb\x54\x44\x2d\x18", 8)));
  write("idx", "valid-empty-dim.idx", idx(0x0D, {0, 5}, ""));
  write("idx", "valid-images-u8.idx.gz", gzip(images));
  write("idx", "valid-two-members.idx.gz", gzip(images.substr(0, 10)) + gzip(images.substr(10)));
  // Near misses.
  write("idx", "bad-truncated-data.idx", images.substr(0, images.size() - 1));
  write("idx", "bad-trailing-bytes.idx", labels + "x");
  write("idx", "bad-huge-dims.idx", idx(0x0C, {65536, 65536, 65536}, ""));
  write("idx", "bad-zero-hides-huge-dims.idx", idx(0x0E, {0, 0xffffffff, 0xffffff10, 64}, ""));  // a fuzzer find
  write("idx", "bad-type.idx", idx(0x0A, {1}, "x"));
  // A fuzzer find: a gzip stream promising 1.8 GB of u8 over 20 bytes (the
  // reader allocated the promise before finding the data short).
  write("idx", "bad-huge-promise.idx.gz", gzip(idx(0x08, {2, 3, 0x12000003}, std::string(20, 'a'))));
  const std::string gz = gzip(images);
  write("idx", "bad-truncated.idx.gz", gz.substr(0, gz.size() - 6));
  write("idx", "bad-corrupt.idx.gz", flip_byte(gz, gz.size() - 6));
}

// ------------------------------------------------------------- job config --

// Small jobs that validate without any file but the installed datasets.
const std::map<std::string, std::string>& valid_jobs() {
  static const std::map<std::string, std::string> jobs = {
      {"valid-synthetic.yaml", R"(name: tiny
seed: 3
device: cpu
model: {name: mlp, options: {sizes: [8, 16, 4]}}
data:
  dataset: synthetic
  batch_size: 8
  synthetic: {examples: 64, test_examples: 16, features: 8, classes: 4, spread: 0.5}
optimizer: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true}
lr_schedule: {name: cosine, warmup_steps: 2, warmup_start_factor: 0.1}
training: {steps: 20}
logging: {progress: false, every_steps: 5}
)"},
      {"valid-rigl-csr.yaml", R"(#set optimizer.lr=0.05
#set sparsity.rules.0.sparsifier.sparsity=0.8
model: {name: mlp, options: {sizes: [8, 32, 4]}}
data: {dataset: synthetic, batch_size: 16, synthetic: {examples: 128, test_examples: 32, features: 8, classes: 4}}
sparsity:
  density: 0.3
  distribution: erk
  rules:
    - regex: 'fc[0-9]+\.weight'
      format: csr
      sparsifier: {name: magnitude, sparsity: 0.9}
optimizer: {name: adam, lr: 1.0e-3, beta1: 0.9, beta2: 0.99, eps: 1.0e-8, weight_decay: 0}
mask_update: {method: rigl, end_step: 12, interval: 4, drop_fraction: 0.3, drop_schedule: cosine}
training: {epochs: 2}
checkpoint: {dir: ckpt, every_steps: 10, keep_last: 2}
)"},
      {"valid-gmp-bsr.yaml", R"(model: {name: mlp, options: {sizes: [8, 16, 4]}}
data: {dataset: synthetic, synthetic: {examples: 32, test_examples: 8, features: 8, classes: 4}}
sparsity:
  rules: [{name: fc1.weight, format: bsr, block_rows: 4, block_cols: 2}]
  overrides: {fc1.weight: 0.5}
mask_update: {method: gmp, start_step: 2, end_step: 10, frequency: 2, initial_density: 1, final_density: 0.25}
lr_schedule: {name: step, step_size: 5, gamma: 0.5}
training: {steps: 12}
evaluation: {every_steps: 4, max_batches: 2}
precision: {dtype: bf16, loss_scale: none}
)"},
      {"valid-distributed.yaml", R"(#set distributed.world_size=2
model: {name: mlp, options: {sizes: [2, 8, 3]}}
data: {dataset: synthetic, batch_size: 4, validation_split: 0.25, drop_last: true}
optimizer: {name: adamw}
training: {steps: 5}
evaluation: {split: validation}
distributed: {backend: inproc, timeout_s: 30, bucket_mb: 1, sparse_exchange: dense, topk_fraction: 0.5}
)"},
      {"valid-outputs.yaml", R"(model: {name: mlp, options: {sizes: [8, 16, 4]}}
data: {dataset: synthetic, validation_split: 0.25, synthetic: {examples: 32, features: 8, classes: 4}}
evaluation: {split: validation}
sparsity:
  rules: [{regex: 'fc1\..*', format: nm, n: 2, m: 4}]
  outputs:
    - name: fc1
      forward: [{inline: {name: threshold, threshold: 0}, format: csr}]
      backward: [{external: {name: magnitude, sparsity: 0.5}, temporary_format: dense, format: coo}]
mask_update: {method: static}
training: {steps: 3}
)"},
  };
  return jobs;
}

void job_config_corpus() {
  for (const auto& [name, text] : valid_jobs()) write("job_config", name, text);
  for (const char* config : {"lenet300_rigl_90.yaml", "lenet5_bsr.yaml", "vit_sparse_attention.yaml"}) {
    std::ifstream in(std::string("configs/") + config, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty()) fail("make_corpus: cannot read configs/", config, " (run it through bazel run)");
    write("job_config", std::string("valid-config-") + config, text);
  }
  const std::string tiny = valid_jobs().at("valid-synthetic.yaml");
  // Near misses.
  write("job_config", "bad-unknown-key.yaml", tiny + "optimizer: {name: sgd, lrr: 0.1}\n");
  write("job_config", "bad-type.yaml", "#set training.steps=[1, 2]\n" + tiny);
  write("job_config", "bad-syntax.yaml", tiny.substr(0, tiny.size() / 2) + "\n  : - ][\n");
  write("job_config", "bad-negative.yaml", "#set data.batch_size=-8\n" + tiny);
  write("job_config", "bad-nan.yaml", "#set optimizer.lr=.nan\n" + tiny);
  write("job_config", "bad-regex.yaml", tiny + "sparsity: {rules: [{regex: '(fc[0-9', format: csr, density: 0.5}]}\n");
  write("job_config", "bad-anchors.yaml", "a: &a [1, 2]\nb: *a\n" + tiny);
  write("job_config", "bad-sizes.yaml", "#set model.options={sizes: [8, -16, 4]}\n" + tiny);
  write("job_config", "bad-nested.yaml", "model: " + std::string(100, '[') + std::string(100, ']') + "\n");
}

// A libFuzzer dictionary of the job file's words: every key of the schema
// (each part and the whole path, for "#set" lines), the choice values, and
// numbers at the edges of every type.
void job_config_dictionary() {
  std::set<std::string> words;
  for (const SchemaKey& k : job_schema()) {
    std::string path;
    for (char c : k.path) {
      if (c == '[' || c == ']') continue;
      path += c;
    }
    words.insert("#set " + path + "=");
    size_t start = 0;
    for (size_t dot = path.find('.');; dot = path.find('.', start)) {
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!part.empty() && part != "*") words.insert(part + ": ");
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  for (const char* v : {"mlp",
                        "lenet5",
                        "vit",
                        "char_lm",
                        "fashion_mnist",
                        "synthetic",
                        "text",
                        "csr",
                        "coo",
                        "csc",
                        "bsr",
                        "blocked_ell",
                        "nm",
                        "masked",
                        "dense",
                        "sgd",
                        "adam",
                        "adamw",
                        "rigl",
                        "set",
                        "snfs",
                        "gmp",
                        "static",
                        "cosine",
                        "step",
                        "constant",
                        "linear",
                        "erk",
                        "er",
                        "uniform",
                        "inproc",
                        "nccl",
                        "compact",
                        "bf16",
                        "f16",
                        "f32",
                        "dynamic",
                        "none",
                        "magnitude",
                        "threshold",
                        "movement",
                        "random",
                        "gradient",
                        "momentum",
                        "cpu",
                        "cuda",
                        "auto",
                        "true",
                        "false",
                        "validation",
                        "test",
                        "sizes",
                        "0",
                        "-1",
                        "1",
                        "0.5",
                        "1e300",
                        "-1e300",
                        ".nan",
                        ".inf",
                        "-.inf",
                        "2147483648",
                        "4294967296",
                        "9223372036854775807",
                        "9223372036854775808",
                        "-9223372036854775808",
                        "18446744073709551616",
                        "1e-320",
                        "0x7fffffff",
                        "&a ",
                        "*a",
                        "!!str ",
                        "!!binary ",
                        "<<: ",
                        "{",
                        "}",
                        "[",
                        "]",
                        "'",
                        "\"",
                        "- ",
                        "\n  ",
                        "#set "}) {
    words.insert(v);
  }
  std::string out = "# Generated by tests/fuzz/make_corpus.cc (libFuzzer -dict) from train/config_schema.h.\n";
  for (const std::string& w : words) {
    out += '"';
    for (unsigned char c : w) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c >= 0x7f) {
        const char* hex = "0123456789ABCDEF";
        out += str_cat("\\x", hex[c >> 4], hex[c & 15]);
      } else {
        out += static_cast<char>(c);
      }
    }
    out += "\"\n";
  }
  std::ofstream f(fs::path(g_root) / "job_config.dict", std::ios::trunc);
  f << out;
}

}  // namespace
}  // namespace coppice::fuzz

int main(int argc, char** argv) {
  using namespace coppice::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz\n");
    return 2;
  }
  g_root = argv[1];
  try {
    safetensors_corpus();
    sparse_safetensors_corpus();
    level_safetensors_corpus();
    checkpoint_corpus();
    idx_corpus();
    job_config_corpus();
    job_config_dictionary();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("make_corpus: wrote %s/corpus and %s/job_config.dict\n", g_root.c_str(), g_root.c_str());
  return 0;
}
