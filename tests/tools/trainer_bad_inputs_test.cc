// The bad-input table of the trainer binary (issue 15): every case of
// trainer_bad_inputs.yaml, and a sweep of hostile numbers over every numeric
// key of the job schema, run against the `trainer` built in the same
// configuration as this test (the gcc build in tools/test's first pass; clang
// with AddressSanitizer and UBSan in its fuzz pass).
//
// A case writes its job and files into a scratch directory, runs trainer
// setup jobs there (to make checkpoints), corrupts files, then runs the
// trainer with the case's arguments (working directory: the scratch
// directory) and checks:
//   * the exit code (2: a bad job or argument; 1: a failure at run time);
//   * stderr's last line matches the case's regex (names the key, file or field);
//   * no sanitizer report and no signal, within the time limit;
//   * no file left half-written: no new *.tmp* file anywhere in the scratch
//     directory, and (when the run failed) every file there before the run
//     is unchanged.
// The table's header documents its fields. A failure prints the command, the
// exit status and stderr's tail; the scratch directory is kept under
// $TEST_TMPDIR/<case> (run the test binary by hand with TEST_TMPDIR set to
// keep it).
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/io/safetensors.h"
#include "tests/data/test_util.h"
#include "train/checkpoint.h"
#include "train/config_schema.h"
#include "yaml-cpp/yaml.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COPPICE_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define COPPICE_UNDER_ASAN 1
#endif

namespace coppice {
namespace {

namespace fs = std::filesystem;

std::string runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return (fs::path(srcdir != nullptr ? srcdir : ".") / (ws != nullptr ? ws : "coppice") / path).string();
}

const YAML::Node& table() {
  static const YAML::Node t = YAML::LoadFile(runfile("tests/tools/trainer_bad_inputs.yaml"));
  return t;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// ------------------------------------------------------------ the trainer --

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal or the time limit
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
  std::string command;  // for messages

  std::string last_line() const {
    size_t end = err.find_last_not_of("\r\n");
    if (end == std::string::npos) return "";
    size_t begin = err.find_last_of('\n', end);
    return err.substr(begin == std::string::npos ? 0 : begin + 1,
                      end - (begin == std::string::npos ? 0 : begin + 1) + 1);
  }
  std::string status() const {
    if (timed_out) return "timed out after " + std::to_string(static_cast<int>(seconds)) + " s";
    if (signal != 0) return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "exit " + std::to_string(exit_code);
  }
  std::string tail(size_t lines = 15) const {
    std::vector<std::string> all;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);) all.push_back(l.size() > 2000 ? l.substr(0, 2000) + "..." : l);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
    return out;
  }
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Starts the trainer with `args` in `dir` (its own process group), stdout and
// stderr to `out_path` and `err_path`.
pid_t spawn_trainer(const fs::path& dir, const std::vector<std::string>& args, const fs::path& out_path,
                    const fs::path& err_path) {
  const std::string trainer = runfile("tools/trainer/trainer");
  std::vector<std::string> argv_s = {trainer};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    const int in = ::open("/dev/null", O_RDONLY);
    // O_TRUNC only for regular files: a case's stdout may be a device (/dev/full).
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | (fs::is_regular_file(out_path) ? O_TRUNC : 0), 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    // Huge requests are refused rather than paged in: AddressSanitizer's
    // allocator returns null above 2 GiB (as a failed malloc would) and stops
    // the run past 4 GiB of RSS; without it, the address space is capped.
    ::setenv("ASAN_OPTIONS",
             "allocator_may_return_null=1:max_allocation_size_mb=2048:hard_rss_limit_mb=4096:detect_leaks=1", 0);
    ::setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 0);
#ifndef COPPICE_UNDER_ASAN
    struct rlimit as {};
    as.rlim_cur = as.rlim_max = rlim_t{8} << 30;
    ::setrlimit(RLIMIT_AS, &as);
