// The planners' decisions as data (sparse/route_choices.h): pins, measured
// choices recorded once per key, the ranks' agreement, and the records saved
// and restored.
#include "sparse/route_choices.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/error.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::throws_with;

// Every test starts with no pins and no records.
class RouteChoicesTest : public ::testing::Test {
 protected:
  RouteChoicesTest() { clear_route_choices(); }
  ~RouteChoicesTest() override { clear_route_choices(); }
  ScopedRoutePins no_pins_{""};
};

// A measure callback that fails the test when called.
std::vector<double> must_not_measure() {
  ADD_FAILURE() << "measured a key that has a record";
  return {1.0, 2.0};
}

TEST_F(RouteChoicesTest, EveryDecisionDeclaresItsPinsAndMeasuredOnesTheirCandidates) {
  for (const RouteDecision& d : route_decisions()) {
    EXPECT_FALSE(d.pins.empty()) << d.name;
    EXPECT_FALSE(d.doc.empty()) << d.name;
    for (std::string_view c : d.candidates) {
      // A measured route can be pinned by its name.
      EXPECT_NE(std::find(d.pins.begin(), d.pins.end(), c), d.pins.end()) << d.name << " " << c;
    }
  }
}

TEST_F(RouteChoicesTest, PinsParseAndScopesRestore) {
  EXPECT_EQ(route_pin("nm24"), std::nullopt);
  {
    ScopedRoutePins pins("nm24=dense,csr_spmm=rows,bsr_tiles=auto");
    EXPECT_EQ(route_pin("nm24"), "dense");
    EXPECT_EQ(route_pin("csr_spmm"), "rows");
    EXPECT_EQ(route_pin("bsr_tiles"), std::nullopt);  // auto: the planner's
    EXPECT_EQ(route_pins(), "csr_spmm=rows,nm24=dense");
    {
      ScopedRoutePins inner("bsr_tiles=off");
      EXPECT_EQ(route_pin("bsr_tiles"), "off");
      EXPECT_EQ(route_pin("nm24"), std::nullopt);  // replaced, not merged
    }
    EXPECT_EQ(route_pin("nm24"), "dense");
  }
  EXPECT_EQ(route_pin("nm24"), std::nullopt);
}

TEST_F(RouteChoicesTest, BadPinsNameTheEntryAndWhatIsAcceptedAndChangeNothing) {
  ScopedRoutePins kept("nm24=dense");
  EXPECT_TRUE(throws_with([] { set_route_pins("nm24=fast"); }, {"nm24='fast'", "auto, sparse, mma_sp, dense"}));
  EXPECT_TRUE(throws_with([] { set_route_pins("spmm=rows"); }, {"'spmm' is not a route decision", "csr_spmm"}));
  EXPECT_TRUE(throws_with([] { set_route_pins("nm24"); }, {"'nm24' is not decision=value"}));
  EXPECT_TRUE(throws_with([] { set_route_pins("nm24=dense,"); }, {"'' is not decision=value"}));
  EXPECT_TRUE(throws_with([] { set_route_pins("nm24=dense,nm24=sparse"); }, {"nm24 is pinned twice"}));
  EXPECT_TRUE(throws_with([] { set_route_pins("=dense"); }, {"'=dense' is not decision=value"}));
  EXPECT_EQ(route_pin("nm24"), "dense");
  EXPECT_TRUE(throws_with([] { route_pin("no_such"); }, {"internal", "no_such"}));
}

TEST_F(RouteChoicesTest, MeasuresOncePerKeyAndKeepsTheFastest) {
  int calls = 0;
  auto measure = [&] {
    ++calls;
    return std::vector<double>{0.30, 0.10, 0.20};
  };
  bool measured = false;
  EXPECT_EQ(choose_route("csr_spmm", "k1", {"cusparse", "rows", "tiled"}, measure, &measured), 1u);
  EXPECT_TRUE(measured);
  EXPECT_EQ(choose_route("csr_spmm", "k1", {"cusparse", "rows", "tiled"}, measure, &measured), 1u);
  EXPECT_FALSE(measured);
  EXPECT_EQ(calls, 1);
  // The same winner by name where the candidates come in another order.
  EXPECT_EQ(choose_route("csr_spmm", "k1", {"tiled", "rows", "cusparse"}, must_not_measure), 1u);
  // Equal times: the first.
  EXPECT_EQ(choose_route("nm24", "k2", {"sparse", "dense"}, [] { return std::vector<double>{1.0, 1.0}; }), 0u);
  const RouteChoiceStats st = route_choice_stats("csr_spmm");
  EXPECT_EQ(st.measured, 1);
  EXPECT_EQ(st.reused, 2);
  EXPECT_EQ(st.recorded, 1);
  const std::vector<RouteChoice> all = recorded_route_choices();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].decision, "csr_spmm");
  EXPECT_EQ(all[0].winner, "rows");
  EXPECT_EQ(all[0].times_ms, (std::vector<double>{0.30, 0.10, 0.20}));
  EXPECT_EQ(all[0].source, RouteSource::kMeasured);
}

