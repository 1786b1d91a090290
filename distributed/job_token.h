// The job token: a secret every rank of a multi-process job presents in its
// rendezvous hello (distributed/tcp_rendezvous.h), so that a process that can
// reach MASTER_PORT but was not given the token can neither join the job nor
// feed it a hello. It comes from COPPICE_JOB_TOKEN (distributed/launch_env.h);
// tools/launch makes a fresh one for each launch.
//
// A token is 16 to 256 characters of printable ASCII without spaces ('!' to
// '~'): `openssl rand -hex 16` or Python's secrets.token_hex() make one. The
// bounds keep the hello a fixed size and refuse tokens too short to be secret.
//
// The token travels in the clear: it keeps out whoever can reach the port,
// not whoever can watch the network between the ranks (NCCL's own traffic is
// not protected either). It never appears in a log line or an error message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace coppice {

constexpr size_t kMinJobTokenChars = 16;
constexpr size_t kMaxJobTokenChars = 256;

// "" when `token` follows the rules above; otherwise what is wrong with it,
// without quoting it, e.g. "has 8 characters, fewer than 16".
std::string job_token_problem(std::string_view token);

// Whether `a` and `b` are the same token, in a time that depends neither on
// where they differ nor on their lengths: both are padded to
// kMaxJobTokenChars and every byte is compared (a longer string never
// matches). The caller learns one bit, and a timing attacker nothing more.
bool job_tokens_match(std::string_view a, std::string_view b);

}  // namespace coppice