#endif
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Runs the trainer with `args` in `dir`, stdout and stderr to files there
// (<tag>.out, <tag>.err; stdout to `stdout_path` instead when given), within
// `timeout_s`.
RunResult run_trainer(const fs::path& dir, const std::vector<std::string>& args, double timeout_s,
                      const std::string& tag, const std::string& stdout_path = "") {
  RunResult r;
  r.command = "cd " + shell_quote(dir.string()) + " && " + shell_quote(runfile("tools/trainer/trainer"));
  for (const std::string& a : args) r.command += " " + shell_quote(a);
  const fs::path out_path = stdout_path.empty() ? dir / (tag + ".out") : fs::path(stdout_path);
  const fs::path err_path = dir / (tag + ".err");
  if (!stdout_path.empty()) r.command += " > " + shell_quote(stdout_path);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = spawn_trainer(dir, args, out_path, err_path);
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r.seconds > timeout_s) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  if (stdout_path.empty()) r.out = slurp(out_path.string());
  r.err = slurp(err_path.string());
  return r;
}

// A trainer run that a case runs beside (two runs at once): started before
// the case, ready once its `wait_for` file exists, killed with its process
// group after the case.
class BackgroundRun {
 public:
  BackgroundRun(const fs::path& dir, const std::vector<std::string>& args, const fs::path& wait_for, double timeout_s)
      : dir_(dir) {
    pid_ = spawn_trainer(dir, args, dir / "background.out", dir / "background.err");
    const auto start = std::chrono::steady_clock::now();
    while (!fs::exists(wait_for)) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("the background run ended before " + wait_for.string() + " appeared:\n" +
                                 slurp((dir / "background.err").string()));
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s)
        throw std::runtime_error("the background run did not write " + wait_for.string() + " in time");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~BackgroundRun() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    fs::remove(dir_ / "background.out");
    fs::remove(dir_ / "background.err");
  }
  BackgroundRun(const BackgroundRun&) = delete;
  BackgroundRun& operator=(const BackgroundRun&) = delete;

 private:
  fs::path dir_;
  pid_t pid_ = -1;
};

// --------------------------------------------------------- files of a case --

std::vector<std::string> strings(const YAML::Node& list) {
  std::vector<std::string> out;
  if (list) {
    for (const YAML::Node& n : list) out.push_back(n.as<std::string>());
  }
  return out;
}

// The bytes of a `parts` list, each repeated `times` (default 1):
//   {text: S}                  S
//   {hex: "00ff"}              the bytes
//   {u64le: N} / {u32be: N}    N in 8 little-endian / 4 big-endian bytes
//   {numbered: "k{}", count: N}  the template N times, {} replaced by 0..N-1
//   {safetensors_header: [parts]}  their length as u64le, then them
//   {gzip: [parts]}            a gzip member holding them
std::string bytes_of_parts(const YAML::Node& parts) {
  std::string out;
  for (const YAML::Node& p : parts) {
    std::string one;
    if (p["text"]) {
      one = p["text"].as<std::string>();
    } else if (p["hex"]) {
      const std::string hex = p["hex"].as<std::string>();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) one += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    } else if (p["u64le"]) {
      const uint64_t v = p["u64le"].as<uint64_t>();
      for (int i = 0; i < 8; ++i) one += static_cast<char>((v >> (8 * i)) & 0xff);
    } else if (p["u32be"]) {
      const uint32_t v = p["u32be"].as<uint32_t>();
      for (int i = 3; i >= 0; --i) one += static_cast<char>((v >> (8 * i)) & 0xff);
    } else if (p["numbered"]) {
      const std::string t = p["numbered"].as<std::string>();
      const size_t at = t.find("{}");
      const int64_t count = p["count"].as<int64_t>();
      for (int64_t i = 0; i < count; ++i) {
        one += at == std::string::npos ? t : t.substr(0, at) + std::to_string(i) + t.substr(at + 2);
      }
    } else if (p["safetensors_header"]) {
      const std::string header = bytes_of_parts(p["safetensors_header"]);
      const uint64_t v = header.size();
      for (int i = 0; i < 8; ++i) one += static_cast<char>((v >> (8 * i)) & 0xff);
      one += header;
    } else if (p["gzip"]) {
      one = testing::gzip(bytes_of_parts(p["gzip"]));
    } else {
      throw std::runtime_error("unknown part: " + YAML::Dump(p));
    }
    const int64_t times = p["times"] ? p["times"].as<int64_t>() : 1;
    out.reserve(out.size() + one.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += one;
  }
  return out;
}

