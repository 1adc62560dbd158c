// Tests of the threads the Firefox Profiler is told to show and select first (choose_initial_threads
// and the meta fields the writer emits from it).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "firefox_lint.h"
#include "hpd/export/firefox.h"

namespace hpd {
namespace {

// A thread with `samples` on-CPU samples of 1 ms CPU each (no stack: only busy-ness matters).
void add_thread(Profile& p, int32_t pid, int32_t tid, const std::string& process, const std::string& name,
                bool main, int samples) {
  Thread t;
  t.pid = pid;
  t.tid = tid;
  t.process_name = process;
  t.name = name;
  t.is_main = main;
  for (int i = 0; i < samples; ++i) {
    Sample s;
    s.time_ns = 1000000000ull + uint64_t(i) * 1000000;
    s.cpu_delta_ns = 1000000;
    t.samples.push_back(s);
  }
  p.threads.push_back(std::move(t));
}

// A system-wide recording: 20 single-thread processes "p0".."p19" with 0..19 samples, plus a launched
// command "app" (pid 900) whose main thread is idle and whose worker is quiet.
Profile system_wide(const std::string& target) {
  Profile p;
  p.meta.recording.start_mono_ns = 1000000000;
  p.meta.recording.interval_ns = 1000000;
  p.meta.recording.target = target;
  for (int i = 0; i < 20; ++i)
    add_thread(p, 100 + i, 100 + i, "p" + std::to_string(i), "p" + std::to_string(i), true, i * 10);
  add_thread(p, 900, 900, "app", "app", true, 0);
  add_thread(p, 900, 901, "app", "worker", false, 3);
  return p;
}

TEST(ThreadHints, SystemWideShowsTheBusiestAndSelectsTheBusiest) {
  const Profile p = system_wide("all processes");
  const InitialThreads initial = choose_initial_threads(p);
  // The 8 busiest (threads 12..19, 120..190 samples: all above 5% of 190).
  EXPECT_EQ(initial.visible, (std::vector<uint32_t>{12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(initial.selected, std::vector<uint32_t>{19});
}

TEST(ThreadHints, ALaunchedCommandIsShownAndSelectedEvenWhenQuiet) {
  const Profile p = system_wide("all processes while running /usr/bin/app --fast");
  const InitialThreads initial = choose_initial_threads(p);
  // app's threads (20, 21) besides the 8 busiest; app's worker is its busiest thread: selected.
  EXPECT_EQ(initial.visible, (std::vector<uint32_t>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21}));
  EXPECT_EQ(initial.selected, std::vector<uint32_t>{21});
}

TEST(ThreadHints, ARecordedProcessShowsEveryThreadWithItsMainThread) {
  Profile p;
  p.meta.recording.target = "pid 900";
  add_thread(p, 900, 900, "app", "app", true, 0);
  for (int i = 1; i <= 40; ++i) add_thread(p, 900, 900 + i, "app", "w" + std::to_string(i), false, i);
  const InitialThreads initial = choose_initial_threads(p);
  // The 32 busiest of 41 threads (w9..w40), and the main thread for the process's track.
  ASSERT_EQ(initial.visible.size(), 33u);
  EXPECT_EQ(initial.visible.front(), 0u);
  EXPECT_EQ(initial.visible[1], 9u);
  EXPECT_EQ(initial.visible.back(), 40u);
  EXPECT_EQ(initial.selected, std::vector<uint32_t>{40});
}

TEST(ThreadHints, TheWriterEmitsThemAndTheLinterAcceptsThem) {
  const Profile p = system_wide("all processes while running app");
  std::ostringstream out;
  write_firefox_json(p, out);
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  EXPECT_EQ(doc["meta"]["initialVisibleThreads"], nlohmann::json({12, 13, 14, 15, 16, 17, 18, 19, 20, 21}));
  EXPECT_EQ(doc["meta"]["initialSelectedThreads"], nlohmann::json({21}));
  EXPECT_TRUE(testing::lint_firefox_profile(doc).empty());
  nlohmann::json broken = doc;
  broken["meta"]["initialVisibleThreads"] = {0, 22};
  EXPECT_FALSE(testing::lint_firefox_profile(broken).empty());
}

}  // namespace
}  // namespace hpd
