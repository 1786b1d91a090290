// The trainer: runs one YAML training job (train/config.h) through run_job
// (train/job.h).
//
//   trainer --config FILE [--set key.path=value ...] [--resume CKPT]
//           [--allow-changes KEY,...] [--run-dir DIR] [--max-steps N]
//
// A data-parallel job over NCCL runs one trainer per GPU, started by
// tools/launch (or tools/train CONFIG --nproc N, mpirun, srun); rank 0 prints
// the summary.
//
// Exit status: 0 after a finished run (the summary, format_summary, on
// stdout); 2 for bad arguments or a bad job (one line on stderr, as
// config_error writes it); 1 for a failure at run time (one line
// "trainer: error: ..." on stderr).

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensor/error.h"
#include "tensor/io/input_file.h"
#include "tensor/runtime_options.h"
#include "train/config.h"
#include "train/config_schema.h"
#include "train/error_quote.h"
#include "train/fingerprint.h"
#include "train/job.h"
#include "train/loop.h"
#include "train/run_paths.h"

namespace {

constexpr const char* kUsage =
    "usage: trainer --config FILE [--set key.path=value ...] [--resume CKPT] [--allow-changes KEY,...]\n"
    "               [--run-dir DIR] [--max-steps N]\n"
    "\n"
    "Runs the training job described by the YAML file FILE (see README.md, \"Configuring a job\").\n"
    "\n"
    "  --config FILE      the job file (required)\n"
    "  --set K=V          override one key of the job, e.g. --set optimizer.lr=0.05 or\n"
    "                     --set training.steps=300 (repeatable; applied before validation)\n"
    "  --resume CKPT      resume from a checkpoint file, or from a directory: the newest\n"
    "                     checkpoint of the run that started there last (overrides\n"
    "                     checkpoint.resume); the checkpoint's job must be this one\n"
    "  --allow-changes K  job settings the resume may change on purpose, comma-separated\n"
    "                     (e.g. optimizer.lr,training.steps; optimizer.* for a section;\n"
    "                     * for every setting that can change); the changes are printed\n"
    "  --run-dir DIR      the run's directory: metrics go to DIR/metrics.jsonl unless\n"
    "                     logging.metrics names a file\n"
    "  --max-steps N      stop once N steps of the job are done (N >= 1), with a checkpoint\n"
    "                     where the job writes them; every schedule (learning rate, mask\n"
    "                     updates, warm-up) stays as the job's full length sets it, so a\n"
    "                     quick trial of any job needs no other change, and --resume goes on\n"
    "  -h, --help         this text\n"
    "\n"
    "--set and --allow-changes may be given more than once; every other option once.\n"
    "Exit status: 0 done (summary on stdout), 1 a run-time error, 2 a bad argument or job.\n";

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume;
  std::vector<std::string> allow_changes;
  std::string run_dir;
  int64_t max_steps = -1;  // -1: the job's own length
  bool help = false;
};

int usage_error(const std::string& message) {
  std::cerr << "trainer: " << coppice::bounded_error_line(message) << " (see trainer --help)\n";
  return coppice::kConfigErrorExitCode;
}

// The options that take a value, as data. One that holds a single value is
// refused when given twice, whichever it is (which of the two was meant?);
// a repeatable one adds each occurrence.
struct OptionSpec {
  const char* name;
  bool repeatable;
};
constexpr OptionSpec kOptions[] = {
    {"--config", false},       {"--set", true},      {"--resume", false},
    {"--allow-changes", true}, {"--run-dir", false}, {"--max-steps", false},
};

const OptionSpec* find_option(const std::string& name) {
  for (const OptionSpec& o : kOptions)
    if (name == o.name) return &o;
  return nullptr;
}

std::string unknown_argument(const std::string& arg) {
  std::vector<std::string> names = {"--help"};
  for (const OptionSpec& o : kOptions) names.push_back(o.name);
  const std::string best = coppice::closest_match(arg.substr(0, arg.find('=')), names);
  return "unknown argument " + coppice::quote_for_error(arg) + (best.empty() ? "" : "; did you mean '" + best + "'?");
}

// Applies one option's value; returns 0 or the exit code of a bad value
// (after printing it).
int apply_option(const std::string& name, const std::string& value, Args& a) {
  if (name == "--config") {
    a.config = value;
  } else if (name == "--set") {
    if (value.find('=') == std::string::npos)
      return usage_error("--set needs key.path=value, got " + coppice::quote_for_error(value));
    a.overrides.push_back(value);
  } else if (name == "--resume") {
    a.resume = value;
  } else if (name == "--allow-changes") {
    std::stringstream items(value);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (!item.empty()) a.allow_changes.push_back(item);
    }
    if (absl::Status st = coppice::check_allowed_changes(a.allow_changes); !st.ok())
      return usage_error("--allow-changes: " + std::string(st.message()));
  } else if (name == "--max-steps") {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(value, &used);
    } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != value.size() || n < 1)
      return usage_error("--max-steps needs a whole number of steps >= 1, got " + coppice::quote_for_error(value));
    a.max_steps = n;
  } else {
    a.run_dir = value;
  }
  return 0;
}