// A file entry: {path, text | parts | size (a sparse file of zeros) | dir: true |
// symlink: TARGET | copy: FILE | fifo: true (a named pipe no one writes)}.
void make_file(const fs::path& dir, const YAML::Node& f) {
  const fs::path path = dir / f["path"].as<std::string>();
  fs::create_directories(path.parent_path());
  if (f["dir"]) {
    fs::create_directories(path);
  } else if (f["fifo"]) {
    if (::mkfifo(path.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + path.string() + " failed");
  } else if (f["symlink"]) {
    fs::create_symlink(f["symlink"].as<std::string>(), path);
  } else if (f["size"]) {
    spit(path, "");
    fs::resize_file(path, f["size"].as<uint64_t>());
  } else if (f["parts"]) {
    spit(path, bytes_of_parts(f["parts"]));
  } else if (f["copy"]) {
    fs::copy_file(dir / f["copy"].as<std::string>(), path, fs::copy_options::overwrite_existing);
  } else {
    spit(path, f["text"] ? f["text"].as<std::string>() : std::string());
  }
}

// `name` itself when it is a file; a directory's newest ckpt-*.safetensors.
fs::path checkpoint_file(const fs::path& dir, const std::string& name) {
  const fs::path p = dir / name;
  if (!fs::is_directory(p)) return p;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(p)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ckpt-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) {
      found.push_back(e.path());
    }
  }
  if (found.empty()) throw std::runtime_error("no checkpoint in " + p.string());
  std::sort(found.begin(), found.end());
  return found.back();
}

// Where tensor `name`'s bytes lie in a safetensors file: [begin, end) from
// the file's start, found in its header (written by the project's writer).
std::pair<uint64_t, uint64_t> tensor_bytes(const std::string& file, const std::string& name) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file.at(i));
  const std::string header = file.substr(8, n);
  const std::regex re("\"" + std::regex_replace(name, std::regex(R"([.\[\]])"), R"(\$&)") +
                      R"(\":\{[^}]*\"data_offsets\":\[(\d+),(\d+)\])");
  std::smatch m;
  if (!std::regex_search(header, m, re)) throw std::runtime_error("no tensor " + name + " in the header");
  return {8 + n + std::stoull(m[1]), 8 + n + std::stoull(m[2])};
}

