// What each thread of tests/fixtures/cpu_wait.c measured of itself: its lines
// "cpu_wait: NAME tid N cpu_ns N wall_ns N thread_cpu_ns N run_delay_ns N life_wall_ns N
// life_cpu_ns N life_run_delay_ns N" (the fixture's header says what each is), by thread name.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>

namespace hpd::test {

struct CpuWaitTruth {
  int64_t tid = 0;
  double cpu_ns = 0, wall_ns = 0, thread_cpu_ns = 0, run_delay_ns = -1;
  double life_wall_ns = 0, life_cpu_ns = 0, life_run_delay_ns = -1;
  [[nodiscard]] double waited_ns() const { return wall_ns - cpu_ns; }  // a spinner never blocks
  // Off the CPU over the thread's life (pinning and start barrier included) ...
  [[nodiscard]] double life_off_ns() const { return life_wall_ns - life_cpu_ns; }
  // ... of which runnable, waiting for a CPU (the kernel's run delay), and blocked (the rest).
  [[nodiscard]] double life_blocked_ns() const { return life_off_ns() - life_run_delay_ns; }
};

// The fixture's lines in `out` (its standard output), by thread name.
inline std::map<std::string, CpuWaitTruth> cpu_wait_truth(const std::string& out) {
  std::map<std::string, CpuWaitTruth> truth;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu_wait: ", 0) != 0) continue;
    std::istringstream in(line.substr(10));
    std::string name, key;
    in >> name;
    CpuWaitTruth t;
    double value = 0;
    const std::map<std::string, double*> fields = {{"cpu_ns", &t.cpu_ns},
                                                   {"wall_ns", &t.wall_ns},
                                                   {"thread_cpu_ns", &t.thread_cpu_ns},
                                                   {"run_delay_ns", &t.run_delay_ns},
                                                   {"life_wall_ns", &t.life_wall_ns},
                                                   {"life_cpu_ns", &t.life_cpu_ns},
                                                   {"life_run_delay_ns", &t.life_run_delay_ns}};
    while (in >> key >> value) {
      if (key == "tid") t.tid = static_cast<int64_t>(value);
      if (const auto field = fields.find(key); field != fields.end()) *field->second = value;
    }
    EXPECT_GT(t.tid, 0) << line;
    EXPECT_GE(t.life_run_delay_ns, 0) << "the kernel's schedstat is unreadable: " << line;
    truth[name] = t;
  }
  return truth;
}

}  // namespace hpd::test
