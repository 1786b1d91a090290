#include "train/summary.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

namespace coppice {

JsonObject summary_json(const TrainingSummary& s) {
  JsonObject o;
  o.add("kind", "summary").add("step", s.final_step).add("total_steps", s.total_steps);
  if (!s.losses.empty()) o.add("final_loss", s.losses.back());
  if (s.validation) {
    o.add("validation_accuracy", s.validation->accuracy).add("validation_loss", s.validation->loss);
    o.add("validation_perplexity", std::exp(s.validation->loss));
  }
  if (s.test) o.add("test_accuracy", s.test->accuracy).add("test_loss", s.test->loss);
  std::map<std::string, double> dens;
  for (const LayerStats& l : s.model.layers) dens[l.name] = l.density;
  o.add("density", dens);
  o.add("parameters_dense", s.model.dense_parameters).add("parameters_stored", s.model.stored_parameters);
  o.add("linear_flops_dense", s.model.linear_flops_dense).add("linear_flops_sparse", s.model.linear_flops_sparse);
  o.add("fallback_counts", s.fallback_counts);
  if (!s.route_choices.empty()) o.add_raw("route_choices", s.route_choices);
  if (s.final_loss_scale != 1.0 || !s.skipped_steps.empty()) {
    o.add("loss_scale", s.final_loss_scale).add("skipped_steps", static_cast<int64_t>(s.skipped_steps.size()));
  }
  if (s.peak_memory_bytes >= 0) o.add("peak_memory_bytes", s.peak_memory_bytes);
  o.add("time_s", s.seconds).add("samples_per_s", s.samples_per_second);
  if (!s.mask_updates.empty()) {
    o.add("mask_update_steps", static_cast<int64_t>(s.mask_updates.size()));
    o.add("mask_update_step_s", s.update_step_seconds);
    o.add("mask_update_overhead_s", mask_update_overhead_seconds(s));
  }
  if (s.world_size > 1) {
    o.add("world_size", s.world_size).add("exchange_bytes_per_step", s.exchange_bytes_per_step);
    o.add("exchange_bytes_per_dense_step", s.exchange_bytes_per_dense_step);
    o.add("exchange_hook_ms_per_step", s.exchange_hook_ms_per_step);
    o.add("exchange_end_ms_per_step", s.exchange_end_ms_per_step);
  }
  if (s.cuda_graph) {
    JsonObject g;
    g.add("captures", s.graph_captures).add("replays", s.graph_replays);
    if (!s.graph_declined.empty()) g.add("off", s.graph_declined);
    o.add("cuda_graph", g);
  }
  if (!s.last_checkpoint.empty()) o.add("checkpoint", s.last_checkpoint);
  return o;
}

std::string format_summary(const TrainingSummary& s) {
  std::ostringstream os;
  os << "trained " << s.final_step << "/" << s.total_steps << " steps in " << s.seconds << " s ("
     << static_cast<int64_t>(s.samples_per_second) << " samples/s)";
  if (!s.losses.empty()) os << ", final loss " << s.losses.back();
  os << "\n";
  if (s.validation) {
    os << "validation accuracy " << 100.0 * s.validation->accuracy << " % (loss " << s.validation->loss
       << ", perplexity " << std::exp(s.validation->loss) << ")\n";
  }
  if (s.test) os << "test accuracy " << 100.0 * s.test->accuracy << " % (loss " << s.test->loss << ")\n";
  os << "layers:\n";
  for (const LayerStats& l : s.model.layers) {
    os << "  " << l.name << "  " << l.format << "  " << l.nnz << "/" << l.numel << "  density " << l.density << "\n";
  }
  os << "parameters: " << s.model.stored_parameters << " stored of " << s.model.dense_parameters << " dense\n";
  os << "Linear FLOPs per example: " << s.model.linear_flops_sparse << " sparse vs " << s.model.linear_flops_dense
     << " dense\n";
  if (s.fallback_counts.empty()) {
    os << "dense fallbacks: none\n";
  } else {
    os << "dense fallbacks:";
    for (const auto& [k, v] : s.fallback_counts) os << " " << k << "=" << v;
    os << "\n";
  }
  if (s.final_loss_scale != 1.0 || !s.skipped_steps.empty()) {
    if (s.final_loss_scale != 1.0) os << "loss scale " << s.final_loss_scale << " at the end; ";
    os << s.skipped_steps.size() << " steps skipped for an inf/NaN loss or gradients\n";
  }
  if (s.cuda_graph) {
    os << "cuda graphs: " << s.graph_replays << " steps replayed, " << s.graph_captures << " captures";
    if (!s.graph_declined.empty()) os << "; off: " << s.graph_declined;
    os << "\n";
  }
  if (!s.mask_updates.empty() && s.ordinary_steps == 0) {
    // Every step changed masks (sr_ste with interval 1): nothing to compare with.
    os << "mask updates: " << s.mask_updates.size() << " steps took " << s.update_step_seconds
       << " s (every step updates masks)\n";
  } else if (!s.mask_updates.empty()) {
    const double overhead = mask_update_overhead_seconds(s);
    os << "mask updates: " << s.mask_updates.size() << " steps took " << s.update_step_seconds << " s, " << overhead
       << " s more than as many ordinary steps (" << (s.seconds > 0 ? 100.0 * overhead / s.seconds : 0.0)
       << " % of the run)\n";
  }
  if (s.peak_memory_bytes >= 0) os << "peak CPU memory: " << s.peak_memory_bytes << " bytes\n";
  if (s.world_size > 1) {
    os << "data-parallel over " << s.world_size << " ranks: " << static_cast<int64_t>(s.exchange_bytes_per_step)
       << " gradient bytes sent per step by each rank (dense " << s.last_exchange.dense_bytes << ", compact sparse "
       << s.last_exchange.compact_bytes << ", top-k " << s.last_exchange.topk_bytes << "; "
       << s.last_exchange.copied_bytes << " of them copied into buckets, the rest written there by backward)";
    if (s.exchange_bytes_per_dense_step > 0)
      os << ", " << static_cast<int64_t>(s.exchange_bytes_per_dense_step) << " on dense-gradient steps";
    os << "; host ms a step in its gradient hooks " << s.exchange_hook_ms_per_step << ", in end() "
       << s.exchange_end_ms_per_step << "\n";
  }
  if (!s.last_checkpoint.empty()) os << "checkpoint: " << s.last_checkpoint << "\n";
  return os.str();
}

}  // namespace coppice