// A corruption: {copy: FROM, except: [GLOBS], to: TO} (files copied, e.g.
// between setup runs' directories; FROM's last part may be a glob, TO a
// directory ending in '/'), or {file: PATH (a directory: its newest
// checkpoint), then one of
//   flip: {tensor: NAME, offset: K, bytes: N} | flip: {at: K, bytes: N}  (XOR 0xff; K < 0 from the end)
//   truncate: K          (keep K bytes; K < 0: drop -K)
//   append: TEXT
//   metadata: {key: value}   set (value null: remove) entries, rewriting the file with
//                            the project's safetensors writer: a well-formed file that lies
//   header: TEXT            replace the JSON header (keeping the data)
//   poison: {tensor: NAME}  its first value made NaN, every checksum made afresh
//                            (seal_checkpoint): a well-formed file of a diverged state
//   rename_step: N          rename it to the same name at step N (a name that lies)}
void corrupt(const fs::path& dir, const YAML::Node& c) {
  if (c["copy"]) {
    // FROM's last part may be a glob (fnmatch); `except` globs leave files out.
    const fs::path from = dir / c["copy"].as<std::string>();
    const std::string to = c["to"].as<std::string>();
    const std::vector<std::string> except = strings(c["except"]);
    int copied = 0;
    for (const auto& e : fs::directory_iterator(from.parent_path())) {
      const std::string name = e.path().filename().string();
      if (::fnmatch(from.filename().c_str(), name.c_str(), 0) != 0) continue;
      bool skip = false;
      for (const std::string& x : except) skip = skip || ::fnmatch(x.c_str(), name.c_str(), 0) == 0;
      if (skip) continue;
      const fs::path target = to.back() == '/' ? dir / to / name : dir / to;
      fs::copy_file(e.path(), target, fs::copy_options::overwrite_existing);
      ++copied;
    }
    if (copied == 0) throw std::runtime_error("copy: nothing matches " + from.string());
    return;
  }
  const fs::path path = checkpoint_file(dir, c["file"].as<std::string>());
  if (c["rename_step"]) {
    // ckpt-<step>-<run>.safetensors renamed to another step: a name that lies.
    std::string name = path.filename().string();
    char digits[16];
    std::snprintf(digits, sizeof digits, "%010lld", c["rename_step"].as<long long>());
    name.replace(5, 10, digits);
    fs::rename(path, path.parent_path() / name);
    return;
  }
  std::string bytes = slurp(path.string());
  auto index = [&](int64_t k) { return k < 0 ? static_cast<int64_t>(bytes.size()) + k : k; };
  if (c["flip"]) {
    const YAML::Node f = c["flip"];
    int64_t at = 0;
    if (f["tensor"]) {
      at = static_cast<int64_t>(tensor_bytes(bytes, f["tensor"].as<std::string>()).first) +
           (f["offset"] ? f["offset"].as<int64_t>() : 0);
    } else {
      at = index(f["at"].as<int64_t>());
    }
    const int64_t count = f["bytes"] ? f["bytes"].as<int64_t>() : 1;
    for (int64_t i = 0; i < count; ++i) bytes.at(static_cast<size_t>(at + i)) ^= static_cast<char>(0xff);
  } else if (c["truncate"]) {
    bytes.resize(static_cast<size_t>(index(c["truncate"].as<int64_t>())));
  } else if (c["append"]) {
    bytes += c["append"].as<std::string>();
  } else if (c["metadata"]) {
    absl::StatusOr<SafetensorsFile> file = parse_safetensors(bytes, path.string());
    if (!file.ok()) throw std::runtime_error(std::string(file.status().message()));
    for (const auto& kv : c["metadata"]) {
      const std::string key = kv.first.as<std::string>();
      if (kv.second.IsNull()) {
        file->metadata.erase(key);
      } else {
        file->metadata[key] = kv.second.as<std::string>();
      }
    }
    absl::StatusOr<std::string> again = serialize_safetensors(file->tensors, file->metadata);
    if (!again.ok()) throw std::runtime_error(std::string(again.status().message()));
    bytes = *again;
  } else if (c["header"]) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(i));
    const std::string header = c["header"].as<std::string>();
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes = prefix + header + bytes.substr(8 + n);
  } else if (c["poison"]) {
    absl::StatusOr<SafetensorsFile> file = parse_safetensors(bytes, path.string());
    if (!file.ok()) throw std::runtime_error(std::string(file.status().message()));
    const std::string name = c["poison"]["tensor"].as<std::string>();
    const Tensor* t = file->find(name);
    if (t == nullptr || t->numel() == 0) throw std::runtime_error("poison: no tensor " + name);
    if (t->dtype() == DType::kF32) {
      t->data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    } else if (t->dtype() == DType::kF64) {
      t->data<double>()[0] = std::numeric_limits<double>::quiet_NaN();
    } else {
      throw std::runtime_error("poison: " + name + " is not f32 or f64");
    }
    absl::StatusOr<std::string> again = seal_checkpoint(std::move(*file));
    if (!again.ok()) throw std::runtime_error(std::string(again.status().message()));
    bytes = *again;
  } else {
    throw std::runtime_error("unknown corruption: " + YAML::Dump(c));
  }
  spit(path, bytes);
}

// ------------------------------------------------------------------ jobs --

// `base` with `edit` merged in: maps merge key by key, a null deletes the
// key, anything else replaces.
YAML::Node merged(const YAML::Node& base, const YAML::Node& edit) {
  if (!edit.IsMap() || !base.IsMap()) return YAML::Clone(edit);
  YAML::Node out = YAML::Clone(base);
  for (const auto& kv : edit) {
    const std::string key = kv.first.as<std::string>();
    if (kv.second.IsNull()) {
      out.remove(key);
    } else if (out[key]) {
      out[key] = merged(out[key], kv.second);
    } else {
      out[key] = YAML::Clone(kv.second);
    }
  }
  return out;
}

// "{file:PATH}" in `s` replaced by the contents of `dir`/PATH (values too
// large or too odd to write in the table: a 40 KB regex, a deep --set value).
std::string with_files(std::string s, const fs::path& dir) {
  for (size_t at; (at = s.find("{file:")) != std::string::npos;) {
    const size_t end = s.find('}', at);
    if (end == std::string::npos) throw std::runtime_error("unterminated {file:...} in " + s);
    s.replace(at, end + 1 - at, slurp((dir / s.substr(at + 6, end - at - 6)).string()));
  }
  return s;
}

