// Prints docs/job_reference.md as the job schema makes it now
// (train/job_reference.h); tools/job_reference writes it into docs/.
#include <iostream>

#include "train/job_reference.h"

int main() {
  std::cout << coppice::job_reference_markdown();
  return 0;
}
