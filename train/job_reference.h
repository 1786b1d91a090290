// The job reference (docs/job_reference.md) as the job schema makes it: every
// key of config_schema.h with its type, the values it accepts and its line
// of documentation, grouped by top-level section. Generated, never edited by
// hand: tools/update_docs writes it, and a test fails when the checked-in
// file differs from what the schema makes now.
#pragma once

#include <string>

namespace coppice {

// The whole markdown page, ending in a newline.
std::string job_reference_markdown();

}  // namespace coppice
