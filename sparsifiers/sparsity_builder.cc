#include "sparsifiers/sparsity_builder.h"

#include <optional>
#include <utility>

namespace coppice {

namespace {

StageSpec shorthand(SparsifierSpec spec, std::string format) {
  StageSpec s;
  if (!spec.name.empty()) s.inline_sparsifier = std::move(spec);
  s.temporary_format.name = format;
  s.output_format.name = std::move(format);
  return s;
}

}  // namespace

ParameterRuleBuilder& ParameterRuleBuilder::format(std::string name, FormatOptions options) {
  rule().format = OutputFormat{std::move(name), options};
  return *this;
}

ParameterRuleBuilder& ParameterRuleBuilder::sparsify(SparsifierSpec spec) {
  rule().sparsifier = std::move(spec);
  return *this;
}

ParameterRuleBuilder& ParameterRuleBuilder::density(double density) {
  rule().density = density;
  return *this;
}

OutputRuleBuilder& OutputRuleBuilder::forward(StageSpec stages) {
  rule().forward.push_back(std::move(stages));
  return *this;
}

OutputRuleBuilder& OutputRuleBuilder::backward(StageSpec stages) {
  rule().backward.push_back(std::move(stages));
  return *this;
}

OutputRuleBuilder& OutputRuleBuilder::forward(SparsifierSpec spec, std::string format) {
  return forward(shorthand(std::move(spec), std::move(format)));
}

OutputRuleBuilder& OutputRuleBuilder::backward(SparsifierSpec spec, std::string format) {
  return backward(shorthand(std::move(spec), std::move(format)));
}

ParameterRuleBuilder SparsityBuilder::operator[](std::string name) {
  return add_parameter_rule(Selector::exact(std::move(name)));
}

ParameterRuleBuilder SparsityBuilder::regex(std::string pattern) {
  return add_parameter_rule(Selector::regex(std::move(pattern)));
}

OutputRuleBuilder SparsityBuilder::output(std::string module) {
  return add_output_rule(Selector::exact(std::move(module)));
}

OutputRuleBuilder SparsityBuilder::output_regex(std::string pattern) {
  return add_output_rule(Selector::regex(std::move(pattern)));
}

ParameterRuleBuilder SparsityBuilder::add_parameter_rule(Selector selector) {
  schedule_.parameters.push_back(ParameterRule{std::move(selector), std::nullopt, OutputFormat{}, std::nullopt});
  return ParameterRuleBuilder(&schedule_, schedule_.parameters.size() - 1);
}

OutputRuleBuilder SparsityBuilder::add_output_rule(Selector selector) {
  schedule_.outputs.push_back(OutputRule{std::move(selector), {}, {}});
  return OutputRuleBuilder(&schedule_, schedule_.outputs.size() - 1);
}

}  // namespace coppice
