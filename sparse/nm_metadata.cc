// Metadata is computed on the host from the u8 indices (the pattern side is
// small and sequential, as in sparse/index_util.h); values never move.
#include "sparse/nm_metadata.h"

#include <string_view>
#include <vector>

#include "sparse/index_util.h"
#include "sparse/nm.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

constexpr int64_t kColsPerWord = 16;  // 4 groups of 4 columns, 4 bits each
constexpr int64_t kGroupsPerWord = 4;

// The indices of group `j` (0..3) of a metadata word: first in the low bits.
int64_t first_index(uint16_t word, int64_t j) { return (word >> (4 * j)) & 3; }
int64_t second_index(uint16_t word, int64_t j) { return (word >> (4 * j + 2)) & 3; }

void check_cols(int64_t cols, const Shape& shape, std::string_view op) {
  COPPICE_CHECK(cols % kColsPerWord == 0, op, ": cols = ", cols, " of shape ", shape_to_string(shape),
                " is not a multiple of 16 (one metadata word covers 16 columns)");
}

}  // namespace

Nm24Packed pack_nm24(const Tensor& nm) {
  constexpr std::string_view op = "pack_nm24";
  const NmImpl& s = nm_impl(nm, op);
  COPPICE_CHECK(s.n() == 2 && s.m() == 4 && nm.dim() == 2, op, ": needs a 2-D 2:4 tensor, got n:m = ", s.n(), ":",
                s.m(), " with dim ", nm.dim(), " (shape ", shape_to_string(nm.shape()), ")");
  const int64_t rows = nm.size(0), cols = nm.size(1), chunks = cols / kColsPerWord;
  check_cols(cols, nm.shape(), op);
  Tensor indices = s.indices().to(Device::cpu()).contiguous();
  const uint8_t* pos = indices.data<uint8_t>();
  Tensor metadata = Tensor::empty({rows, chunks * 2}, TensorOptions(DType::kU8, Device::cpu()));
  uint8_t* out = metadata.data<uint8_t>();
  // Word w covers groups 4w..4w+3 counted over the whole matrix, since a row
  // holds a whole number of words; a group's two slots are 2g and 2g + 1.
  for (int64_t w = 0; w < rows * chunks; ++w) {
    uint16_t word = 0;
    for (int64_t j = 0; j < kGroupsPerWord; ++j) {
      const int64_t g = w * kGroupsPerWord + j;
      const int64_t a = pos[2 * g], b = pos[2 * g + 1];
      // NmImpl guarantees it; a bad field would be undefined behaviour on the GPU.
      COPPICE_CHECK(a < b && b < 4, op, ": group ", g % (cols / 4), " of row ", g / (cols / 4), " holds indices (", a,
                    ", ", b, "), not two increasing indices in [0, 4)");
      word = static_cast<uint16_t>(word | ((a | (b << 2)) << (4 * j)));
    }
    out[2 * w] = static_cast<uint8_t>(word & 0xFF);  // little-endian, whatever the host's order
    out[2 * w + 1] = static_cast<uint8_t>(word >> 8);
  }
  return {s.values(), metadata.to(nm.device())};
}

Nm24Packed pack_nm24_transposed(const Tensor& nm) {
  constexpr std::string_view op = "pack_nm24_transposed";
  const NmImpl& s = nm_impl(nm, op);
  COPPICE_CHECK(s.n() == 2 && s.m() == 4 && nm.dim() == 2, op, ": needs a 2-D 2:4 tensor, got n:m = ", s.n(), ":",
                s.m(), " with dim ", nm.dim(), " (shape ", shape_to_string(nm.shape()), ")");
  const int64_t rows = nm.size(0), cols = nm.size(1);
  COPPICE_CHECK(rows % kColsPerWord == 0, op, ": rows = ", rows, " of shape ", shape_to_string(nm.shape()),
                " is not a multiple of 16 (the columns of the transpose, one metadata word per 16)");
  // The stored positions, transposed: mask_t[c, r].
  const std::vector<int64_t> pos = sparse_detail::host_i64(s.indices());
  std::vector<uint8_t> stored_t(static_cast<size_t>(rows * cols), 0);
  for (size_t k = 0; k < pos.size(); ++k) {
    const int64_t slot = static_cast<int64_t>(k), r = slot / (cols / 2), g = (slot % (cols / 2)) / 2;
    stored_t[static_cast<size_t>((g * 4 + pos[k]) * rows + r)] = 1;
  }
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; r += 4) {
      const uint8_t* group = &stored_t[static_cast<size_t>(c * rows + r)];
      const int count = group[0] + group[1] + group[2] + group[3];
      COPPICE_CHECK(count <= 2, op, ": column ", c, " stores ", count, " entries in rows ", r, "..", r + 3,
                    ", more than 2: the pattern is not transposable, so its transpose is not 2:4");
    }
  }
  const Tensor mask_t = from_vector(stored_t, {cols, rows}).to(DType::kBool).to(nm.device());
  const Tensor dense_t = nm_decompress(nm).t().contiguous();
  return pack_nm24(sparse_detail::nm_from_mask(dense_t, mask_t, 2, 4, op));
}