// --resume names a checkpoint file or a directory of them; anything else (a
// FIFO, a device) is refused here, by stat, before any reader opens it.
int check_resume_path(const std::string& path) {
  const absl::StatusOr<mode_t> type = coppice::file_type_at(path);
  if (!type.ok()) return usage_error("--resume: " + coppice::quote_for_error(path) + " not found");
  if (!S_ISREG(*type) && !S_ISDIR(*type)) {
    return usage_error("--resume: " + coppice::quote_for_error(path) + " is " + coppice::file_type_name(*type) +
                       ", not a checkpoint file or directory");
  }
  return 0;
}

// Returns 0, or the exit code of a bad argument (after printing it).
int parse_args(int argc, char** argv, Args& a) {
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      a.help = true;
      return 0;
    }
    std::string value;
    bool has_value = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const OptionSpec* option = find_option(arg);
    if (option == nullptr) return usage_error(unknown_argument(argv[i]));
    if (!has_value) {
      if (i + 1 >= argc) return usage_error(arg + " needs a value");
      value = argv[++i];
    }
    if (!option->repeatable && !given.insert(arg).second) return usage_error(arg + " given twice (it takes one value)");
    if (int rc = apply_option(arg, value, a); rc != 0) return rc;
  }
  if (a.config.empty()) return usage_error("--config FILE is required");
  if (!a.resume.empty()) return check_resume_path(a.resume);
  return 0;
}

// The summary on stdout, checked: a run whose summary was lost (a full disk
// behind a redirection, a closed descriptor) does not end 0.
int write_summary(const std::string& text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return 0;
  const int err = errno;
  std::cerr << "trainer: error: cannot write the summary to standard output: "
            << (err != 0 ? std::strerror(err) : "short write") << "; the run itself finished\n";
  return 1;
}

int run(int argc, char** argv) {
  Args args;
  if (int rc = parse_args(argc, argv, args); rc != 0) return rc;
  if (args.help) {
    std::cout << kUsage;
    return 0;
  }
  // The COPPICE_* runtime options, read and checked now rather than at the
  // first kernel that asks, so that a bad value stops the run before it starts.
  try {
    coppice::runtime_options();
  } catch (const coppice::Error& e) {
    std::cerr << "trainer: " << coppice::bounded_error_line(e.what()) << "\n";
    return coppice::kConfigErrorExitCode;
  }

  // Validated once: the run takes over the model and schedule validation built.
  absl::StatusOr<coppice::ValidatedJob> job = coppice::load_validated_job(args.config, args.overrides);
  if (!job.ok()) {
    // Messages about the file itself already start with its path.
    const std::string message(job.status().message());
    const std::string prefix = args.config + ": ";
    if (message.rfind(prefix, 0) == 0) {
      return coppice::config_error(args.config, absl::Status(job.status().code(), message.substr(prefix.size())),
                                   std::cerr);
    }
    return coppice::config_error(args.config, job.status(), std::cerr);
  }

  if (!args.allow_changes.empty() && args.resume.empty() && job->config.checkpoint.resume.empty())
    return usage_error("--allow-changes needs --resume or checkpoint.resume (it says what a resume may change)");
  if (absl::Status st =
          coppice::check_outputs_apart(coppice::run_paths(job->config, args.config, args.resume, args.run_dir));
      !st.ok())
    return coppice::config_error(args.config, st, std::cerr);

  coppice::JobRunOptions opts;
  opts.resume = args.resume;
  opts.allow_changes = args.allow_changes;
  opts.run_dir = args.run_dir;
  opts.stop_at_step = args.max_steps;
  opts.progress_out = stderr;
  if (!args.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.run_dir, ec);
    if (ec) {
      std::cerr << "trainer: error: "
                << coppice::bounded_error_line("cannot create the run directory " +
                                               coppice::quote_for_error(args.run_dir) + ": " + ec.message())
                << "\n";
      return 1;
    }
  }

  opts.summary_on_progress = false;  // printed once, on stdout, below
  const coppice::TrainingSummary summary = coppice::run_job(std::move(*job), opts);
  if (summary.rank == 0) return write_summary(coppice::format_summary(summary));  // once per job
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const coppice::Error& e) {
    std::cerr << "trainer: error: " << coppice::bounded_error_line(e.what()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "trainer: error: " << coppice::bounded_error_line(e.what()) << "\n";
  }
  return 1;
}
