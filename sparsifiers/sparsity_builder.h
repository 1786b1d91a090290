// A chainable way to write a SparsitySchedule (schedule.h) in C++:
//
//   SparsityBuilder b;
//   b["fc1.weight"].format("csr").sparsify({"magnitude", {{"sparsity", "0.9"}}});
//   b.regex("fc[23]\\.weight").density(0.2);  // magnitude to 20 %, dense storage
//   b.output("fc1")
//       .forward({"threshold", {{"threshold", "0"}}}, "csr")    // fc1's output: its non-zeros, as CSR
//       .backward({})                                           // x's gradient: unchanged
//       .backward({"magnitude", {{"sparsity", "0.5"}}}, "dense"); // the weight's: top half
//   SparsitySchedule s = b.schedule();
//
// Each call appends a rule; setters on it return the same rule builder, so
// they chain. Nothing is checked here: apply_schedule (apply_schedule.h)
// checks the whole schedule against the model, before training.
#pragma once

#include <cstddef>
#include <string>

#include "sparsifiers/schedule.h"

namespace coppice {

class ParameterRuleBuilder {
 public:
  ParameterRuleBuilder(SparsitySchedule* schedule, size_t index) : schedule_(schedule), index_(index) {}

  ParameterRuleBuilder& format(std::string name, FormatOptions options = {});
  ParameterRuleBuilder& sparsify(SparsifierSpec spec);
  ParameterRuleBuilder& density(double density);

 private:
  ParameterRule& rule() const { return schedule_->parameters[index_]; }
  SparsitySchedule* schedule_;
  size_t index_;  // not a pointer: later rules may move the vector
};

class OutputRuleBuilder {
 public:
  OutputRuleBuilder(SparsitySchedule* schedule, size_t index) : schedule_(schedule), index_(index) {}

  // The next output's (or input gradient's) four stages.
  OutputRuleBuilder& forward(StageSpec stages);
  OutputRuleBuilder& backward(StageSpec stages);
  // Shorthand: `spec` as the inline sparsifier, storing into `format` (both
  // the temporary and the output format), no external sparsifier. An empty
  // spec name means keep-all.
  OutputRuleBuilder& forward(SparsifierSpec spec, std::string format);
  OutputRuleBuilder& backward(SparsifierSpec spec, std::string format);

 private:
  OutputRule& rule() const { return schedule_->outputs[index_]; }
  SparsitySchedule* schedule_;
  size_t index_;
};

class SparsityBuilder {
 public:
  // A rule for the parameter named exactly `name` ("fc1.weight").
  ParameterRuleBuilder operator[](std::string name);
  // A rule for every parameter whose whole name matches `pattern` (RE2
  // syntax, name_regex.h; a bad pattern is refused by apply_schedule).
  ParameterRuleBuilder regex(std::string pattern);
  // A rule for the module named exactly `module` ("fc1"), or matching `pattern`.
  OutputRuleBuilder output(std::string module);
  OutputRuleBuilder output_regex(std::string pattern);

  const SparsitySchedule& schedule() const { return schedule_; }

 private:
  ParameterRuleBuilder add_parameter_rule(Selector selector);
  OutputRuleBuilder add_output_rule(Selector selector);
  SparsitySchedule schedule_;
};

}  // namespace coppice
