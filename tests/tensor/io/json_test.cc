#include "tensor/io/json.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"

namespace coppice::json {
namespace {

Value parse_ok(const std::string& text) {
  absl::StatusOr<Value> v = parse(text);
  EXPECT_TRUE(v.ok()) << text << " -> " << v.status();
  return v.ok() ? *v : Value();
}

std::string parse_error(const std::string& text, const ParseLimits& limits = {}) {
  absl::StatusOr<Value> v = parse(text, limits);
  EXPECT_FALSE(v.ok()) << "accepted: " << text;
  return v.ok() ? "" : std::string(v.status().message());
}

TEST(JsonTest, ParsesScalars) {
  EXPECT_TRUE(parse_ok("null").is_null());
  EXPECT_TRUE(parse_ok(" true ").as_bool());
  EXPECT_FALSE(parse_ok("false").as_bool());
  EXPECT_EQ(parse_ok("0").as_integer(), 0);
  EXPECT_EQ(parse_ok("-0").as_integer(), 0);
  EXPECT_EQ(parse_ok("12345").as_integer(), 12345);
  EXPECT_EQ(parse_ok("9223372036854775807").as_integer(), INT64_MAX);
  EXPECT_EQ(parse_ok("-9223372036854775808").as_integer(), INT64_MIN);
  EXPECT_EQ(parse_ok("\"hi\"").as_string(), "hi");
  EXPECT_EQ(parse_ok("\t\r\n\"x\"\n").as_string(), "x");
}

TEST(JsonTest, ParsesContainersInOrder) {
  Value v = parse_ok(R"({"b": [1, [2, {}], []], "a": {"x": "y"}, "c": null})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.members().size(), 3u);
  EXPECT_EQ(v.members()[0].first, "b");
  EXPECT_EQ(v.members()[1].first, "a");
  EXPECT_EQ(v.members()[2].first, "c");
  const Value* b = v.find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->items().size(), 3u);
  EXPECT_EQ(b->items()[0].as_integer(), 1);
  EXPECT_TRUE(b->items()[1].items()[1].is_object());
  EXPECT_TRUE(b->items()[2].is_array());
  EXPECT_EQ(v.find("a")->find("x")->as_string(), "y");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_TRUE(parse_ok("{}").members().empty());
  EXPECT_TRUE(parse_ok("[ ]").items().empty());
}

TEST(JsonTest, DecodesEscapes) {
  EXPECT_EQ(parse_ok(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse_ok(R"("\u0041\u00e9\u20AC")").as_string(), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(parse_ok(R"("\ud83d\ude00")").as_string(), "\xf0\x9f\x98\x80");  // U+1F600 from a surrogate pair
  EXPECT_EQ(parse_ok(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(parse_ok("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"").as_string(), "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(JsonTest, QuoteRoundTrips) {
  std::string tricky = std::string("q\"b\\s/\x01\x1f\x7f\n\t") + "\xc3\xa9" + std::string(1, '\0');
  std::string q = quote(tricky);
  EXPECT_EQ(q.front(), '"');
  EXPECT_EQ(parse_ok(q).as_string(), tricky);
  EXPECT_EQ(quote("plain"), "\"plain\"");
}

TEST(JsonTest, RejectsMalformedInput) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "expected a value"},
      {"   ", "expected a value"},
      {"{", "expected a string key"},
      {"{\"a\"", "expected ':'"},
      {"{\"a\":", "expected a value"},
      {"{\"a\":1", "expected ',' or '}'"},
      {"{\"a\":1,}", "expected a string key"},
      {"[1,]", "expected a value"},
      {"[1 2]", "expected ',' or ']'"},
      {"{a:1}", "expected a string key"},
      {"{\"a\":1}}", "trailing"},
      {"{} x", "trailing"},
      {"1.5", "only integers"},
      {"1e3", "only integers"},
      {"01", "leading zeros"},
      {"-", "expected a digit"},
      {"+1", "expected a value"},
      {"9223372036854775808", "64-bit range"},
      {"-9223372036854775809", "64-bit range"},
      {"99999999999999999999999", "64-bit range"},
      {"tru", "expected 'true'"},
      {"nul", "expected 'null'"},
      {"'a'", "expected a value"},
      {"\"abc", "unterminated string"},
      {"\"a\\", "unterminated string"},
      {"\"\\x\"", "invalid escape"},
      {"\"\\u12zz\"", "invalid hex digit"},
      {"\"\\u12", "truncated"},
      {"\"\\ud800\"", "high surrogate"},
      {"\"\\ud800\\u0041\"", "high surrogate"},
      {"\"\\udc00\"", "unpaired low surrogate"},
      {"\"a\nb\"", "control character"},
      {"\"\xff\"", "invalid UTF-8"},
      {"\"\xc3", "truncated UTF-8"},
      {"\"\xc3\"", "continuation"},
      {"\"\xc3\x41\"", "continuation"},
      {"\"\xc0\xaf\"", "invalid UTF-8"},          // overlong '/'
      {"\"\xed\xa0\x80\"", "invalid UTF-8"},      // encoded surrogate
      {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"},  // above U+10FFFF
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
  };
  for (const Case& c : cases) {
    std::string msg = parse_error(c.text);
    EXPECT_NE(msg.find(c.message), std::string::npos) << "input " << c.text << " gave: " << msg;
    EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;
  }
}

TEST(JsonTest, EnforcesLimits) {
  ParseLimits limits;
  limits.max_depth = 4;
  EXPECT_TRUE(parse("[[[[1]]]]", limits).ok());
  EXPECT_EQ(parse_error("[[[[[1]]]]]", limits), "json: at byte 4: nesting deeper than 4 levels (limit)");
  EXPECT_NE(parse_error("{\"a\":{\"a\":{\"a\":{\"a\":{}}}}}", limits).find("nesting"), std::string::npos);

  // Default depth limit holds against a very deep input without exhausting the stack.
  std::string deep(1 << 20, '[');
  EXPECT_NE(parse_error(deep).find("nesting deeper than 64"), std::string::npos);

  limits = ParseLimits();
  limits.max_values = 5;
  EXPECT_TRUE(parse("[1,2,3,4]", limits).ok());
  EXPECT_EQ(parse_error("[1,2,3,4,5]", limits), "json: at byte 9: more than 5 values (limit)");

  limits = ParseLimits();
  limits.max_bytes = 8;
  EXPECT_TRUE(parse("[1,2,3]", limits).ok());
  EXPECT_EQ(parse_error("[1,2,3,4]", limits), "json: input of 9 bytes exceeds the limit of 8 bytes");
}

// {"k0":0,"k1":0,...} with `n` members; `key_at` gets where each key begins.
std::string object_of(size_t n, std::vector<size_t>* key_at = nullptr) {
  std::string s = "{";
  s.reserve(n * 12 + 2);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    if (key_at != nullptr) key_at->push_back(s.size());
    s += "\"k" + std::to_string(i) + "\":0";
  }
  return s + "}";
}

// The duplicate-key check is linear: 200,000 keys (a header that took
// minutes when each key was compared with all the ones before it) parse at
// once, whatever the test's time limit.
TEST(JsonTest, ManyKeysParse) {
  const Value v = parse_ok(object_of(200000));
  ASSERT_EQ(v.members().size(), 200000u);
  EXPECT_EQ(v.members().front().first, "k0");
  EXPECT_EQ(v.members().back().first, "k199999");
}

TEST(JsonTest, FindsDuplicateKeysAnywhere) {
  constexpr size_t kKeys = 200000;
  std::vector<size_t> key_at;
  const std::string text = object_of(kKeys, &key_at);
  // The key at `index` renamed to an earlier one: first, middle, last.
  for (const auto& [index, dup] : std::vector<std::pair<size_t, size_t>>{{1, 0}, {kKeys / 2, 7}, {kKeys - 1, 0}}) {
    const std::string old_key = "\"k" + std::to_string(index) + "\"";
    const std::string new_key = "\"k" + std::to_string(dup) + "\"";
    std::string edited = text;
    edited.replace(key_at[index], old_key.size(), new_key);
    EXPECT_EQ(parse_error(edited), str_cat("json: at byte ", key_at[index], ": duplicate key ", new_key))
        << "duplicate at member " << index;
  }
  // Keys are per object: the same key in two objects is no duplicate.
  EXPECT_TRUE(parse("{\"a\":{\"x\":1},\"b\":{\"x\":1,\"y\":{\"x\":1}}}").ok());
}

// One member over the default value limit (the object itself counts as a
// value) is refused at its last value, with the limit named: the members
// before it, as many as a header may hold, were read and checked for
// duplicates in linear time.
TEST(JsonTest, ObjectsAtTheValueLimit) {
  const size_t limit = ParseLimits().max_values;
  const std::string over = object_of(limit);
  EXPECT_EQ(parse_error(over), str_cat("json: at byte ", over.size() - 2, ": more than ", limit, " values (limit)"));
}

TEST(JsonTest, KindNames) {
  EXPECT_STREQ(kind_name(Value::Kind::kObject), "object");
  EXPECT_STREQ(kind_name(parse_ok("[1]").kind()), "array");
  EXPECT_STREQ(kind_name(parse_ok("1").kind()), "integer");
}

}  // namespace
}  // namespace coppice::json
