#include "tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "absl/strings/str_format.h"
#include "tensor/backend.h"
#include "tensor/checked_math.h"
#include "tensor/dispatcher.h"

namespace coppice {

std::string_view layout_name(Layout layout) {
  switch (layout) {
    case Layout::kDense: return "dense";
    case Layout::kCoo: return "coo";
    case Layout::kCsr: return "csr";
    case Layout::kCsc: return "csc";
    case Layout::kBsr: return "bsr";
    case Layout::kBlockedEll: return "blocked_ell";
    case Layout::kNm: return "nm";
    case Layout::kMasked: return "masked";
    case Layout::kCustom: return "custom";
  }
  return "?";
}

void check_dense(const Tensor& t, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  COPPICE_CHECK(t.is_dense(), op, ": ", what, " must be dense, got format '", t.format(), "'");
}

void check_same_device(const std::vector<Tensor>& ts, std::string_view op) {
  const Tensor* first = nullptr;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
      continue;
    }
    COPPICE_CHECK(t.device() == first->device(), op, ": operands are on different devices (",
                  first->device().to_string(), " and ", t.device().to_string(), ")");
  }
}

Tensor Tensor::from_storage(Storage storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  return Tensor(std::make_shared<DenseImpl>(std::move(storage), std::move(shape), std::move(strides), offset, dtype));
}

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  for (int64_t s : shape) COPPICE_CHECK(s >= 0, "empty: negative size in shape ", shape_to_string(shape));
  // Byte counts stay within int64, like every size derived from them.
  const int64_t bytes = checked_mul<int64_t>(shape_numel(shape), dtype_size(options.dtype), [&] {
    return str_cat("empty: bytes of shape ", shape_to_string(shape), " of ", dtype_name(options.dtype));
  });
  return from_storage(Storage::allocate(static_cast<size_t>(bytes), options.device), shape, contiguous_strides(shape),
                      0, options.dtype);
}

const DenseImpl& Tensor::dense(std::string_view op) const {
  const DenseImpl* d = impl_as<DenseImpl>();
  COPPICE_CHECK(d != nullptr, op, ": needs a dense tensor, got format '", format(), "'");
  return *d;
}

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
const Shape& Tensor::strides() const { return dense("strides").strides(); }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }
int64_t Tensor::offset() const { return dense("offset").offset(); }
const Storage& Tensor::storage() const { return dense("storage").storage(); }

bool Tensor::is_contiguous() const {
  const DenseImpl& d = dense("is_contiguous");
  if (shape_numel(d.shape()) == 0) return true;  // no element to be out of place
  int64_t expected = 1;
  for (size_t i = d.shape().size(); i-- > 0;) {
    if (d.shape()[i] == 1) continue;
    if (d.strides()[i] != expected) return false;
    expected *= d.shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const DenseImpl& d = dense("data_ptr");
  return static_cast<char*>(d.storage().data()) + d.offset() * static_cast<int64_t>(dtype_size(d.dtype()));
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  const DenseImpl& d = dense("as_strided");
  COPPICE_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape_to_string(shape), " and strides ",
                shape_to_string(strides), " differ in length");
  for (int64_t s : shape) COPPICE_CHECK(s >= 0, "as_strided: negative size in shape ", shape_to_string(shape));
  // Every element the view reaches lies inside the storage.
  const int64_t capacity = static_cast<int64_t>(d.storage().nbytes() / dtype_size(d.dtype()));
  if (shape_numel(shape) > 0) {
    int64_t lo = offset, hi = offset;
    auto what = [&] {
      return str_cat("as_strided: shape ", shape_to_string(shape), ", strides ", shape_to_string(strides));
    };
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t extent = checked_mul(strides[i], shape[i] - 1, what);
      (extent < 0 ? lo : hi) = checked_add(extent < 0 ? lo : hi, extent, what);
    }
    COPPICE_CHECK(lo >= 0 && hi < capacity, "as_strided: shape ", shape_to_string(shape), ", strides ",
                  shape_to_string(strides), " and offset ", offset, " reach elements [", lo, ", ", hi,
                  "], outside the storage of ", capacity);
  }
  return from_storage(d.storage(), shape, strides, offset, d.dtype());
}

namespace {
// Resolves one -1 in `shape` against `numel`.
Shape infer_shape(Shape shape, int64_t numel, std::string_view op) {
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      COPPICE_CHECK(unknown < 0, op, ": only one dimension may be -1 in ", shape_to_string(shape));
      unknown = static_cast<int64_t>(i);
    } else {
      COPPICE_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape_to_string(shape));
      COPPICE_CHECK(!mul_overflows(known, shape[i], &known), op, ": the sizes of ", shape_to_string(shape),
                    " multiply past a 64-bit integer");
    }
  }
  if (unknown >= 0) {
    COPPICE_CHECK(known != 0 && numel % known == 0, op, ": cannot infer -1 in ", shape_to_string(shape), " for ", numel,
                  " elements");
    shape[unknown] = numel / known;
  }
  COPPICE_CHECK(shape_numel(shape) == numel, op, ": shape ", shape_to_string(shape), " does not hold ", numel,
                " elements");
  return shape;
}