void substitute_files(YAML::Node node, const fs::path& dir) {
  if (node.IsScalar()) {
    const std::string v = node.Scalar();
    if (v.find("{file:") != std::string::npos) node = with_files(v, dir);
  } else if (node.IsSequence()) {
    for (YAML::Node item : node) substitute_files(item, dir);
  } else if (node.IsMap()) {
    for (auto kv : node) substitute_files(kv.second, dir);
  }
}

// The text of job `spec`: {job: NAME (a base job of the table; default tiny),
// edit: MAP} or {job_text: TEXT}, with {file:PATH} values read from `dir`.
std::string job_text(const YAML::Node& spec, const fs::path& dir) {
  if (spec["job_text"]) return spec["job_text"].as<std::string>();
  const std::string name = spec["job"] ? spec["job"].as<std::string>() : "tiny";
  const YAML::Node base_text = table()["jobs"][name];
  if (!base_text) throw std::runtime_error("no base job '" + name + "' in the table");
  YAML::Node job = YAML::Load(base_text.as<std::string>());
  if (spec["edit"]) job = merged(job, spec["edit"]);
  substitute_files(job, dir);
  YAML::Emitter e;
  e << job;
  return std::string(e.c_str()) + "\n";
}

// ----------------------------------------------------------- the checks --

struct FileState {
  uint64_t size = 0;
  std::string bytes;  // for files up to 16 MiB
  int64_t mtime = 0;
};

std::map<std::string, FileState> snapshot(const fs::path& dir) {
  std::map<std::string, FileState> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (name.size() > 4 && (name.rfind(".out") == name.size() - 4 || name.rfind(".err") == name.size() - 4)) continue;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    FileState s;
    s.size = static_cast<uint64_t>(st.st_size);
    s.mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (s.size <= (16u << 20)) s.bytes = slurp(p.string());
    out[fs::relative(p, dir).string()] = std::move(s);
  }
  return out;
}

const char* const kSanitizerMarks[] = {"ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
                                       "ERROR: UndefinedBehaviorSanitizer", "AddressSanitizer:DEADLYSIGNAL"};

struct Expectation {
  std::set<int> exits;
  std::string line;    // regex searched in stderr's last line when the run failed ("" = any)
  std::string output;  // regex searched in stdout and stderr ("" = any)
};

// Every check of the file comment; returns the problems, "" when none.
std::string check_run(const RunResult& r, const Expectation& want, const std::map<std::string, FileState>& before,
                      const fs::path& dir) {
  std::ostringstream problems;
  for (const char* mark : kSanitizerMarks) {
    if (r.err.find(mark) != std::string::npos) problems << "  sanitizer report (" << mark << ")\n";
  }
  if (r.timed_out || r.signal != 0) {
    problems << "  " << r.status() << "\n";
  } else if (want.exits.count(r.exit_code) == 0) {
    std::string codes;
    for (int c : want.exits) codes += (codes.empty() ? "" : " or ") + std::to_string(c);
    problems << "  exit " << r.exit_code << ", expected " << codes << "\n";
  }
  // A finished run (where a case allows one) need not name anything.
  if (!want.line.empty() && r.exit_code != 0 && !std::regex_search(r.last_line(), std::regex(want.line))) {
    problems << "  stderr's last line does not match /" << want.line << "/: " << r.last_line() << "\n";
  }
  if (!want.output.empty() && !std::regex_search(r.out + r.err, std::regex(want.output))) {
    problems << "  neither stdout nor stderr matches /" << want.output << "/\n";
  }
  const std::map<std::string, FileState> after = snapshot(dir);
  for (const auto& [name, s] : after) {
    // A writer killed at the time limit may leave its temporary file (the
    // checkpoint writer removes it on its next write); anything else may not.
    if (!r.timed_out && before.count(name) == 0 && name.find(".tmp") != std::string::npos) {
      problems << "  half-written file left behind: " << name << "\n";
    }
  }
  if (r.exit_code != 0) {
    for (const auto& [name, s] : before) {
      auto it = after.find(name);
      if (it == after.end()) {
        problems << "  " << name << " was deleted by a failed run\n";
      } else if (it->second.size != s.size || it->second.bytes != s.bytes ||
                 (s.size > (16u << 20) && it->second.mtime != s.mtime)) {
        problems << "  " << name << " was changed by a failed run\n";
      }
    }
  }
  return problems.str();
}

