#include "train/yaml_limits.h"

#include <utility>
#include <vector>

#include "tensor/error.h"
#include "tensor/io/input_file.h"

namespace coppice {
namespace {

std::string limit_text(size_t bytes) { return str_cat(bytes, " bytes (", bytes >> 20, " MiB)"); }

std::string position(size_t line, size_t column) { return str_cat("line ", line, ", column ", column, ": "); }

std::string too_deep_message(const std::string& where, const std::string& at) {
  return str_cat(where, ": ", at, "nested deeper than ", kMaxYamlDepth, " levels (limit)");
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// An upper bound on how deep YAML text nests, found in one pass over the
// bytes with explicit stacks (no recursion). It follows the few things that
// open a collection: block indentation, "- ", "? " and ": " entries (a map or
// list per indentation column, as YAML's own scanner keeps them), a key in
// front of ": ", and flow brackets (with the single-pair map that "[a: b]"
// makes); it skips what cannot, quoted scalars, comments and block scalars
// ("|", ">"). It may count a level too many on odd input, never needs the
// text to be valid, and leaves the exact count to check_yaml_tree.
class NestingScanner {
 public:
  NestingScanner(std::string_view text, int base_depth) : text_(text), base_depth_(base_depth) {}

  // False when the nesting passes kMaxYamlDepth; line() and column() say where.
  bool run();
  size_t line() const { return line_; }
  size_t column() const { return pos_ - line_begin_ + 1; }

 private:
  enum class Mode {
    kLineStart,  // at the beginning of a line
    kNode,       // block context, where a node may begin
    kPlain,      // inside a plain scalar in block context
    kAfter,      // after a quoted scalar, an alias or a flow collection in block context
    kFlow,       // inside flow brackets
    kQuoted,     // inside a quoted scalar
  };
  struct Block {
    size_t column;
    char kind;  // 's' sequence, 'm' map
  };
  struct Flow {
    char open;  // '[' or '{'
    bool pair;  // a single-pair map is open in this flow sequence ("[a: b]")
  };

  bool blank_at(size_t i) const { return i >= text_.size() || is_blank(text_[i]); }
  size_t column0() const { return pos_ - line_begin_; }
  bool too_deep() const {
    return base_depth_ + blocks_.size() + flows_.size() + pairs_ > static_cast<size_t>(kMaxYamlDepth);
  }
  // Consumes the '\n' at pos_.
  void newline() {
    ++pos_;
    ++line_;
    line_begin_ = pos_;
  }
  // Skips spaces and tabs (and the '\r' of a "\r\n").
  void skip_blanks() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) ++pos_;
  }
  // Moves to the '\n' that ends this line (or the end of the text).
  void to_line_end() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }
  // Skips an anchor, tag or alias name.
  void skip_token() {
    while (pos_ < text_.size() && !is_blank(text_[pos_]) && text_[pos_] != ',' && text_[pos_] != '[' &&
           text_[pos_] != ']' && text_[pos_] != '{' && text_[pos_] != '}') {
      ++pos_;
    }
  }
  // A block collection of `kind` at `column`, following YAML's indentation:
  // deeper columns close, one column holds one map (and the list that may be
  // a value of it at the same column).
  bool open_block(size_t column, char kind) {
    while (!blocks_.empty() && blocks_.back().column > column) blocks_.pop_back();
    if (!blocks_.empty() && blocks_.back().column == column) {
      if (blocks_.back().kind == kind) return true;
      if (kind == 'm') {  // a key at a list's column ends the list
        blocks_.pop_back();
        if (!blocks_.empty() && blocks_.back().column == column && blocks_.back().kind == 'm') return true;
      }
    }
    blocks_.push_back({column, kind});
    return !too_deep();
  }
  // The node that may turn out to be a key begins here.
  void node_begins() {
    key_begin_ = pos_;
    key_line_ = line_;
    key_line_begin_ = line_begin_;
  }
  // A ": " after that node: the first on a line opens a map at its column
  // (and, when that is too deep, is where the message points).
  bool key() {
    if (!key_allowed_) return true;
    key_allowed_ = false;
    if (open_block(key_begin_ - key_line_begin_, 'm')) return true;
    pos_ = key_begin_;
    line_ = key_line_;
    line_begin_ = key_line_begin_;
    return false;
  }

  bool line_start();
  bool node();
  bool plain();
  bool after();
  bool flow();
  void quoted();

  std::string_view text_;
  size_t base_depth_;
  size_t pos_ = 0, line_ = 1, line_begin_ = 0;
  Mode mode_ = Mode::kLineStart;
  std::vector<Block> blocks_;
  std::vector<Flow> flows_;
  size_t pairs_ = 0;  // flows_ entries with pair set
  bool key_allowed_ = false;
  size_t key_begin_ = 0, key_line_ = 1, key_line_begin_ = 0;
  bool flow_node_ = false;  // in a flow, where a node may begin (a quote opens a scalar)
  char quote_ = '"';
  Mode after_quote_ = Mode::kAfter;
  bool block_scalar_ = false;
  long scalar_parent_ = -1;  // the column of the collection holding the block scalar
  long scalar_indent_ = -1;  // its content's indentation, once a line shows it
};