TEST_F(RouteChoicesTest, ARecordedWinnerThatCannotRunHereIsAnError) {
  choose_route("csr_spmm", "k", {"cusparse", "rows", "tiled"}, [] { return std::vector<double>{3, 2, 1}; });
  EXPECT_TRUE(throws_with(
      [] {
        choose_route("csr_spmm", "k", {"cusparse", "rows"}, must_not_measure);
      },
      {"csr_spmm", "'tiled'", "key 'k'", "cusparse, rows"}));
}

TEST_F(RouteChoicesTest, TheAgreementDecides) {
  std::vector<std::string> asked;
  ScopedRouteAgreement agreement([&](const RouteChoice& measured) {
    asked.push_back(measured.winner);
    return size_t{1};  // rank 0 measured the other one faster
  });
  EXPECT_EQ(choose_route("nm24", "k", {"sparse", "dense"}, [] { return std::vector<double>{1.0, 2.0}; }), 1u);
  EXPECT_EQ(asked, std::vector<std::string>{"sparse"});  // this rank's own winner, offered
  EXPECT_EQ(choose_route("nm24", "k", {"sparse", "dense"}, must_not_measure), 1u);
  EXPECT_EQ(asked.size(), 1u);  // asked once per key
  const std::vector<RouteChoice> all = recorded_route_choices();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].winner, "dense");
  EXPECT_EQ(all[0].source, RouteSource::kAgreed);
}

TEST_F(RouteChoicesTest, RecordsRoundTripThroughJsonAndAreNotMeasuredAgain) {
  choose_route("nm24", "H100|x", {"sparse", "dense"}, [] { return std::vector<double>{0.5, 0.25}; });
  choose_route("bsr_sddmm", "H100|y", {"tiles", "dense"}, [] { return std::vector<double>{0.125, 0.5}; });
  const std::string json = route_choices_json();
  EXPECT_NE(json.find("\"times_ns\":[500000,250000]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"source\":\"measured\""), std::string::npos) << json;
  clear_route_choices();
  restore_route_choices(json, "ckpt-100");
  EXPECT_EQ(choose_route("nm24", "H100|x", {"sparse", "dense"}, must_not_measure), 1u);
  EXPECT_EQ(choose_route("bsr_sddmm", "H100|y", {"tiles", "dense"}, must_not_measure), 0u);
  for (const RouteChoice& c : recorded_route_choices()) {
    EXPECT_EQ(c.source, RouteSource::kRestored);
    EXPECT_TRUE(c.times_ms.empty());
  }
  // Restored again (a resumed run that resumes): the same records.
  const std::string again = route_choices_json();
  clear_route_choices();
  restore_route_choices(again, "ckpt-200");
  EXPECT_EQ(route_choice_stats("nm24").recorded, 1);
  restore_route_choices("[]", "empty");
  EXPECT_EQ(recorded_route_choices().size(), 2u);
}

TEST_F(RouteChoicesTest, BadRecordsNameTheOriginAndTheEntryAndRestoreNothing) {
  const std::string good = R"({"decision":"nm24","key":"k","candidates":["sparse","dense"],"winner":"dense"})";
  auto restore = [](const std::string& json) { return [json] { restore_route_choices(json, "ckpt-7"); }; };
  EXPECT_TRUE(throws_with(restore("{"), {"ckpt-7: route choices:"}));
  EXPECT_TRUE(throws_with(restore("{}"), {"ckpt-7", "expected a JSON array, got object"}));
  EXPECT_TRUE(throws_with(restore("[" + good + ",1]"), {"ckpt-7: route choices: entry 1", "expected an object"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"spmm","key":"k","candidates":["a"],"winner":"a"}])"),
                          {"entry 0", "'spmm' is not a measured route decision"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"bsr_tiles","key":"k","candidates":["on"],"winner":"on"}])"),
                          {"'bsr_tiles' is not a measured route decision"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"nm24","key":"k","candidates":["sparse","fast"],"winner":"fast"}])"),
                          {"candidate 'fast' is not one of nm24's (sparse, dense)"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"nm24","key":"k","candidates":["sparse"],"winner":"dense"}])"),
                          {"winner 'dense' is not among its candidates"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"nm24","key":"","candidates":["sparse"],"winner":"sparse"}])"),
                          {"\"key\" must be a non-empty string"}));
  EXPECT_TRUE(throws_with(restore(R"([{"decision":"nm24","key":"k","candidates":[],"winner":"sparse"}])"),
                          {"\"candidates\" must be a non-empty array"}));
  EXPECT_TRUE(throws_with(restore("[" + good + "," + good + "]"), {"entry 1", "nm24 key 'k' appears twice"}));
  EXPECT_TRUE(recorded_route_choices().empty());
}

}  // namespace
}  // namespace coppice