void report(const std::string& problems, const RunResult& r) {
  ADD_FAILURE() << "\n"
                << problems << "  command: " << r.command << "\n  " << r.status() << " after "
                << static_cast<int>(r.seconds * 1000) << " ms; stderr's last lines:\n"
                << r.tail();
}

Expectation expectation(const YAML::Node& c) {
  Expectation e;
  const YAML::Node exit = c["exit"];
  if (!exit) throw std::runtime_error("case without exit");
  if (exit.IsSequence()) {
    for (const YAML::Node& x : exit) e.exits.insert(x.as<int>());
  } else {
    e.exits.insert(exit.as<int>());
  }
  if (c["line"]) e.line = c["line"].as<std::string>();
  if (c["output"]) e.output = c["output"].as<std::string>();
  return e;
}

double timeout_of(const YAML::Node& c) {
  double t = c["timeout"] ? c["timeout"].as<double>() : table()["defaults"]["timeout"].as<double>();
#ifdef COPPICE_UNDER_ASAN
  t *= table()["defaults"]["sanitizer_time_factor"].as<double>();
#endif
  return t;
}

fs::path scratch_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base != nullptr ? base : "/tmp") / "trainer_bad_inputs" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// ---------------------------------------------------------- table cases --

struct Case {
  std::string name;
  YAML::Node node;
};

std::vector<Case> table_cases() {
  std::vector<Case> out;
  std::set<std::string> names;
  for (const YAML::Node& c : table()["cases"]) {
    const std::string name = c["name"].as<std::string>();
    if (!names.insert(name).second) throw std::runtime_error("duplicate case name " + name);
    out.push_back({name, c});
  }
  return out;
}

// gtest names a failing case by this (not by the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TrainerBadInput : public ::testing::TestWithParam<Case> {};

TEST_P(TrainerBadInput, RefusedCleanly) {
  const Case& tc = GetParam();
  const YAML::Node& c = tc.node;
  SCOPED_TRACE(c["about"] ? c["about"].as<std::string>() : tc.name);
  const fs::path dir = scratch_dir(tc.name);

  // The case's files, setup runs (each must succeed), corruptions.
  for (const YAML::Node& f : c["files"]) make_file(dir, f);
  int n = 0;
  for (const YAML::Node& s : c["setup"]) {
    const std::string job = "setup" + std::to_string(n) + ".yaml";
    const fs::path cwd = s["cwd"] ? dir / s["cwd"].as<std::string>() : dir;
    fs::create_directories(cwd);
    spit(cwd / job, job_text(s, dir));
    std::vector<std::string> args = {"--config", job};
    for (const std::string& a : strings(s["args"])) args.push_back(a);
    const RunResult r = run_trainer(cwd, args, timeout_of(s), "setup" + std::to_string(n));
    ASSERT_EQ(r.exit_code, 0) << "setup run " << n << " failed (" << r.status() << "):\n"
                              << r.command << "\n"
                              << r.tail();
    fs::remove(cwd / ("setup" + std::to_string(n) + ".out"));
    ++n;
  }
  for (const YAML::Node& x : c["corrupt"]) corrupt(dir, x);

  std::vector<std::string> args;
  if (!c["config"] || c["config"].as<bool>()) {
    spit(dir / "job.yaml", job_text(c, dir));
    args = {"--config", "job.yaml"};
  }
  for (const std::string& a : strings(c["args"])) args.push_back(with_files(a, dir));

  // A run beside the case's (two runs at once), holding what it holds.
  std::optional<BackgroundRun> beside;
  if (const YAML::Node b = c["background"]) {
    spit(dir / "background.yaml", job_text(b, dir));
    std::vector<std::string> bargs = {"--config", "background.yaml"};
    for (const std::string& a : strings(b["args"])) bargs.push_back(a);
    beside.emplace(dir, bargs, dir / b["wait_for"].as<std::string>(), timeout_of(c));
  }
  const std::map<std::string, FileState> before = snapshot(dir);
  const RunResult r =
      run_trainer(dir, args, timeout_of(c), "trainer", c["stdout"] ? c["stdout"].as<std::string>() : std::string());
  const std::string problems = check_run(r, expectation(c), before, dir);
  if (!problems.empty()) report(problems, r);
}