bool NestingScanner::run() {
  while (pos_ < text_.size()) {
    bool ok = true;
    switch (mode_) {
      case Mode::kLineStart: ok = line_start(); break;
      case Mode::kNode: ok = node(); break;
      case Mode::kPlain: ok = plain(); break;
      case Mode::kAfter: ok = after(); break;
      case Mode::kFlow: ok = flow(); break;
      case Mode::kQuoted: quoted(); break;
    }
    if (!ok) return false;
  }
  return true;
}

bool NestingScanner::line_start() {
  size_t indent = 0;
  while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_, ++indent;
  size_t q = pos_;
  while (q < text_.size() && (text_[q] == ' ' || text_[q] == '\t' || text_[q] == '\r')) ++q;
  if (q >= text_.size() || text_[q] == '\n' || text_[q] == '#') {  // blank or comment only
    pos_ = q;
    to_line_end();
    if (pos_ < text_.size()) newline();
    return true;
  }
  if (block_scalar_) {
    const long in = static_cast<long>(indent);
    if (in > scalar_parent_ && (scalar_indent_ < 0 || in >= scalar_indent_)) {
      if (scalar_indent_ < 0) scalar_indent_ = in;
      to_line_end();
      if (pos_ < text_.size()) newline();
      return true;
    }
    block_scalar_ = false;
  }
  if (!flows_.empty()) {  // a flow collection goes on: indentation means nothing there
    mode_ = Mode::kFlow;
    return true;
  }
  const std::string_view rest = text_.substr(pos_);
  if (indent == 0 && (rest.substr(0, 3) == "---" || rest.substr(0, 3) == "...") && blank_at(pos_ + 3)) {
    blocks_.clear();  // a new document
    const bool end = rest[0] == '.';
    pos_ += 3;
    if (end) to_line_end();
    mode_ = end ? Mode::kAfter : Mode::kNode;
    key_allowed_ = true;
    return true;
  }
  if (indent == 0 && rest[0] == '%') {  // a directive
    to_line_end();
    return true;
  }
  while (!blocks_.empty() && blocks_.back().column > indent) blocks_.pop_back();
  mode_ = Mode::kNode;
  key_allowed_ = true;
  return true;
}

bool NestingScanner::node() {
  skip_blanks();
  if (pos_ >= text_.size()) return true;
  const char c = text_[pos_];
  const size_t column = column0();
  if (c == '\n') {
    newline();
    mode_ = Mode::kLineStart;
  } else if ((c == '-' || c == '?' || c == ':') && blank_at(pos_ + 1)) {
    if (!open_block(column, c == '-' ? 's' : 'm')) return false;
    ++pos_;
    key_allowed_ = true;
  } else if (c == '&' || c == '!') {
    skip_token();
  } else if (c == '*') {
    node_begins();
    skip_token();
    mode_ = Mode::kAfter;
  } else if (c == '[' || c == '{') {
    node_begins();
    flows_.push_back({c, false});
    if (too_deep()) return false;
    ++pos_;
    flow_node_ = true;
    mode_ = Mode::kFlow;
  } else if (c == '"' || c == '\'') {
    node_begins();
    quote_ = c;
    after_quote_ = Mode::kAfter;
    ++pos_;
    mode_ = Mode::kQuoted;
  } else if (c == '|' || c == '>') {
    block_scalar_ = true;
    scalar_parent_ = blocks_.empty() ? -1 : static_cast<long>(blocks_.back().column);
    scalar_indent_ = -1;
    to_line_end();
    mode_ = Mode::kAfter;
  } else if (c == '#') {
    to_line_end();
  } else {
    node_begins();
    ++pos_;
    mode_ = Mode::kPlain;
  }
  return true;
}

bool NestingScanner::plain() {
  const char c = text_[pos_];
  if (c == '\n') {
    newline();
    mode_ = Mode::kLineStart;
  } else if (c == ':' && blank_at(pos_ + 1)) {
    if (!key()) return false;
    ++pos_;
    mode_ = Mode::kNode;
  } else if (c == '#' && (text_[pos_ - 1] == ' ' || text_[pos_ - 1] == '\t')) {
    to_line_end();
  } else {
    ++pos_;
  }
  return true;
}

bool NestingScanner::after() {
  skip_blanks();
  if (pos_ >= text_.size()) return true;
  // A line end, a ": " or a comment, as after a plain scalar; anything else
  // is not valid YAML, which yaml-cpp will say.
  mode_ = Mode::kPlain;
  return plain();
}

