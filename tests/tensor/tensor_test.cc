// Tests for tensor/tensor.cc: the handle, views (which share storage), copies
// (which do not), dtype conversion, item/to_vector and printing.
#include <cmath>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// 0, 1, 2, ... in `shape`, f32.
Tensor iota(const Shape& shape, DType dtype = DType::kF32) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, dtype).reshape(shape);
}

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().data() == b.storage().data(); }

TEST(Tensor, EmptyIsContiguousDense) {
  Tensor t = Tensor::empty({2, 3, 4}, TensorOptions(DType::kF64));
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.is_dense());
  EXPECT_FALSE(t.is_sparse());
  EXPECT_EQ(t.layout(), Layout::kDense);
  EXPECT_EQ(t.format(), "dense");
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.offset(), 0);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.storage().nbytes(), 24 * sizeof(double));
  EXPECT_EQ(t.options().dtype, DType::kF64);
  EXPECT_EQ(layout_name(Layout::kCsr), "csr");
  EXPECT_ERROR_NAMING(t.size(3), "size: dim 3 is out of range");
  EXPECT_ERROR_NAMING(Tensor::empty({2, -1}), "empty: negative size");
}

TEST(Tensor, UndefinedHandle) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_ERROR_NAMING(u.shape(), "undefined Tensor");
  EXPECT_EQ(u.to_string(), "tensor(undefined)");
  EXPECT_ERROR_NAMING(check_dense(u, "myop", "weight"), "myop: weight is an undefined tensor");
}

TEST(Tensor, CopiesShareHandlesCloneDoesNot) {
  Tensor a = iota({4});
  Tensor b = a;  // the same impl
  EXPECT_TRUE(b.is_same(a));
  b.fill_(7);
  EXPECT_EQ(vals(a), (std::vector<double>(4, 7.0)));
  Tensor c = a.clone();
  EXPECT_FALSE(c.is_same(a));
  EXPECT_FALSE(shares_storage(a, c));
  c.fill_(1);
  EXPECT_EQ(vals(a), (std::vector<double>(4, 7.0)));
  EXPECT_TRUE(a.contiguous().is_same(a));  // already contiguous: itself
}

TEST(Tensor, ViewSharesStorage) {
  Tensor a = iota({2, 3, 4});
  Tensor v = a.view({6, 4});
  EXPECT_TRUE(shares_storage(a, v));
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(a.view({-1}).shape(), (Shape{24}));
  EXPECT_EQ(a.view({2, -1, 2}).shape(), (Shape{2, 6, 2}));
  v.select(0, 5).fill_(-1);  // last row of the view is a[1, 2, :]
  EXPECT_EQ(vals(a.select(0, 1).select(0, 2)), (std::vector<double>(4, -1.0)));
  EXPECT_ERROR_NAMING(a.view({5, 5}), "view: shape [5, 5] does not hold 24 elements");
  EXPECT_ERROR_NAMING(a.view({-1, -1}), "view: only one dimension may be -1");
  EXPECT_ERROR_NAMING(a.transpose(0, 2).view({24}), "use reshape");
  // A view across a dim that is contiguous in memory works even when the whole is not.
  Tensor sliced = iota({4, 6}).slice(0, 0, 4, 2);  // rows 0 and 2, each contiguous
  EXPECT_EQ(sliced.view({2, 2, 3}).strides(), (Shape{12, 3, 1}));
}

