#include "distributed/communicator.h"

#include <algorithm>

namespace coppice {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllGather: return "all_gather";
    case Collective::kAllGatherV: return "all_gather_v";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBarrier: return "barrier";
  }
  return "?";
}

namespace {

bool is_reduction(Collective c) { return c == Collective::kAllReduce || c == Collective::kReduceScatter; }

}  // namespace

std::string CollectiveCall::to_string() const {
  std::string s(collective_name(collective));
  if (collective == Collective::kBarrier) return s;
  if (is_reduction(collective)) s += str_cat("(", reduce_op_name(reduce), ")");
  if (collective == Collective::kBroadcast) s += str_cat("(root ", root, ")");
  return str_cat(s, " ", dtype_name(dtype), " ", shape_to_string(shape));
}

CollectiveCall check_collective(Collective collective, const Tensor& tensor, ReduceOp reduce, int root,
                                int world_size) {
  CollectiveCall call;
  call.collective = collective;
  const std::string_view op = collective_name(collective);
  if (collective == Collective::kBarrier) return call;

  check_dense(tensor, op, "tensor");
  call.dtype = tensor.dtype();
  call.shape = tensor.shape();
  if (is_reduction(collective)) {
    call.reduce = reduce;
    COPPICE_CHECK(tensor.dtype() != DType::kBool, op, "(", reduce_op_name(reduce),
                  "): bool tensors cannot be reduced (use u8)");
    COPPICE_CHECK(reduce != ReduceOp::kAverage || is_floating(tensor.dtype()), op,
                  "(average): needs a floating dtype, got ", dtype_name(tensor.dtype()),
                  " (reduce with sum and divide)");
  }
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      COPPICE_CHECK(tensor.is_contiguous(), op, ": works in place and needs a contiguous tensor, got shape ",
                    shape_to_string(tensor.shape()), " strides ", shape_to_string(tensor.strides()));
      if (collective == Collective::kBroadcast) {
        COPPICE_CHECK(root >= 0 && root < world_size, op, ": root ", root, " is not a rank of a world of size ",
                      world_size);
        call.root = root;
      }
      break;
    case Collective::kAllGather:
    case Collective::kAllGatherV:
    case Collective::kReduceScatter:
      COPPICE_CHECK(tensor.dim() >= 1, op, ": needs a tensor of at least 1 dim (it works along dim 0), got ",
                    shape_to_string(tensor.shape()));
      if (collective == Collective::kReduceScatter) {
        COPPICE_CHECK(tensor.size(0) % world_size == 0, op, ": dim 0 of ", shape_to_string(tensor.shape()),
                      " does not split into ", world_size, " equal chunks");
      }
      break;
    case Collective::kBarrier: break;
  }
  return call;
}

std::string collective_mismatch(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.collective != b.collective) return "op";
  if (a.collective == Collective::kBarrier) return "";
  if (is_reduction(a.collective) && a.reduce != b.reduce) return "reduce op";
  if (a.collective == Collective::kBroadcast && a.root != b.root) return "root";
  if (a.dtype != b.dtype) return "dtype";
  if (a.collective == Collective::kAllGatherV) {
    if (a.shape.size() != b.shape.size()) return "shape";
    if (!a.shape.empty() && !std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1)) return "shape";
    return "";
  }
  if (a.shape != b.shape) return "shape";
  return "";
}

}  // namespace coppice
