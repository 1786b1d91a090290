// One parity harness over every registered cell of the elementwise ops, in
// the manner of ggml's test-backend-ops: for each op of tensor/unary_ops.h
// and tensor/binary_ops.h, each device this binary runs on and each
// combination of input formats (dense and every built-in sparse format), the
// cell the dispatcher has registered (if any) runs on random inputs of every
// dtype it takes and is compared with the CPU dense kernel on the same
// values, converted to dense. The cells are found from the tables and the
// format table, not listed here, so a cell added later is tested, and the
// count is printed and checked: every op has its dense cell on every device,
// and every f(0) = 0 unary op a cell for every format.
//
// Built twice: //tests/sparse:elementwise_parity_test (the CPU cells) and
// //tests/sparse/cuda:elementwise_parity_test (the CUDA cells too, on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/formats.h"
#include "tensor/binary_ops.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"
#include "tests/sparse/parity_util.h"

namespace coppice {
namespace {

// Ops whose inputs must be positive (log of a negative is NaN on both sides,
// which hides nothing, but pow's sparse cell takes only a positive exponent).
bool positive_inputs(std::string_view op) { return op == "log" || op == "sqrt" || op == "rsqrt" || op == "pow"; }

using parity::devices;

// A [4, 8] matrix every built-in format holds: two non-zeros in each group of
// four along a row (2:4) and the top-left 2x2 block zero, values drawn on the
// host in [0.25, 2) with random signs (positive for positive_inputs). `full`:
// no zeros (a dense second operand, so that a sparse a / b has no 0 / 0 where
// a stores nothing).
Tensor matrix(std::string_view op, uint64_t seed, bool full) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.25, 2.0);
  std::vector<double> v(32, 0.0);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) {
      const double m = mag(rng);
      const bool neg = !positive_inputs(op) && (rng() & 1) != 0;
      if (full || ((c % 4) < 2 && !(r < 2 && c < 2))) v[static_cast<size_t>(r * 8 + c)] = neg ? -m : m;
    }
  }
  return from_vector<double>(v, {4, 8});
}

Tensor in_format(const Tensor& dense, const std::string& format, DType dtype, const Device& device) {
  const Tensor d = dense.to(dtype).to(device);
  if (format == "dense") return d;
  return to_format(d, format, is_block_format(format) ? FormatOptions::block(2) : FormatOptions{});
}

// The CPU dense kernel on the same (rounded) values: the reference of a cell.
std::vector<double> reference(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<Tensor> dense;
  for (const Tensor& t : inputs) dense.push_back(to_dense(to_device(t, Device::cpu())));
  return parity::host_f64(dispatch(op, dense, attrs)[0]);
}

::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (both_nan || got[i] == want[i]) continue;
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

struct Cells {
  int run = 0;                   // cells found and compared
  int dense_missing = 0;         // an op without its dense cell on a device
  int zero_keeping_missing = 0;  // an f(0) = 0 unary op without a format's cell
};

std::vector<DType> dtypes_of(unary_ops::Domain domain, bool dense) {
  std::vector<DType> t = parity::floating_dtypes();
  if (dense && domain != unary_ops::Domain::kFloating) t.push_back(DType::kI32);
  return t;
}

// Runs one cell over its dtypes.
void run_cell(std::string_view op, const std::vector<std::string>& formats, const Device& device,
              unary_ops::Domain domain, const Attrs& attrs) {
  bool all_dense = true;
  for (const std::string& f : formats) all_dense = all_dense && f == "dense";
  for (DType dtype : dtypes_of(domain, all_dense)) {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < formats.size(); ++i) {
      Tensor m = matrix(op, 11 + i, i == 1 && formats[i] == "dense");
      // pow's sparse base takes one positive exponent: a 0-D dense operand.
      if (op == "pow" && i == 1 && formats[0] != "dense" && formats[1] == "dense") m = scalar_tensor(1.5);
      if (dtype == DType::kI32) m = mul(m, 4.0);  // integers worth comparing
      inputs.push_back(in_format(m, formats[i], dtype, device));
    }
    SCOPED_TRACE(std::string(op) + "(" + formats[0] + (formats.size() > 1 ? ", " + formats[1] : "") + ") on " +
                 device.to_string() + ", " + std::string(dtype_name(dtype)));
    const Kernel* kernel = Dispatcher::instance().find(op, device.type, parity::kernel_keys(formats, op, device.type));
    ASSERT_NE(kernel, nullptr);
    const Tensor out = (*kernel)(inputs, attrs)[0];
    EXPECT_EQ(out.device(), device);
    const std::vector<double> got = parity::host_f64(out);
    // One op on rounded inputs: the result's rounding, and i32's exactness.
    EXPECT_TRUE(close(got, reference(op, inputs, attrs), parity::tolerance(dtype).rounding));
  }
}

