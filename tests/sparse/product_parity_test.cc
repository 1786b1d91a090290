// The parity harness of sparse/ops.h's ops beyond the elementwise ones (the
// products, sddmm, sum and transpose, and a format's device conversion to
// dense), in the manner of ggml's test-backend-ops: every (op, input
// formats, device) cell the dispatcher has registered for an op of
// product_problems.h's table runs, on every floating dtype and on each case
// of product_operands.h for its format, against the CPU dense result in f64
// of the same (rounded) values, within parity_util.h's per-dtype tolerances
// scaled by the reduction length. The cells are read from the dispatcher
// (Dispatcher::cells), not listed here, so a cell added later is run; the op
// table (tensor/op_table.h) lists the cells each op promises on every
// device, and a missing one fails. op_parity_test holds every registered
// cell to an op that one of the three parity harnesses runs.
//
// Built twice: //tests/sparse:product_parity_test (the CPU cells) and
// //tests/sparse/cuda:product_parity_test (the CUDA cells too, on a GPU;
// COPPICE_PARITY_CUDA_CELLS says that build must register them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "sparse/formats.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tests/sparse/parity_util.h"
#include "tests/sparse/product_operands.h"
#include "tests/sparse/product_problems.h"

namespace coppice::parity {
namespace {

// The cases of a cell: those of its first sparse format's option kind (an
// all-dense cell takes the element cases).
std::vector<SparseCase> cases_of_cell(const OpRow& row, const std::vector<std::string>& formats) {
  FormatOptionKind kind = FormatOptionKind::kNone;
  for (const std::string& f : formats) {
    if (f != "dense") {
      kind = format_spec(f, "parity").options;
      break;
    }
  }
  std::vector<SparseCase> out;
  for (const SparseCase& c : cases_of(kind)) {
    if (c.transposable || !row.transposable_only) out.push_back(c);
  }
  return out;
}

// Runs a cell's kernel on the problems built for `formats`; a problem the
// kernel refuses is a failure, reported with the others rather than ending
// the sweep. Returns the problems run.
int run_problems(const std::vector<Problem>& problems, const std::vector<std::string>& formats, const Kernel& kernel,
                 const std::string& op, const Device& device, DType dtype) {
  int runs = 0;
  for (const Problem& p : problems) {
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      EXPECT_EQ(p.inputs[i].defined() ? p.inputs[i].format() : "none", formats[i]);
    }
    std::vector<Tensor> out;
    try {
      out = kernel(p.inputs, p.attrs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
      continue;
    }
    ++runs;
    EXPECT_TRUE(follows_output_rule(op, p.inputs, out));
    EXPECT_EQ(out.size(), p.outputs.size());
    for (size_t i = 0; i < out.size() && i < p.outputs.size(); ++i) {
      if (!out[i].defined() && p.outputs[i].may_decline) continue;  // declined (matches says so)
      EXPECT_EQ(out[i].device(), device);
      EXPECT_EQ(out[i].dtype(), dtype);
      EXPECT_TRUE(matches(out[i], p.outputs[i], dtype)) << "output " << i;
    }
  }
  return runs;
}

// Runs one registered cell on every dtype and case (a family's cell on each
// of the harness's members of the family); returns the runs made.
int run_cell(const OpRow& row, const Dispatcher::Cell& cell) {
  const Device device = cell.device == DeviceType::kCpu ? Device::cpu() : Device::cuda(0);
  const std::vector<std::string_view> keys(cell.formats.begin(), cell.formats.end());
  const Kernel* kernel = Dispatcher::instance().find(cell.op, cell.device, keys);
  int runs = 0;
  for (const std::vector<std::string>& formats : cell_instances(cell.formats, cell.device)) {
    for (const SparseCase& c : cases_of_cell(row, formats)) {
      for (DType dtype : floating_dtypes()) {
        SCOPED_TRACE(cell_name(cell.op, formats, cell.device) + ", " + std::string(dtype_name(dtype)) + ", " + c.name);
        runs += run_problems(row.build(formats, c, dtype, device), formats, *kernel, cell.op, device, dtype);
      }
    }
  }
  return runs;
}

// The device types whose sparse kernels this binary holds: the CPU always,
// CUDA where the build says so (a CUDA build of this test links sparse/cuda;
// without the define, a sparse kernel registered for CUDA says it).
std::vector<DeviceType> built_device_types(const std::vector<Dispatcher::Cell>& cells) {
  bool cuda = false;
#ifdef COPPICE_PARITY_CUDA_CELLS
  cuda = true;
#endif
  for (const Dispatcher::Cell& c : cells) {
    cuda = cuda || (c.device == DeviceType::kCuda && has_sparse_format(c.formats));
  }
  if (cuda) return {DeviceType::kCpu, DeviceType::kCuda};
  return {DeviceType::kCpu};
}

// The input formats a promised signature stands for ("<fmt>": each built-in
// sparse format; one "<fmt>" per signature, as the op table writes them).
std::vector<std::vector<std::string>> expand(const std::vector<std::string>& signature) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& f : builtin_sparse_format_names()) {
    std::vector<std::string> formats = signature;
    for (std::string& g : formats) g = g == "<fmt>" ? f : g;
    out.push_back(formats);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());  // a signature without "<fmt>" once
  return out;
}

TEST(ProductParityTest, EveryRegisteredCellAgainstTheCpuDenseResult) {
  const std::vector<Dispatcher::Cell> cells = Dispatcher::instance().cells();
  const CellSweep s = sweep_cells(cells, row_of, run_cell);
  // The cells the op table promises, on every device this binary has kernels for.
  std::set<std::string> present;
  for (const Dispatcher::Cell& c : cells) present.insert(cell_name(c.op, c.formats, c.device));
  int promised = 0, missing = 0;
  for (DeviceType device : built_device_types(cells)) {
    for (const OpRow& row : table()) {
      for (const std::vector<std::string>& signature : promised_cells(row)) {
        for (const std::vector<std::string>& formats : expand(signature)) {
          ++promised;
          if (present.count(cell_name(row.op, formats, device)) == 0) {
            ADD_FAILURE() << cell_name(row.op, formats, device) << " is promised by the op table but not registered";
            ++missing;
          }
        }
      }
    }
  }
  std::printf(
      "product parity: %d cells run over %zu device(s) (%d runs); %d registered for the %zu ops of the table, %d "
      "of them on a device this machine lacks; %d promised by the op table, %d missing\n",
      s.run, devices().size(), s.runs, s.registered, table().size(), s.no_device, promised, missing);
  EXPECT_EQ(s.run + s.no_device, s.registered);
  EXPECT_EQ(missing, 0);
  EXPECT_GE(s.registered, promised);
  // An op that promises cells has its row here, so its promises are checked.
  for (const OpSpec* spec : declared_ops()) {
    if (!spec->promised.empty()) { EXPECT_NE(row_of(spec->name), nullptr) << spec->name << " promises cells"; }
  }
}

}  // namespace
}  // namespace coppice::parity