INSTANTIATE_TEST_SUITE_P(Table, TrainerBadInput, ::testing::ValuesIn(table_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---------------------------------------------------------------- sweep --

// Every integer and number key of the job schema (lists of integers too, a
// hostile value standing for the list), set to each of the sweep's hostile
// values on the sweep's job: the trainer either runs (exit 0) or refuses
// with exit 2 and a last line naming the key (or the value); never a crash,
// a sanitizer report or a hang. A key inside a map of named sections
// (sparsity.formats.*.block) is swept in the section the sweep's job
// declares there.
struct SweepPoint {
  std::string key;    // --set path ("sparsity.rules.0.density")
  std::string value;  // YAML scalar
  std::string name;   // test name
};

// `path` with its map of named sections ("sparsity.formats.*.block") at the
// first name the sweep's job gives there, or "" when the path is under
// another free-form map (its cases are their own) or the job names none.
std::string in_named_section(const std::string& path, const YAML::Node& job) {
  const size_t star = path.find(".*.");
  if (star == std::string::npos) return path.find('*') == std::string::npos ? path : "";
  const SchemaKey* each = find_schema_key(path.substr(0, star + 2));
  if (each == nullptr || each->type != KeyType::kSection) return "";
  YAML::Node map = YAML::Clone(job);
  std::stringstream parts(path.substr(0, star));
  for (std::string part; std::getline(parts, part, '.');) {
    const YAML::Node child = map[part];  // reset, not assign: yaml-cpp's = writes through
    map.reset(child);
  }
  if (!map.IsMap() || map.size() == 0) return "";
  return path.substr(0, star + 1) + map.begin()->first.as<std::string>() + path.substr(star + 2);
}

std::vector<SweepPoint> sweep_points() {
  std::vector<SweepPoint> out;
  const YAML::Node sweep = table()["sweep"];
  const YAML::Node job = YAML::Load(sweep["job_text"].as<std::string>());
  for (const SchemaKey& k : job_schema()) {
    if (k.type != KeyType::kInt && k.type != KeyType::kIntList && k.type != KeyType::kDouble) continue;
    std::string key = in_named_section(k.path, job);
    if (key.empty()) continue;
    for (size_t at; (at = key.find("[]")) != std::string::npos;) key.replace(at, 2, ".0");
    const YAML::Node values = sweep[k.type == KeyType::kDouble ? "double_values" : "int_values"];
    int i = 0;
    for (const YAML::Node& v : values) {
      std::string name = key + "_" + std::to_string(i++);
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      out.push_back({key, v.as<std::string>(), name});
    }
  }
  return out;
}

void PrintTo(const SweepPoint& p, std::ostream* os) { *os << p.key << "=" << p.value; }

class TrainerNumericSweep : public ::testing::TestWithParam<SweepPoint> {};

TEST_P(TrainerNumericSweep, RunsOrNamesTheKey) {
  const SweepPoint& p = GetParam();
  const YAML::Node sweep = table()["sweep"];
  const fs::path dir = scratch_dir("sweep_" + p.name);
  spit(dir / "job.yaml", job_text(sweep, dir));
  const std::vector<std::string> args = {"--config", "job.yaml", "--set", p.key + "=" + p.value};
  const std::map<std::string, FileState> before = snapshot(dir);
  const RunResult r = run_trainer(dir, args, timeout_of(sweep), "trainer");
  Expectation want;
  want.exits = {0, 2};
  if (r.exit_code == 2) {
    // The key as the loader names it: sparsity.rules[0].density or sparsity.rules.0.density.
    std::string re = std::regex_replace(p.key, std::regex(R"(\.)"), R"(\.)");
    re = std::regex_replace(re, std::regex(R"(\\\.0)"), R"((\[0\]|\.0))");
    // Or the value itself, where the message is about a key it constrains
    // ("mask_update.end_step: must be > start_step (4611686018427387904)").
    want.line = re + "|" + std::regex_replace(p.value, std::regex(R"([.+\-])"), R"(\$&)");
  }
  const std::string problems = check_run(r, want, before, dir);
  if (!problems.empty()) report(problems, r);
}

INSTANTIATE_TEST_SUITE_P(Schema, TrainerNumericSweep, ::testing::ValuesIn(sweep_points()),
                         [](const ::testing::TestParamInfo<SweepPoint>& info) { return info.param.name; });

}  // namespace
}  // namespace coppice
