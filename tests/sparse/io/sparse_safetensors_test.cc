#include "sparse/io/sparse_safetensors.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "tensor/io/safetensors.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using namespace coppice::testing;

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return str_cat(dir ? dir : "/tmp", "/", name);
}

Tensor make(const std::string& format) {
  const Tensor d = random_sparse({8, 12}, 0.4, 7, DType::kF32, {2});
  if (format == "dense") return d;
  if (format == "bsr") return to_format(d, "bsr", FormatOptions::block(2, 3));
  if (format == "blocked_ell") return to_format(d, "blocked_ell", FormatOptions::block(4));
  if (format == "nm") return nm_compress(d, 2, 4);
  if (format == "masked") return sparse_from_threshold(d, 0.0, "masked");
  return to_format(d, format);
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, PartsAndValuesEqual) {
  const std::string format = GetParam();
  const Tensor t = make(format);
  const Tensor bias = random_sparse({12}, 1.0, 3);
  const std::string path = tmp_path("rt_" + format + ".safetensors");
  ASSERT_TRUE(write_sparse_safetensors(path, {{"w", t}, {"bias", bias}}, {{"note", "hi"}}).ok());
  auto file = read_sparse_safetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->tensors[0].first, "w");
  EXPECT_EQ(file->tensors[1].first, "bias");
  const Tensor& w = *file->find("w");
  EXPECT_EQ(w.format(), format);
  EXPECT_TRUE(same_parts(w, t));
  EXPECT_TRUE(exact_equal(to_dense(w), to_dense(t)));
  if (w.is_sparse()) {
    EXPECT_EQ(sparse_impl(w, "test").attributes(), sparse_impl(t, "test").attributes());
    EXPECT_EQ(nnz(w), nnz(t));
  }
  EXPECT_TRUE(exact_equal(*file->find("bias"), bias));
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"note", "hi"}}));
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip,
                         ::testing::Values("dense", "coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"));

TEST(SparseSafetensors, LayoutIsReadableAsPlainSafetensors) {
  const Tensor w = make("csr");
  auto bytes = serialize_sparse_safetensors({{"w", w}});
  ASSERT_TRUE(bytes.ok());
  auto plain = parse_safetensors(*bytes);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_NE(plain->find("w.crow_indices"), nullptr);
  ASSERT_NE(plain->find("w.col_indices"), nullptr);
  ASSERT_NE(plain->find("w.values"), nullptr);
  EXPECT_EQ(plain->metadata.at("coppice.format.w"), "csr");
  EXPECT_EQ(plain->metadata.at("coppice.shape.w"), "[8, 12]");
  auto bsr = parse_safetensors(*serialize_sparse_safetensors({{"b", make("bsr")}}));
  ASSERT_TRUE(bsr.ok());
  EXPECT_EQ(bsr->metadata.at("coppice.attr.b.block"), "2x3");
  auto nm = parse_safetensors(*serialize_sparse_safetensors({{"x.y", make("nm")}}));
  ASSERT_TRUE(nm.ok());
  EXPECT_EQ(nm->metadata.at("coppice.attr.x.y.n"), "2");
  EXPECT_EQ(nm->metadata.at("coppice.attr.x.y.m"), "4");
  auto back = parse_sparse_safetensors(*serialize_sparse_safetensors({{"x.y", make("nm")}}));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(same_parts(*back->find("x.y"), make("nm")));
}

TEST(SparseSafetensors, WriteRefusesCollisionsAndReservedMetadata) {
  EXPECT_FALSE(serialize_sparse_safetensors({{"w", make("csr")}, {"w.values", make("dense")}}).ok());
  EXPECT_FALSE(serialize_sparse_safetensors({{"w", make("csr")}, {"w", make("coo")}}).ok());
  EXPECT_FALSE(serialize_sparse_safetensors({{"w", make("csr")}}, {{"coppice.format.w", "coo"}}).ok());
}

