// A loopback debuginfod server for one command: the real `debuginfod` (Debian package debuginfod)
// serving a directory, inside a private network namespace so that no other process sees it.
#pragma once

#include <string>

namespace hpd::testing {

// Writes work_dir/debuginfod-session.sh and returns the command line that runs it (as root:
// `unshare --net`, bounded by `timeout`). The script brings up lo, starts debuginfod on a random
// port scanning `served_dir` (its database and log in work_dir), waits until the server answers
// for `ready_file`'s build-id with `kind` ("debuginfo" or "executable"), then runs `command` with
// DEBUGINFOD_URLS naming the server and DEBUGINFOD_CACHE_PATH=work_dir/cache, stops the server and
// exits with the command's status (90 when lo cannot be brought up). The server's log is
// work_dir/server.log. The whole session is ended after `timeout_s` (a bound against a hang, not a
// measure of speed).
std::string debuginfod_session(const std::string& work_dir, const std::string& served_dir,
                               const std::string& ready_file, const std::string& kind,
                               const std::string& command, int timeout_s = 60);

// The tools the session needs, or "" when all are installed: the first one missing.
std::string debuginfod_session_missing_tool();

}  // namespace hpd::testing