// Strides that view a tensor of (old_shape, old_strides) as new_shape without
// copying, or false when its memory layout does not allow it.
bool view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape, Shape* out) {
  out->assign(new_shape.size(), 0);
  int64_t numel = shape_numel(old_shape);
  // Empty tensors, and 0-d ones (whose new shape can only hold 1s), take any strides.
  if (numel == 0 || old_shape.empty()) {
    *out = contiguous_strides(new_shape);
    return true;
  }
  // Walk chunks of old dims that are mutually contiguous and match them to new dims.
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const DenseImpl& d = dense("view");
  Shape resolved = infer_shape(shape, numel(), "view");
  Shape strides;
  COPPICE_CHECK(view_strides(d.shape(), d.strides(), resolved, &strides), "view: a tensor of shape ",
                shape_to_string(d.shape()), " and strides ", shape_to_string(d.strides()), " cannot be viewed as ",
                shape_to_string(resolved), "; use reshape (which copies)");
  return from_storage(d.storage(), resolved, strides, d.offset(), d.dtype());
}

Tensor Tensor::reshape(const Shape& shape) const {
  const DenseImpl& d = dense("reshape");
  Shape resolved = infer_shape(shape, numel(), "reshape");
  Shape strides;
  if (view_strides(d.shape(), d.strides(), resolved, &strides)) {
    return from_storage(d.storage(), resolved, strides, d.offset(), d.dtype());
  }
  return contiguous().view(resolved);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = normalize_dim(start_dim, dim(), "flatten"), e = normalize_dim(end_dim, dim(), "flatten");
  COPPICE_CHECK(s <= e, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= this->shape()[i];
  shape.push_back(n);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> dims(static_cast<size_t>(dim()));
  for (int64_t i = 0; i < dim(); ++i) dims[i] = i;
  std::swap(dims[normalize_dim(d0, dim(), "transpose")], dims[normalize_dim(d1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::t() const {
  COPPICE_CHECK(dim() == 2, "t: expected a 2-D tensor, got ", dim(), "-D shape ", shape_to_string(shape()));
  return transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const DenseImpl& d = dense("permute");
  COPPICE_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(), " dims for a ", dim(),
                "-D tensor");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t src = normalize_dim(dims[i], dim(), "permute");
    COPPICE_CHECK(!seen[src], "permute: dim ", src, " appears twice");
    seen[src] = true;
    shape[i] = d.shape()[src];
    strides[i] = d.strides()[src];
  }
  return from_storage(d.storage(), shape, strides, d.offset(), d.dtype());
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  const DenseImpl& d = dense("slice");
  int64_t k = normalize_dim(dim_, dim(), "slice");
  COPPICE_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = d.shape()[k];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = d.shape(), strides = d.strides();
  shape[k] = end == start ? 0 : (end - start - 1) / step + 1;  // ceil without overflow for any step
  // A step past the end keeps one element: its stride is never applied.
  if (shape[k] > 1) strides[k] = checked_mul(strides[k], step, "slice: stride * step");
  return from_storage(d.storage(), shape, strides, d.offset() + start * d.strides()[k], d.dtype());
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  int64_t k = normalize_dim(dim_, dim(), "narrow");
  int64_t end = 0;
  COPPICE_CHECK(start >= 0 && length >= 0 && !add_overflows(start, length, &end) && end <= shape()[k], "narrow: [",
                start, ", ", start, " + ", length, ") is outside dim ", k, " of size ", shape()[k]);
  return slice(k, start, end);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  int64_t k = normalize_dim(dim_, dim(), "select");
  int64_t n = shape()[k];
  COPPICE_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", k, " of size ", n);
  if (index < 0) index += n;
  return narrow(k, index, 1).squeeze(k);
}

Tensor Tensor::expand(const Shape& shape) const {
  const DenseImpl& d = dense("expand");
  COPPICE_CHECK(shape.size() >= d.shape().size(), "expand: cannot expand ", shape_to_string(d.shape()), " to ",
                shape_to_string(shape), " (fewer dimensions)");
  size_t lead = shape.size() - d.shape().size();
  Shape out(shape.size()), strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      COPPICE_CHECK(shape[i] >= 0, "expand: size -1 is not allowed for a new leading dimension");
      out[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    int64_t have = d.shape()[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    COPPICE_CHECK(have == want || have == 1, "expand: cannot expand ", shape_to_string(d.shape()), " to ",
                  shape_to_string(shape), " (dimension ", i, ")");
    out[i] = want;
    strides[i] = (have == want) ? d.strides()[i - lead] : 0;
  }
  return from_storage(d.storage(), out, strides, d.offset(), d.dtype());
}

Tensor Tensor::squeeze() const {
  const DenseImpl& d = dense("squeeze");
  Shape shape, strides;
  for (size_t i = 0; i < d.shape().size(); ++i) {
    if (d.shape()[i] == 1) continue;
    shape.push_back(d.shape()[i]);
    strides.push_back(d.strides()[i]);
  }
  return from_storage(d.storage(), shape, strides, d.offset(), d.dtype());
}

Tensor Tensor::squeeze(int64_t dim_) const {
  const DenseImpl& d = dense("squeeze");
  if (dim() == 0) return *this;
  int64_t k = normalize_dim(dim_, dim(), "squeeze");
  if (d.shape()[k] != 1) return *this;
  Shape shape = d.shape(), strides = d.strides();
  shape.erase(shape.begin() + k);
  strides.erase(strides.begin() + k);
  return from_storage(d.storage(), shape, strides, d.offset(), d.dtype());
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  const DenseImpl& d = dense("unsqueeze");
  int64_t k = normalize_dim(dim_, dim() + 1, "unsqueeze");
  Shape shape = d.shape(), strides = d.strides();
  int64_t stride = k < dim() ? d.strides()[k] * d.shape()[k] : 1;
  shape.insert(shape.begin() + k, 1);
  strides.insert(strides.begin() + k, stride);
  return from_storage(d.storage(), shape, strides, d.offset(), d.dtype());
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  check_dense(*this, "clone", "input");
  Tensor out = empty(shape(), options());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const { return to(TensorOptions(dtype(), device)); }
Tensor Tensor::to(DType dtype) const { return to(TensorOptions(dtype, device())); }

Tensor Tensor::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return *this;
  check_dense(*this, "to", "input");
  Tensor out = empty(shape(), options);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(double value) {
  check_dense(*this, op::kFill, "tensor");
  COPPICE_CHECK(!storage().read_only(), "fill_: the tensor ", shape_to_string(shape()),
                " is on read-only memory (its owner forbids writes)");
  Attrs attrs;
  attrs.set("value", value);
  dispatch(op::kFill, {*this}, attrs);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_dense(*this, op::kCopy, "destination");
  check_dense(src, op::kCopy, "source");
  COPPICE_CHECK(!storage().read_only(), "copy_: the destination ", shape_to_string(shape()),
                " is on read-only memory (its owner forbids writes)");
  COPPICE_CHECK(broadcast_shapes(src.shape(), shape(), op::kCopy) == shape(), "copy_: source of shape ",
                shape_to_string(src.shape()), " does not broadcast to destination ", shape_to_string(shape()));
  if (src.device() == device()) {
    dispatch(op::kCopy, {*this, src});
    return *this;
  }
  // Across devices: make a contiguous copy of the source with the destination's
  // dtype and shape on its own device, move the bytes, then copy into place.
  Tensor staged = empty(shape(), TensorOptions(dtype(), src.device()));
  dispatch(op::kCopy, {staged, src});
  Tensor landed = is_contiguous() ? *this : empty(shape(), options());
  DeviceBackend& b = backend_for(device().is_cuda() ? device() : src.device());
  b.copy(landed.data_ptr(), device(), staged.data_ptr(), src.device(),
         static_cast<size_t>(numel()) * dtype_size(dtype()));
  if (!landed.is_same(*this)) dispatch(op::kCopy, {*this, landed});
  return *this;
}

double Tensor::item() const {
  COPPICE_CHECK(numel() == 1, "item: expected one element, the tensor has ", numel(), " (shape ",
                shape_to_string(shape()), ")");
  Tensor host = to(TensorOptions(DType::kF64, Device::cpu()));
  return *host.data<double>();
}

namespace {
void print_values(std::ostringstream& os, const double* data, const Shape& shape, const Shape& strides, size_t d,
                  int64_t base, bool integral) {
  constexpr int64_t kEdge = 3;  // elements shown at each end of a long dimension
  if (d == shape.size()) {
    if (integral) {
      os << static_cast<int64_t>(data[base]);
    } else {
      os << absl::StrFormat("%.4g", data[base]);
    }
    return;
  }
  os << "[";
  int64_t n = shape[d];
  const char* sep = d + 1 == shape.size() ? ", " : ",\n ";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) os << sep;
    if (n > 2 * kEdge && i == kEdge) {
      os << "..." << sep;
      i = n - kEdge;
    }
    print_values(os, data, shape, strides, d + 1, base + i * strides[d], integral);
  }
  os << "]";
}
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  if (!is_dense()) {
    os << "tensor(format=" << format() << ", shape=" << shape_to_string(shape()) << ", dtype=" << dtype_name(dtype())
       << ", device=" << device().to_string() << ")";
    return os.str();
  }
  Tensor host = to(TensorOptions(DType::kF64, Device::cpu())).contiguous();
  os << "tensor(";
  print_values(os, host.data<double>(), host.shape(), host.strides(), 0, 0, !is_floating(dtype()));
  os << ", dtype=" << dtype_name(dtype()) << ", device=" << device().to_string() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace coppice