TEST(Tensor, ReshapeViewsWhenItCanAndCopiesWhenItMust) {
  Tensor a = iota({3, 4});
  Tensor r = a.reshape({4, 3});
  EXPECT_TRUE(shares_storage(a, r));
  Tensor t = a.t();
  Tensor rt = t.reshape({12});
  EXPECT_FALSE(shares_storage(a, rt));
  EXPECT_EQ(vals(rt), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(a.flatten().shape(), (Shape{12}));
  EXPECT_EQ(iota({2, 3, 4}).flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(iota({2, 3, 4}).flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(scalar_tensor(5).flatten().shape(), (Shape{1}));
  // A 0-d tensor views as any shape of ones, and back.
  Tensor s = scalar_tensor(5);
  EXPECT_EQ(s.view({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_TRUE(shares_storage(s, s.reshape({1})));
  EXPECT_EQ(s.reshape({1}).reshape({}).item(), 5.0);
  EXPECT_EQ(from_vector<float>({7}).dim(), 0);  // one value, no shape: 0-d
  EXPECT_ERROR_NAMING(iota({2, 3, 4}).flatten(2, 1), "flatten");
}

TEST(Tensor, TransposeAndPermute) {
  Tensor a = iota({2, 3});
  Tensor t = a.t();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(vals(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor b = iota({2, 3, 4});
  Tensor p = b.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  // p[i, j, k] = b[j, k, i] = 12 j + 4 k + i
  std::vector<double> v = vals(p);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(v[(i * 2 + j) * 3 + k], 12 * j + 4 * k + i);
  EXPECT_EQ(vals(b.transpose(-1, 0).contiguous()), vals(b.permute({2, 1, 0})));
  EXPECT_ERROR_NAMING(b.permute({0, 0, 1}), "permute: dim 0 appears twice");
  EXPECT_ERROR_NAMING(b.permute({0, 1}), "permute");
  EXPECT_ERROR_NAMING(b.t(), "t: expected a 2-D tensor");
}

TEST(Tensor, SliceNarrowSelect) {
  Tensor a = iota({10});
  EXPECT_EQ(vals(a.slice(0, 2, 8, 3)), (std::vector<double>{2, 5}));
  EXPECT_EQ(vals(a.slice(0, -3, 100)), (std::vector<double>{7, 8, 9}));  // clamped like Python
  EXPECT_EQ(a.slice(0, 8, 2).numel(), 0);
  EXPECT_ERROR_NAMING(a.slice(0, 0, 5, 0), "slice: step must be positive");
  EXPECT_EQ(vals(a.narrow(0, 7, 3)), (std::vector<double>{7, 8, 9}));
  EXPECT_ERROR_NAMING(a.narrow(0, 8, 3), "narrow: [8, 8 + 3) is outside dim 0 of size 10");
  Tensor m = iota({3, 4});
  EXPECT_EQ(vals(m.select(1, -1)), (std::vector<double>{3, 7, 11}));
  EXPECT_EQ(m.select(0, 1).shape(), (Shape{4}));
  EXPECT_ERROR_NAMING(m.select(0, 3), "select: index 3 is out of range");
  Tensor col = m.slice(1, 1, 3);
  EXPECT_EQ(col.offset(), 1);
  EXPECT_EQ(vals(col), (std::vector<double>{1, 2, 5, 6, 9, 10}));
}

TEST(Tensor, ExpandSqueezeUnsqueeze) {
  Tensor a = iota({3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(vals(e.select(0, 1).select(0, 2)), (std::vector<double>(4, 2.0)));
  EXPECT_EQ(a.expand({-1, 5}).shape(), (Shape{3, 5}));
  EXPECT_ERROR_NAMING(a.expand({4, 4}), "expand: cannot expand [3, 1] to [4, 4]");
  EXPECT_ERROR_NAMING(a.expand({5}), "expand");
  Tensor s = zeros({1, 3, 1, 2});
  EXPECT_EQ(s.squeeze().shape(), (Shape{3, 2}));
  EXPECT_EQ(s.squeeze(2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(s.squeeze(1).shape(), s.shape());  // size 3: unchanged
  EXPECT_EQ(s.unsqueeze(0).shape(), (Shape{1, 1, 3, 1, 2}));
  EXPECT_EQ(s.unsqueeze(-1).shape(), (Shape{1, 3, 1, 2, 1}));
  EXPECT_EQ(scalar_tensor(1).unsqueeze(0).shape(), (Shape{1}));
  EXPECT_TRUE(iota({4}).unsqueeze(1).is_contiguous());
}

TEST(Tensor, AsStrided) {
  Tensor a = iota({6});
  Tensor w = a.as_strided({3, 2}, {2, 1}, 0);
  EXPECT_EQ(vals(w), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  Tensor windows = a.as_strided({5, 2}, {1, 1}, 0);  // overlapping windows
  EXPECT_EQ(vals(windows), (std::vector<double>{0, 1, 1, 2, 2, 3, 3, 4, 4, 5}));
  EXPECT_ERROR_NAMING(a.as_strided({2}, {1, 1}, 0), "as_strided");
}

TEST(Tensor, ToConvertsDtypes) {
  Tensor f = from_vector<float>({-1.75f, -0.5f, 0.0f, 0.5f, 2.9f});
  EXPECT_TRUE(f.to(DType::kF32).is_same(f));
  EXPECT_EQ(vals(f.to(DType::kI32)), (std::vector<double>{-1, 0, 0, 0, 2}));  // truncation
  EXPECT_EQ(vals(f.to(DType::kBool)), (std::vector<double>{1, 1, 0, 1, 1}));  // != 0
  EXPECT_EQ(vals(f.to(DType::kF64)), (std::vector<double>{-1.75, -0.5, 0, 0.5, static_cast<double>(2.9f)}));
  Tensor h = f.to(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_NEAR(vals(h)[4], 2.9, 1e-3);
  Tensor back = from_vector<int64_t>({1, 0, 3}).to(DType::kBool).to(DType::kU8);
  EXPECT_EQ(vals(back), (std::vector<double>{1, 0, 1}));
  // Non-contiguous sources convert element by element.
  EXPECT_EQ(vals(iota({2, 3}).t().to(DType::kI64)), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(f.to(TensorOptions(DType::kF64, Device::cpu())).dtype(), DType::kF64);
}

TEST(Tensor, FillAndCopyRespectViews) {
  Tensor a = zeros({3, 4});
  a.slice(1, 0, 4, 2).fill_(1);  // columns 0 and 2
  EXPECT_EQ(vals(a), (std::vector<double>{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}));
  a.t().select(0, 3).copy_(from_vector<float>({7, 8, 9}));  // column 3
  EXPECT_EQ(vals(a.select(1, 3)), (std::vector<double>{7, 8, 9}));
  // Broadcasting source, converted dtype.
  Tensor b = zeros({2, 3}, DType::kI64);
  b.copy_(from_vector<double>({1.5, 2.5, -3.5}));
  EXPECT_EQ(vals(b), (std::vector<double>{1, 2, -3, 1, 2, -3}));
  EXPECT_ERROR_NAMING(b.copy_(zeros({4})), "copy_: shapes [4] and [2, 3] do not broadcast");
  EXPECT_ERROR_NAMING(zeros({3}).copy_(zeros({2, 3})),
                      "copy_: source of shape [2, 3] does not broadcast to destination [3]");
  // Copying a tensor onto an overlapping view of itself reads the source first.
  Tensor c = iota({5});
  c.slice(0, 1, 5).copy_(c.slice(0, 0, 4));
  EXPECT_EQ(vals(c), (std::vector<double>{0, 0, 1, 2, 3}));
  Tensor z = ones({2});
  EXPECT_EQ(vals(z.zero_()), (std::vector<double>{0, 0}));
}

TEST(Tensor, ItemAndToVector) {
  EXPECT_EQ(scalar_tensor(2.5).item(), 2.5);
  EXPECT_EQ(full({1, 1}, 3, DType::kI32).item<int>(), 3);
  EXPECT_ERROR_NAMING(zeros({2}).item(), "item: expected one element, the tensor has 2");
  EXPECT_EQ(iota({2, 2}).t().to_vector<int>(), (std::vector<int>{0, 2, 1, 3}));
}

TEST(Tensor, Printing) {
  EXPECT_EQ(from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).to_string(),
            "tensor([[1, 2],\n [3, 4]], dtype=i64, device=cpu)");
  EXPECT_EQ(from_vector<float>({0.5f, -1.25f}).to_string(), "tensor([0.5, -1.25], dtype=f32, device=cpu)");
  EXPECT_EQ(scalar_tensor(3, DType::kF64).to_string(), "tensor(3, dtype=f64, device=cpu)");
  EXPECT_EQ(iota({10}, DType::kI32).to_string(), "tensor([0, 1, 2, ..., 7, 8, 9], dtype=i32, device=cpu)");
  EXPECT_EQ(from_vector<float>({1.0f / 3.0f}, {1}).to_string(), "tensor([0.3333], dtype=f32, device=cpu)");
  EXPECT_EQ(from_vector<float>({1e-7f, 12345678.0f}).to_string(), "tensor([1e-07, 1.235e+07], dtype=f32, device=cpu)");
  EXPECT_EQ(from_vector<bool>({true, false}).to_string(), "tensor([1, 0], dtype=bool, device=cpu)");
  std::ostringstream os;
  os << iota({2, 3}).t();
  EXPECT_EQ(os.str(), "tensor([[0, 3],\n [1, 4],\n [2, 5]], dtype=f32, device=cpu)");
}

TEST(Tensor, DeviceHelpers) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).to_string(), "cuda:2");
  EXPECT_THROW(Device::parse("tpu"), Error);
  check_same_device({zeros({1}), Tensor(), ones({1})}, "op");  // undefined tensors are skipped
}

}  // namespace
}  // namespace coppice

namespace coppice {
namespace {

// Storage::wrap: memory owned elsewhere is used in place (no copy) and
// handed back once, when the last tensor on it goes.
TEST(Storage, WrappedMemoryIsUsedInPlaceAndReleasedOnce) {
  std::vector<float> owner = {1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    Storage s = Storage::wrap(owner.data(), owner.size() * sizeof(float), Device::cpu(), [&] { ++released; });
    Tensor t = Tensor::from_storage(s, {2, 3}, {3, 1}, 0, DType::kF32);
    EXPECT_EQ(t.data<float>(), owner.data());
    Tensor view = t.t();  // shares the storage
    t.data<float>()[0] = 10;
    EXPECT_EQ(owner[0], 10.0f);
    t = Tensor();
    EXPECT_EQ(released, 0) << "a view still holds the memory";
    EXPECT_EQ(sum(view).item(), 10.0 + 2 + 3 + 4 + 5 + 6);
  }
  EXPECT_EQ(released, 1);
}

// Read-only wrapped memory (a read-only NumPy array): views carry the flag,
// in-place writes are refused and leave the memory as it was; copies are the
// library's own, writable.
TEST(Storage, ReadOnlyWrappedMemoryRefusesInPlaceWrites) {
  const std::vector<float> owner = {1, 2, 3, 4};
  Storage s = Storage::wrap(const_cast<float*>(owner.data()), owner.size() * sizeof(float), Device::cpu(), nullptr,
                            /*read_only=*/true);
  Tensor t = Tensor::from_storage(s, {2, 2}, {2, 1}, 0, DType::kF32);
  EXPECT_TRUE(t.storage().read_only());
  EXPECT_TRUE(t.t().storage().read_only());
  EXPECT_THROW(t.fill_(0.0), Error);
  EXPECT_THROW(t.t().copy_(full({2, 2}, 7.0)), Error);
  EXPECT_EQ(owner, (std::vector<float>{1, 2, 3, 4}));
  Tensor c = t.clone();
  EXPECT_FALSE(c.storage().read_only());
  c.fill_(5.0);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{5, 5, 5, 5}));
  EXPECT_FALSE(Storage::allocate(4, Device::cpu()).read_only());
}

}  // namespace
}  // namespace coppice
