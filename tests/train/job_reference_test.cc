// docs/job_reference.md is what the job schema makes now
// (train/job_reference.h): the page cannot drift from the keys the loader
// takes. After a schema change, tools/update_docs rewrites it.
#include "train/job_reference.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "train/config_schema.h"

namespace coppice {
namespace {

TEST(JobReference, TheCheckedInPageIsTheGeneratedOne) {
  std::ifstream in("docs/job_reference.md");
  ASSERT_TRUE(in.good()) << "docs/job_reference.md is missing; run tools/update_docs";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == job_reference_markdown())
      << "docs/job_reference.md differs from the schema (train/config_schema.cc): run tools/update_docs and "
         "commit the page";
}

// Every key of the schema is on the page, each in its own table row.
TEST(JobReference, EveryKeyHasARow) {
  const std::string page = job_reference_markdown();
  for (const SchemaKey& key : job_schema()) {
    if (key.path.empty()) continue;  // the root
    if (key.path.find_first_of(".[") == std::string::npos &&
        (key.type == KeyType::kSection || key.type == KeyType::kList)) {
      EXPECT_NE(page.find("## `" + key.path + "`"), std::string::npos) << key.path;
    } else {
      EXPECT_NE(page.find("| `" + key.path + "` |"), std::string::npos) << key.path;
    }
  }
  // Ranges come along: the batch size's bounds, a density's open end.
  EXPECT_NE(page.find("| `data.batch_size` | an integer, in [1, 16777216] |"), std::string::npos);
}

}  // namespace
}  // namespace coppice