bool NestingScanner::flow() {
  const char c = text_[pos_];
  const char prev = pos_ > line_begin_ ? text_[pos_ - 1] : ' ';
  switch (c) {
    case '\n':
      newline();
      mode_ = Mode::kLineStart;
      return true;
    case '[':
    case '{':
      flows_.push_back({c, false});
      if (too_deep()) return false;
      ++pos_;
      flow_node_ = true;
      return true;
    case ']':
    case '}':
      if (!flows_.empty()) {
        if (flows_.back().pair) --pairs_;
        flows_.pop_back();
      }
      ++pos_;
      flow_node_ = false;
      if (flows_.empty()) mode_ = Mode::kAfter;
      return true;
    case ',':
      if (!flows_.empty() && flows_.back().pair) {
        flows_.back().pair = false;
        --pairs_;
      }
      ++pos_;
      flow_node_ = true;
      return true;
    case ':':
    case '?': {
      const char next = pos_ + 1 < text_.size() ? text_[pos_ + 1] : ' ';
      const bool indicator = is_blank(next) || next == ',' || next == ']' || next == '}' ||
                             (c == ':' && (prev == '"' || prev == '\'' || prev == ']' || prev == '}'));
      ++pos_;
      if (!indicator) {
        flow_node_ = false;
        return true;
      }
      if (!flows_.empty() && flows_.back().open == '[' && !flows_.back().pair) {
        flows_.back().pair = true;
        ++pairs_;
        if (too_deep()) return false;
      }
      flow_node_ = true;
      return true;
    }
    case '"':
    case '\'':
      ++pos_;
      if (flow_node_) {
        quote_ = c;
        after_quote_ = Mode::kFlow;
        mode_ = Mode::kQuoted;
      }
      return true;
    case '#':
      if (is_blank(prev)) {
        to_line_end();
      } else {
        ++pos_;
        flow_node_ = false;
      }
      return true;
    case '&':
    case '!':
      if (flow_node_) {
        skip_token();  // a node's properties: a node may still begin after them
      } else {
        ++pos_;
      }
      return true;
    case ' ':
    case '\t':
    case '\r': ++pos_; return true;
    default:
      ++pos_;
      flow_node_ = false;
      return true;
  }
}

void NestingScanner::quoted() {
  const char c = text_[pos_];
  if (c == '\n') {
    newline();
  } else if (quote_ == '\'' && c == '\'') {
    if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '\'') {
      pos_ += 2;  // '' is a quote inside
    } else {
      ++pos_;
      mode_ = after_quote_;
      flow_node_ = false;
    }
  } else if (quote_ == '"' && c == '\\') {
    ++pos_;
    if (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  } else if (quote_ == '"' && c == '"') {
    ++pos_;
    mode_ = after_quote_;
    flow_node_ = false;
  } else {
    ++pos_;
  }
}

}  // namespace

absl::Status check_yaml_text(std::string_view text, const std::string& where, const char* what, int base_depth) {
  if (text.size() > kMaxJobYamlBytes) {
    return absl::InvalidArgumentError(
        str_cat(where, ": ", what, " is ", text.size(), " bytes, over the limit of ", limit_text(kMaxJobYamlBytes)));
  }
  NestingScanner scanner(text, base_depth);
  if (!scanner.run()) {
    return absl::InvalidArgumentError(too_deep_message(where, position(scanner.line(), scanner.column())));
  }
  return absl::OkStatus();
}

absl::Status check_yaml_tree(const YAML::Node& root, const std::string& where, int base_depth) {
  // Collections still to open, with the depth of their children. Nodes are
  // counted when found, so the stack never holds more than the limit.
  std::vector<std::pair<YAML::Node, int>> open;
  size_t nodes = 0;
  auto found = [&](const YAML::Node& n, int depth) -> absl::Status {
    if (++nodes > kMaxYamlNodes) {
      return absl::InvalidArgumentError(
          str_cat(where, ": more than ", kMaxYamlNodes, " nodes (limit; an alias counts as a copy of what it names)"));
    }
    if (!n.IsMap() && !n.IsSequence()) return absl::OkStatus();
    if (depth + 1 > kMaxYamlDepth) {
      const YAML::Mark mark = n.Mark();
      return absl::InvalidArgumentError(
          too_deep_message(where, mark.is_null() ? std::string() : position(mark.line + 1, mark.column + 1)));
    }
    open.emplace_back(n, depth + 1);
    return absl::OkStatus();
  };
  absl::Status s = found(root, base_depth);
  while (s.ok() && !open.empty()) {
    const auto [node, depth] = std::move(open.back());
    open.pop_back();
    for (auto it = node.begin(); s.ok() && it != node.end(); ++it) {
      if (node.IsMap()) {
        s = found(it->first, depth);
        if (s.ok()) s = found(it->second, depth);
      } else {
        s = found(*it, depth);
      }
    }
  }
  return s;
}

absl::StatusOr<std::string> read_job_yaml_file(const std::string& path) {
  // A FIFO, a device or a directory is refused without blocking.
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return file.status();
  const auto too_large = [&](const std::string& is) {
    return absl::InvalidArgumentError(
        str_cat(path, ": the job file ", is, " over the limit of ", limit_text(kMaxJobYamlBytes)));
  };
  if (file->size() > kMaxJobYamlBytes) return too_large(str_cat("is ", file->size(), " bytes,"));
  absl::StatusOr<std::string> text = file->read_all(kMaxJobYamlBytes);
  // Longer than its size said: it grew while read, or it is a /proc file.
  if (absl::IsInvalidArgument(text.status())) return too_large("is");
  return text;
}

}  // namespace coppice