namespace {

// The columns of every entry that `metadata` (u8 [rows, cols / 8], checked)
// describes, row by row; throws naming `op`, the row and group of the first
// field whose indices do not strictly increase.
std::vector<int32_t> decode_columns(const Tensor& metadata, int64_t rows, int64_t cols, std::string_view op) {
  const int64_t chunks = cols / kColsPerWord;
  Tensor host = metadata.to(Device::cpu()).contiguous();
  const uint8_t* bytes = host.data<uint8_t>();
  std::vector<int32_t> columns(static_cast<size_t>(rows * cols / 2));
  for (int64_t w = 0; w < rows * chunks; ++w) {
    const auto word = static_cast<uint16_t>(bytes[2 * w] | (bytes[2 * w + 1] << 8));
    for (int64_t j = 0; j < kGroupsPerWord; ++j) {
      const int64_t g = w * kGroupsPerWord + j, a = first_index(word, j), b = second_index(word, j);
      const int64_t group = g % (cols / 4);
      COPPICE_CHECK(a < b, op, ": metadata of row ", g / (cols / 4), ", group ", group, " (columns ", group * 4, "..",
                    group * 4 + 3, ") holds indices (", a, ", ", b, "), which do not strictly increase");
      columns[static_cast<size_t>(2 * g)] = static_cast<int32_t>(group * 4 + a);
      columns[static_cast<size_t>(2 * g + 1)] = static_cast<int32_t>(group * 4 + b);
    }
  }
  return columns;
}

void check_metadata(const Tensor& metadata, const Shape& shape, std::string_view op) {
  check_dense(metadata, op, "metadata");
  COPPICE_CHECK(metadata.dtype() == DType::kU8, op, ": metadata must be u8 (little-endian u16 words), got ",
                dtype_name(metadata.dtype()));
  const Shape mshape{shape[0], shape[1] / kColsPerWord * 2};
  COPPICE_CHECK(metadata.shape() == mshape, op, ": metadata has shape ", shape_to_string(metadata.shape()),
                ", expected ", shape_to_string(mshape), " for shape ", shape_to_string(shape));
}

}  // namespace

std::vector<int32_t> nm24_columns(const Tensor& metadata, const Shape& shape) {
  constexpr std::string_view op = "nm24_columns";
  sparse_detail::check_shape(shape, 2, op);
  check_cols(shape[1], shape, op);
  check_metadata(metadata, shape, op);
  return decode_columns(metadata, shape[0], shape[1], op);
}

Tensor unpack_nm24(const Tensor& values, const Tensor& metadata, const Shape& shape) {
  constexpr std::string_view op = "unpack_nm24";
  sparse_detail::check_shape(shape, 2, op);
  const int64_t rows = shape[0], cols = shape[1], chunks = cols / kColsPerWord;
  check_cols(cols, shape, op);
  sparse_detail::check_values(values, op);
  check_dense(metadata, op, "metadata");
  COPPICE_CHECK(metadata.dtype() == DType::kU8, op, ": metadata must be u8 (little-endian u16 words), got ",
                dtype_name(metadata.dtype()));
  check_same_device({values, metadata}, op);
  const Shape vshape{rows, cols / 2}, mshape{rows, chunks * 2};
  COPPICE_CHECK(values.shape() == vshape && metadata.shape() == mshape, op, ": values and metadata have shapes ",
                shape_to_string(values.shape()), " and ", shape_to_string(metadata.shape()), ", expected ",
                shape_to_string(vshape), " and ", shape_to_string(mshape), " for shape ", shape_to_string(shape));
  const std::vector<int32_t> columns = decode_columns(metadata, rows, cols, op);
  std::vector<int64_t> pos(columns.size());
  for (size_t e = 0; e < columns.size(); ++e) pos[e] = columns[e] % 4;
  return sparse_nm(values, sparse_detail::index_tensor(pos, vshape, DType::kU8, values.device()), shape, 2, 4);
}

}  // namespace coppice
