// The loopback debuginfod session script (debuginfod_server.h).
#include "debuginfod_server.h"

#include <fstream>
#include <random>
#include <stdexcept>

#include "subprocess.h"

namespace hpd::testing {

std::string debuginfod_session(const std::string& work_dir, const std::string& served_dir,
                               const std::string& ready_file, const std::string& kind,
                               const std::string& command, int timeout_s) {
  std::mt19937 rng(std::random_device{}());
  // The namespace has no other user, so any port is free.
  const std::string port = std::to_string(std::uniform_int_distribution<int>(20000, 60000)(rng));
  const std::string url = "http://127.0.0.1:" + port;
  const std::string script_path = work_dir + "/debuginfod-session.sh";
  std::ofstream script(script_path);
  script << "set -u; ip link set lo up || exit 90\n"
         << "debuginfod -F -p " << port << " -d '" << work_dir << "/db.sqlite' -t 0 -g 0 '" << served_dir
         << "' > '" << work_dir << "/server.log' 2>&1 & server=$!\n"
         << "bid=$(readelf -n '" << ready_file
         << "' | awk '/Build ID/{print $3}')\n"
         // Ready when the scan has indexed the file (curl does not touch libdebuginfod's cache).
         << "for i in $(seq 1 150); do curl -sf -o /dev/null " << url << "/buildid/$bid/" << kind
         << " && break; sleep 0.1; done\n"
         << "export DEBUGINFOD_URLS=" << url << " DEBUGINFOD_CACHE_PATH='" << work_dir
         << "/cache' DEBUGINFOD_TIMEOUT=10\n"
         << command << "\nrc=$?\nkill $server; wait $server; exit $rc\n";
  if (!script) throw std::runtime_error("cannot write " + script_path);
  return "timeout " + std::to_string(timeout_s) + " unshare --net sh '" + script_path + "'";
}

std::string debuginfod_session_missing_tool() {
  for (const char* tool : {"debuginfod", "unshare", "ip", "curl", "readelf", "timeout"}) {
    if (!test::have_tool(tool)) return tool;
  }
  return "";
}

}  // namespace hpd::testing