// Whether a kernel serves these formats (a format declared by its levels:
// its own or its family's, as the dispatcher finds them).
bool registered(std::string_view op, const Device& device, const std::vector<std::string>& formats) {
  return Dispatcher::instance().find(op, device.type, parity::kernel_keys(formats, op, device.type)) != nullptr;
}

TEST(ElementwiseParityTest, EveryRegisteredCellAgainstTheCpuDenseKernel) {
  std::vector<std::string> builtin = {"dense"};
  for (const std::string& f : builtin_sparse_format_names()) builtin.push_back(f);
  // The level family's cells, on each of the harness's members that run on
  // the device (parity::family_runs). Its kernels are those linear in the
  // stored values (a non-unique level repeats positions), so no unary op.
  const std::vector<std::string>& members = parity::level_family_members();
  auto family_member = [&](const std::string& f) { return std::count(members.begin(), members.end(), f) > 0; };
  Cells cells;
  int table_ops = 0;
  for (const Device& device : devices()) {
    std::vector<std::string> formats = builtin;
    for (const std::string& m : members)
      if (parity::family_runs(m, device.type)) formats.push_back(m);
    auto unary = [&](std::string_view op, unary_ops::Domain domain, bool zero_keeping, const Attrs& attrs) {
      for (const std::string& f : formats) {
        if (registered(op, device, {f})) {
          run_cell(op, {f}, device, domain, attrs);
          ++cells.run;
        } else if (f == "dense") {
          ADD_FAILURE() << op << " has no dense cell on " << device.to_string();
          ++cells.dense_missing;
        } else if (zero_keeping && !family_member(f)) {
          ADD_FAILURE() << op << " (f(0) = 0) has no " << f << " cell on " << device.to_string();
          ++cells.zero_keeping_missing;
        }
      }
    };
    unary_ops::for_each([&](auto op) {
      using Op = decltype(op);
      unary(Op::kName, Op::kDomain, Op::kZeroPreserving, {});
    });
    Attrs clamp;
    clamp.set("min", -0.75).set("max", 1.25);
    unary(unary_ops::Clamp::kName, unary_ops::Clamp::kDomain, false, clamp);
    binary_ops::for_each([&](auto op) {
      using Op = decltype(op);
      for (const std::string& a : formats) {
        for (const std::string& b : formats) {
          if (registered(Op::kName, device, {a, b})) {
            run_cell(Op::kName, {a, b}, device, Op::kDomain, {});
            ++cells.run;
          } else if (a == "dense" && b == "dense") {
            ADD_FAILURE() << Op::kName << " has no dense cell on " << device.to_string();
            ++cells.dense_missing;
          }
        }
      }
    });
  }
  unary_ops::for_each([&](auto) { ++table_ops; });
  binary_ops::for_each([&](auto) { ++table_ops; });
  ++table_ops;  // clamp
  std::printf(
      "elementwise parity: %d cells run over %zu device(s); %d ops in the tables, %d dense cells and %d "
      "f(0) = 0 format cells missing\n",
      cells.run, devices().size(), table_ops, cells.dense_missing, cells.zero_keeping_missing);
  EXPECT_GE(cells.run, table_ops * static_cast<int>(devices().size()));
}

}  // namespace
}  // namespace coppice