// Rewrites the parts and metadata of a valid CSR file, then loads it.
absl::StatusOr<SparseSafetensorsFile> load_edited(NamedTensors entries, std::map<std::string, std::string> meta) {
  auto bytes = serialize_safetensors(entries, meta);
  if (!bytes.ok()) return bytes.status();
  return parse_sparse_safetensors(*bytes, "edited.safetensors");
}

void expect_error(const absl::StatusOr<SparseSafetensorsFile>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("edited.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
}

struct CsrFile {
  NamedTensors entries;
  std::map<std::string, std::string> meta;
};

CsrFile csr_file() {
  auto plain = parse_safetensors(*serialize_sparse_safetensors({{"w", make("csr")}}));
  return {plain->tensors, plain->metadata};
}

TEST(SparseSafetensorsCorrupt, MissingPart) {
  CsrFile f = csr_file();
  NamedTensors kept;
  for (auto& e : f.entries) {
    if (e.first != "w.col_indices") kept.push_back(e);
  }
  expect_error(load_edited(kept, f.meta), "missing part 'w.col_indices'");
}

TEST(SparseSafetensorsCorrupt, MissingShape) {
  CsrFile f = csr_file();
  f.meta.erase("coppice.shape.w");
  expect_error(load_edited(f.entries, f.meta), "coppice.shape.w");
}

TEST(SparseSafetensorsCorrupt, ShapeDisagrees) {
  CsrFile f = csr_file();
  f.meta["coppice.shape.w"] = "[9, 12]";  // crow_indices has 8 + 1 entries
  expect_error(load_edited(f.entries, f.meta), "crow_indices");
  f.meta["coppice.shape.w"] = "[8, -12]";
  expect_error(load_edited(f.entries, f.meta), "shape");
}

TEST(SparseSafetensorsCorrupt, ColumnOutOfRange) {
  CsrFile f = csr_file();
  for (auto& e : f.entries) {
    if (e.first == "w.col_indices") {
      std::vector<int64_t> cols = e.second.to_vector<int64_t>();
      ASSERT_FALSE(cols.empty());
      cols.back() = 12;  // == cols: out of range
      e.second = i32(cols, e.second.shape());
    }
  }
  expect_error(load_edited(f.entries, f.meta), "col_indices");
  // Narrowing the shape makes existing columns out of range too.
  CsrFile g = csr_file();
  g.meta["coppice.shape.w"] = "[8, 2]";
  expect_error(load_edited(g.entries, g.meta), "col_indices");
}

TEST(SparseSafetensorsCorrupt, UnknownFormat) {
  CsrFile f = csr_file();
  f.meta["coppice.format.w"] = "hyper_csr";
  expect_error(load_edited(f.entries, f.meta), "unknown format 'hyper_csr'");
}

TEST(SparseSafetensorsCorrupt, MissingOrBadAttribute) {
  auto plain = parse_safetensors(*serialize_sparse_safetensors({{"w", make("nm")}}));
  auto meta = plain->metadata;
  meta.erase("coppice.attr.w.m");
  expect_error(load_edited(plain->tensors, meta), "coppice.attr.w.m");
  meta["coppice.attr.w.m"] = "four";
  expect_error(load_edited(plain->tensors, meta), "attribute m");
}

// An attribute key is matched to its tensor by one lookup (the name is what
// precedes the last '.'), so a hostile key of a million dots costs one pass,
// not one lookup per dot (which took hours).
TEST(SparseSafetensorsCorrupt, AttributeKeyNamesNoTensor) {
  CsrFile f = csr_file();
  f.meta["coppice.attr.w" + std::string(1000000, '.')] = "1";
  auto r = load_edited(f.entries, f.meta);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("names no sparse tensor"), std::string::npos);
  CsrFile g = csr_file();
  g.meta["coppice.attr.w.block.rows"] = "2";  // attribute keys have no '.'
  r = load_edited(g.entries, g.meta);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("metadata 'coppice.attr.w.block.rows' names no sparse tensor"), std::string::npos)
      << r.status();
}

TEST(SparseSafetensorsCorrupt, FileErrorsPassThrough) {
  auto r = read_sparse_safetensors(tmp_path("does_not_exist.safetensors"));
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace coppice
