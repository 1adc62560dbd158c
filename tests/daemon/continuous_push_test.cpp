// Privileged integration tests of hpd's continuous push: hpd with 1 s chunks pushes every finished
// chunk to a real OpenTelemetry Collector (built by the suite, tests/support/otel_collector.h), which
// writes what it received; each request must hold the samples of one chunk of the store, every chunk
// up to the cursor exactly once and in order, also when the collector was down first and when hpd
// was restarted in between. An endpoint that answers 503 and one that is down while retention
// removes chunks: hpd keeps sampling, and the status and the log say it. Every wait is on a condition.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "hpd/base/proc_files.h"
#include "hpd/capture/capture.h"
#include "hpd_harness.h"
#include "otel_collector.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

std::string push_config(const std::string& state_dir, const std::string& endpoint,
                        const std::string& extra = "") {
  return "continuous = on\ncontinuous_chunk_seconds = 1\ncontinuous_frequency = 97\nstate_directory = " +
         state_dir + "\notlp_endpoint = " + endpoint + "\npush_retry_max = 2s\n" + extra;
}

HpdStart start_with(const std::string& config) {
  HpdStart start;
  start.config = config;
  return start;
}

// The push entry of hpd's status (null when there is none).
json push_status(const Hpd& hpd) {
  const json status = hpd.status();
  if (!status.contains("continuous") || !status["continuous"].contains("push")) return json();
  const json& push = status["continuous"]["push"];
  return push.is_array() && !push.empty() ? push[0] : json();
}

uint64_t field(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
}

std::string text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// Polls hpd's push status until `done` holds; false after 240 s (a real break).
bool wait_push(const Hpd& hpd, const std::function<bool(const json&)>& done, json* last = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  json p;
  while (std::chrono::steady_clock::now() < deadline) {
    p = push_status(hpd);
    if (!p.is_null() && done(p)) {
      if (last != nullptr) *last = p;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (last != nullptr) *last = p;
  return false;
}

struct ChunkTruth {
  std::string name;
  uint64_t start_unix_ns = 0;
  uint64_t samples = 0;
};

// The finished chunks of the store, oldest first, with their sample counts.
std::vector<ChunkTruth> chunks_on_disk(const std::string& dir) {
  std::vector<ChunkTruth> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("chunk-", 0) != 0 || name.size() < 4 || name.substr(name.size() - 4) != ".hpr") continue;
    const CaptureContents c = read_capture_file(e.path().string());
    out.push_back({name, c.profile.info.start_unix_ns, c.profile.sample_count()});
  }
  std::sort(out.begin(), out.end(), [](const ChunkTruth& a, const ChunkTruth& b) { return a.name < b.name; });
  return out;
}

// The chunk each push cursor file of the store names (the last one its endpoint accepted), by the
// endpoint's URL.
std::map<std::string, std::string> cursors_on_disk(const std::string& dir) {
  std::map<std::string, std::string> cursors;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".hpd-push-", 0) != 0 || name.size() < 7 || name.substr(name.size() - 7) != ".cursor")
      continue;
    const std::string content = read_text_file(e.path().string());
    const size_t eol = content.find('\n');
    if (eol != std::string::npos)
      cursors[content.substr(0, eol)] = content.substr(eol + 1, content.find('\n', eol + 1) - eol - 1);
  }
  return cursors;
}

// The cursor of the store's one endpoint.
std::string cursor_on_disk(const std::string& dir) {
  const auto cursors = cursors_on_disk(dir);
  return cursors.empty() ? "" : cursors.begin()->second;
}

// The cursor of endpoint `url` ("" when it has none).
std::string cursor_on_disk(const std::string& dir, const std::string& url) {
  const auto cursors = cursors_on_disk(dir);
  const auto it = cursors.find(url);
  return it == cursors.end() ? "" : it->second;
}

// The push entries of hpd's status by endpoint URL.
std::map<std::string, json> push_status_by_url(const Hpd& hpd) {
  std::map<std::string, json> out;
  const json status = hpd.status();
  if (!status.contains("continuous") || !status["continuous"].contains("push")) return out;
  for (const json& p : status["continuous"]["push"]) out[text(p, "endpoint")] = p;
  return out;
}

struct ReceivedChunk {
  uint64_t time_unix_ns = 0;                    // the profiles' start: the chunk's
  uint64_t samples = 0;                         // the values of the "samples" profiles
  std::map<std::string, std::string> resource;  // the attributes of one resource
};

// The requests the collector wrote to `outputs`, in the order received, waiting up to 60 s until
// there are `want`.
std::vector<ReceivedChunk> wait_received(const std::vector<std::string>& outputs, size_t want) {
  std::vector<ReceivedChunk> out;
  for (const json& request : wait_received_requests(outputs, want)) {
    ReceivedChunk r;
    for (const json& rp : request.at("resourceProfiles")) {
      if (r.resource.empty()) r.resource = otlp_resource(request, rp);
      for (const json& sp : rp.at("scopeProfiles")) {
        for (const json& p : sp.at("profiles")) {
          r.time_unix_ns = static_cast<uint64_t>(otlp_int(p, "timeUnixNano"));
          if (otlp_string(request, otlp_int(p.at("sampleType"), "typeStrindex")) != "samples") continue;
          if (!p.contains("samples")) continue;
          for (const json& sample : p["samples"])
            r.samples += static_cast<uint64_t>(otlp_sample_total(sample));
        }
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

// What the collector received for one process (the resource whose process.pid is `pid`): its
// resource attributes, and the attributes of its samples as (key, value) pairs.
struct ReceivedProcess {
  std::map<std::string, std::string> resource;
  std::set<std::pair<std::string, std::string>> sample_attributes;
  uint64_t samples = 0;
};

ReceivedProcess received_process(const std::vector<json>& requests, int32_t pid) {
  ReceivedProcess r;
  for (const json& request : requests) {
    for (const json& rp : request.at("resourceProfiles")) {
      std::map<std::string, std::string> resource = otlp_resource(request, rp);
      if (resource["process.pid"] != std::to_string(pid)) continue;
      r.resource = resource;
      for (const json& sp : rp.at("scopeProfiles")) {
        for (const json& p : sp.at("profiles")) {
          if (otlp_string(request, otlp_int(p.at("sampleType"), "typeStrindex")) != "samples" ||
              !p.contains("samples"))
            continue;
          for (const json& sample : p.at("samples")) {
            r.samples += static_cast<uint64_t>(otlp_sample_total(sample));
            if (!sample.contains("attributeIndices")) continue;
            for (const json& i : sample.at("attributeIndices"))
              r.sample_attributes.insert(otlp_attribute(request, i.get<int64_t>()));
          }
        }
      }
    }
  }
  return r;
}

// A cgroup v2 directory the test makes, shaped as a systemd service's
// (/hpd-test.slice/hpd-labels-PID.service), with a process moved into it; on destruction the process
// goes back to the root cgroup and the directories are removed.
class TestServiceCgroup {
 public:
  explicit TestServiceCgroup(pid_t member) {
    root_ = cgroup2_mount();
    if (root_.empty()) return;
    unit_ = "hpd-labels-" + std::to_string(::getpid()) + ".service";
    path_ = "/hpd-test.slice/" + unit_;
    fs::create_directories(root_ + path_);
    std::ofstream(root_ + path_ + "/cgroup.procs") << member << std::endl;
    member_ = member;
  }
  ~TestServiceCgroup() {
    if (root_.empty()) return;
    std::ofstream(root_ + "/cgroup.procs") << member_ << std::endl;
    std::error_code ec;
    fs::remove(root_ + path_, ec);
    fs::remove(root_ + "/hpd-test.slice", ec);
  }
  const std::string& unit() const { return unit_; }
  const std::string& path() const { return path_; }  // as /proc/PID/cgroup says it
  std::string mount() const { return root_; }

 private:
  std::string root_, unit_, path_;
  pid_t member_ = 0;
};

size_t chunks_up_to(const std::vector<ChunkTruth>& chunks, const std::string& cursor) {
  return static_cast<size_t>(
      std::count_if(chunks.begin(), chunks.end(), [&](const ChunkTruth& c) { return c.name <= cursor; }));
}

// Every chunk after `after` ("" = from the first) up to `cursor` arrived exactly once, in order, with
// the chunk store's sample total.
void expect_exactly_the_chunks(const std::vector<ChunkTruth>& chunks, const std::vector<ReceivedChunk>& got,
                               const std::string& cursor, const std::string& after = "") {
  std::vector<ChunkTruth> sent;
  for (const ChunkTruth& c : chunks) {
    if (c.name > after && c.name <= cursor) sent.push_back(c);
  }
  ASSERT_FALSE(sent.empty());
  ASSERT_EQ(got.size(), sent.size()) << "requests received vs chunks up to the cursor " << cursor;
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].time_unix_ns, sent[i].start_unix_ns) << "request " << i << " is chunk " << sent[i].name;
    EXPECT_EQ(got[i].samples, sent[i].samples) << "samples of chunk " << sent[i].name;
    EXPECT_GT(got[i].samples, 0u);
  }
}

class ContinuousPush : public ::testing::Test {
 protected:
  void SetUp() override {
    // A busy process, so that every chunk has samples whatever else the machine does.
    busy_ = std::make_unique<Background>(std::vector<std::string>{kFixtures + "/cpu_split", "3600"});
    fs::create_directories(state_);
  }
  testing::TempDir dir_{"continuous-push", testing::TempDir::Cleanup::kKeepOnFailure};
  std::string state_ = dir_.path() + "/state";
  std::unique_ptr<Background> busy_;
};

// hpd pushing to `endpoint` until it sent `chunks`, then stopped: its last push status, and what the
// collector wrote to `output`, checked against the store (every chunk up to the cursor, once, in
// order, with its sample total).
std::vector<ReceivedChunk> push_then_check(const std::string& state, const std::string& endpoint,
                                           const std::string& output, uint64_t chunks,
                                           const std::string& extra, json* last) {
  Hpd hpd(start_with(push_config(state, endpoint, extra)));
  EXPECT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  EXPECT_TRUE(wait_push(
      hpd, [&](const json& s) { return field(s, "chunks_sent") >= chunks; }, last))
      << last->dump() << "\n"
      << hpd.log();
  EXPECT_EQ(hpd.terminate(), 0) << hpd.log();
  // hpd stopped: the cursor file names the last chunk the collector accepted.
  const std::vector<ChunkTruth> on_disk = chunks_on_disk(state);
  const std::string cursor = cursor_on_disk(state);
  EXPECT_FALSE(cursor.empty()) << "no push cursor in " << state;
  std::vector<ReceivedChunk> got = wait_received({output}, chunks_up_to(on_disk, cursor));
  expect_exactly_the_chunks(on_disk, got, cursor);
  return got;
}

TEST_F(ContinuousPush, EveryChunkReachesTheCollectorWithTheStoresSampleTotals) {
  // The busy fixture runs in a cgroup shaped as a systemd service's: its samples arrive labelled with it.
  TestServiceCgroup service(busy_->pid());
  ASSERT_FALSE(service.mount().empty()) << "no cgroup v2 hierarchy mounted";
  const std::string cgroup_text =
      read_small_file("/proc/" + std::to_string(busy_->pid()) + "/cgroup").value_or("");
  ASSERT_NE(cgroup_text.find("0::" + service.path() + "\n"), std::string::npos) << cgroup_text;
  const std::string output = dir_.file("received.json");
  Collector collector(dir_.path(), output);
  ASSERT_TRUE(collector.up());
  json p;
  std::vector<ReceivedChunk> got = push_then_check(state_, collector.endpoint(), output, 3,
                                                   "push_labels = team=storage, region=test-1\n", &p);
  EXPECT_EQ(text(p, "endpoint"), collector.endpoint() + "/v1development/profiles");
  EXPECT_GT(field(p, "last_success_unix_ns"), 0u);
  EXPECT_GT(field(p, "bytes_sent"), 0u);
  EXPECT_EQ(field(p, "chunks_dropped"), 0u);

  // Labels: hpd's own (host, process) and hpd.conf's.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].resource["host.name"], host);
  EXPECT_FALSE(got[0].resource["process.pid"].empty());
  EXPECT_FALSE(got[0].resource["process.executable.name"].empty());
  EXPECT_EQ(got[0].resource["team"], "storage");
  EXPECT_EQ(got[0].resource["region"], "test-1");

  // The fixture's process: host, pid, executable, its unit and cgroup on the resource; its samples
  // carry its thread's id and name.
  const ReceivedProcess busy = received_process(received_requests(output), busy_->pid());
  const auto resource = [&](const std::string& key) {
    const auto it = busy.resource.find(key);
    return it == busy.resource.end() ? "(absent)" : it->second;
  };
  EXPECT_GT(busy.samples, 0u) << "no samples of the fixture (pid " << busy_->pid() << ") received";
  EXPECT_EQ(resource("host.name"), host);
  EXPECT_EQ(resource("process.executable.name"), "cpu_split");
  EXPECT_EQ(resource("systemd.unit"), service.unit());
  EXPECT_EQ(resource("process.linux.cgroup"), service.path());
  EXPECT_EQ(busy.resource.count("container.id"), 0u);
  EXPECT_EQ(resource("team"), "storage");
  EXPECT_TRUE(busy.sample_attributes.count({"thread.name", "cpu_split"}));
  EXPECT_TRUE(busy.sample_attributes.count({"thread.id", std::to_string(busy_->pid())}));
}

TEST_F(ContinuousPush, OverGrpcEveryChunkReachesTheCollector) {
  const std::string output = dir_.file("received.json");
  Collector collector(dir_.path(), output);
  ASSERT_TRUE(collector.up());
  json p;
  push_then_check(state_, collector.grpc_endpoint(), output, 2, "", &p);
  EXPECT_EQ(text(p, "endpoint"),
            collector.grpc_endpoint() +
                "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export");
}

TEST_F(ContinuousPush, CollectorDownThenUpAndHpdRestartedSendsEveryChunkOnceInOrder) {
  const uint16_t port = free_port();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(port);
  uint64_t queued_while_down = 0;
  {
    Hpd hpd(start_with(push_config(state_, endpoint)));
    ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
    // Down: chunks queue up, the status says why, nothing is sent.
    json p;
    ASSERT_TRUE(wait_push(
        hpd, [](const json& s) { return field(s, "chunks_queued") >= 3 && !text(s, "last_error").empty(); },
        &p))
        << p.dump() << "\n"
        << hpd.log();
    EXPECT_NE(text(p, "last_error").find("cannot connect to"), std::string::npos) << p.dump();
    EXPECT_EQ(field(p, "chunks_sent"), 0u);
    queued_while_down = field(p, "chunks_queued");
    const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
    EXPECT_NE(status.out.find("push to " + endpoint + "/v1development/profiles: 0 chunks sent"),
              std::string::npos)
        << status.out << status.err;
    EXPECT_NE(status.out.find("failing since"), std::string::npos) << status.out;
    EXPECT_TRUE(hpd.wait_log("continuous push: pushing chunk", 10)) << hpd.log();

    // Up: what queued while it was down is sent, oldest first (the order and the once are checked on
    // what the collector received, below). Not "the queue is empty": with 1-s chunks on a loaded machine
    // the next chunks keep arriving while these are sent, so an empty queue is a matter of speed.
    Collector collector(dir_.path(), dir_.file("received-1.json"), port);
    ASSERT_TRUE(collector.up());
    ASSERT_TRUE(wait_push(
        hpd, [&](const json& s) { return field(s, "chunks_sent") >= queued_while_down + 1; }, &p))
        << p.dump() << "\n"
        << hpd.log();
    EXPECT_TRUE(hpd.wait_log("works again", 10)) << hpd.log();
    ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
    collector.stop();
  }
  // hpd restarted (the chunk finished at its stop was not sent yet): the cursor says where it was.
  {
    Collector collector(dir_.path(), dir_.file("received-2.json"), port);
    ASSERT_TRUE(collector.up());
    Hpd hpd(start_with(push_config(state_, endpoint)));
    ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
    json p;
    ASSERT_TRUE(wait_push(
        hpd, [](const json& s) { return field(s, "chunks_sent") >= 3; }, &p))
        << p.dump() << "\n"
        << hpd.log();
    ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
    const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
    const std::string cursor = cursor_on_disk(state_);
    const std::vector<ReceivedChunk> got = wait_received(
        {dir_.file("received-1.json"), dir_.file("received-2.json")}, chunks_up_to(chunks, cursor));
    expect_exactly_the_chunks(chunks, got, cursor);
    EXPECT_GE(got.size(), queued_while_down + 3);
  }
}

// Two endpoints (hpd.conf's otlp_endpoint and otlp_endpoint.central), the second down for a while:
// the first keeps receiving while the second's queue and lag grow in the status; once the second is
// up, each collector has received every chunk up to its own cursor exactly once, in order, with the
// store's sample totals.
TEST_F(ContinuousPush, TwoEndpointsOneDownEachReceivesEveryChunkOnceAndTheOtherIsNotHeldBack) {
  const std::string output_a = dir_.file("received-a.json");
  const std::string output_b = dir_.file("received-b.json");
  Collector a(dir_.path(), output_a);
  ASSERT_TRUE(a.up());
  const uint16_t port_b = free_port();
  const std::string endpoint_b = "http://127.0.0.1:" + std::to_string(port_b);
  const std::string url_a = a.endpoint() + "/v1development/profiles";
  const std::string url_b = endpoint_b + "/v1development/profiles";
  Hpd hpd(start_with(push_config(state_, a.endpoint(), "otlp_endpoint.central = " + endpoint_b + "\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();

  // The second is down: its queue grows and the status says why, while the first gets chunks.
  std::map<std::string, json> s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  const auto down_and_other_current = [&] {
    return s.count(url_a) && s.count(url_b) && field(s[url_b], "chunks_queued") >= 4 &&
           !text(s[url_b], "last_error").empty() && field(s[url_a], "chunks_sent") >= 3;
  };
  while (!down_and_other_current() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s = push_status_by_url(hpd);
  }
  ASSERT_TRUE(down_and_other_current()) << json(s).dump() << "\n" << hpd.log();
  EXPECT_EQ(s.size(), 2u) << json(s).dump();
  const json pb = s[url_b];
  EXPECT_EQ(field(pb, "chunks_sent"), 0u);
  EXPECT_NE(text(pb, "last_error").find("cannot connect to"), std::string::npos) << pb.dump();
  EXPECT_GT(field(pb, "bytes_queued"), 0u) << pb.dump();
  // Its lag is the age of the oldest chunk it has not received: the first chunk after its cursor.
  const std::vector<ChunkTruth> before = chunks_on_disk(state_);
  const std::string cursor_b = cursor_on_disk(state_, url_b);
  const auto first_unsent =
      std::find_if(before.begin(), before.end(), [&](const ChunkTruth& c) { return c.name > cursor_b; });
  ASSERT_NE(first_unsent, before.end());
  // (its start as the chunk's file name says it: to the millisecond)
  EXPECT_EQ(field(pb, "oldest_queued_start_unix_ns"), first_unsent->start_unix_ns / 1'000'000 * 1'000'000)
      << first_unsent->name << " " << pb.dump();
  // At least 4 chunks of 1 s were finished after that one started.
  EXPECT_GE(field(pb, "lag_ns"), 3'000'000'000u) << pb.dump();
  // The first endpoint was not held back: it accepted chunks the second has not.
  EXPECT_GT(text(s[url_a], "last_sent"), cursor_b) << json(s).dump();
  EXPECT_EQ(field(s[url_a], "chunks_dropped"), 0u);
  const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
  EXPECT_NE(status.out.find("push to " + url_b + ": 0 chunks sent"), std::string::npos)
      << status.out << status.err;
  EXPECT_NE(status.out.find("push to " + url_a + ": "), std::string::npos) << status.out;
  const size_t line_b = status.out.find("push to " + url_b);
  EXPECT_NE(status.out.find(", lag ", line_b), std::string::npos) << status.out;
  const uint64_t queued_while_down = field(pb, "chunks_queued");

  // The second is up: it receives what queued, oldest first.
  Collector b(dir_.path(), output_b, port_b);
  ASSERT_TRUE(b.up());
  json p;
  const auto sent_b = [&](const json&) {
    p = push_status_by_url(hpd)[url_b];
    return field(p, "chunks_sent") >= queued_while_down + 1;
  };
  ASSERT_TRUE(wait_push(hpd, sent_b)) << p.dump() << "\n" << hpd.log();
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();

  // Each collector: every chunk up to its endpoint's cursor, once, in order, with the store's totals.
  const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
  for (const auto& [url, output] : {std::pair{url_a, output_a}, std::pair{url_b, output_b}}) {
    SCOPED_TRACE(url);
    const std::string cursor = cursor_on_disk(state_, url);
    ASSERT_FALSE(cursor.empty());
    const std::vector<ReceivedChunk> got = wait_received({output}, chunks_up_to(chunks, cursor));
    expect_exactly_the_chunks(chunks, got, cursor);
  }
  EXPECT_GE(chunks_up_to(chunks, cursor_on_disk(state_, url_b)), queued_while_down + 1);
}

// Polls hpd's push entries by URL until `done` holds; false after 240 s (a real break).
bool wait_push_by_url(const Hpd& hpd, const std::function<bool(std::map<std::string, json>&)>& done,
                      std::map<std::string, json>* last) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (std::chrono::steady_clock::now() < deadline) {
    *last = push_status_by_url(hpd);
    if (done(*last)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// Waits until each endpoint of `sent` (URL -> chunks) has sent at least that many chunks since hpd
// started (its status entry's chunks_sent).
bool wait_sent(const Hpd& hpd, const std::map<std::string, uint64_t>& sent,
               std::map<std::string, json>* last) {
  return wait_push_by_url(
      hpd,
      [&](auto& m) {
        return std::all_of(sent.begin(), sent.end(), [&](const auto& e) {
          return m.count(e.first) && field(m[e.first], "chunks_sent") >= e.second;
        });
      },
      last);
}

uint64_t unix_now_ns_for_test() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Two collectors on loopback, each writing what it received to its own file in `dir`.
struct TwoCollectors {
  explicit TwoCollectors(const testing::TempDir& dir)
      : output_a(dir.file("received-a.json")),
        output_b(dir.file("received-b.json")),
        a(dir.path(), output_a),
        b(dir.path(), output_b),
        url_a(a.endpoint() + "/v1development/profiles"),
        url_b(b.endpoint() + "/v1development/profiles") {}
  std::string output_a, output_b;
  Collector a, b;
  std::string url_a, url_b;  // the URLs hpd posts to
};

// A reload (SIGHUP) that adds an endpoint: the new one receives the chunk in progress when the reload
// takes effect and every later one, once, in order (its cursor starts at the newest finished chunk,
// as for an endpoint configured at start: the history recorded before is not sent); the endpoint that
// was there already goes on undisturbed (nothing twice, its counters since start go on) although the
// reload moved it from otlp_endpoint to otlp_endpoint.first.
TEST_F(ContinuousPush, AReloadThatAddsAnEndpointSendsItEveryChunkFromThenOnAndLeavesTheOtherAlone) {
  TwoCollectors two(dir_);
  ASSERT_TRUE(two.a.up());
  ASSERT_TRUE(two.b.up());
  const auto& [output_a, output_b, a, b, url_a, url_b] = two;
  Hpd hpd(start_with(push_config(state_, a.endpoint())));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  std::map<std::string, json> s;
  ASSERT_TRUE(wait_sent(hpd, {{url_a, 2}}, &s)) << json(s).dump() << "\n" << hpd.log();
  EXPECT_EQ(s.size(), 1u) << json(s).dump();

  const uint64_t sighup_unix_ns = unix_now_ns_for_test();
  std::ofstream(hpd.config_path()) << push_config(state_, b.endpoint(),
                                                  "otlp_endpoint.first = " + a.endpoint() + "\n");
  hpd.signal(SIGHUP);
  ASSERT_TRUE(hpd.wait_log("configuration reloaded", 20)) << hpd.log();
  // The reload takes effect at the next chunk boundary: by the time the status lists the new endpoint.
  ASSERT_TRUE(wait_push_by_url(
      hpd, [&](auto& m) { return m.count(url_b) > 0; }, &s))
      << json(s).dump() << "\n"
      << hpd.log();
  const uint64_t in_effect_unix_ns = unix_now_ns_for_test();
  ASSERT_TRUE(wait_sent(hpd, {{url_a, 5}, {url_b, 3}}, &s)) << json(s).dump() << "\n" << hpd.log();
  EXPECT_EQ(s.size(), 2u) << json(s).dump();
  // The first endpoint's counters went on: it has sent every chunk from hpd's start up to its cursor
  // (one fewer while the status caught it between the cursor and the count).
  const size_t a_up_to_cursor = chunks_up_to(chunks_on_disk(state_), text(s[url_a], "last_sent"));
  EXPECT_LE(field(s[url_a], "chunks_sent"), a_up_to_cursor) << json(s).dump();
  EXPECT_GE(field(s[url_a], "chunks_sent") + 1, a_up_to_cursor) << json(s).dump();
  EXPECT_EQ(field(s[url_b], "chunks_dropped"), 0u);
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();

  const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
  // The first endpoint: every chunk from the first on, once, in order: the reload sent none twice.
  const std::string cursor_a = cursor_on_disk(state_, url_a);
  expect_exactly_the_chunks(chunks, wait_received({output_a}, chunks_up_to(chunks, cursor_a)), cursor_a);
  // The new one: the chunk in progress when the reload took effect and every later one, each once,
  // in order; none finished before the SIGHUP (1 s chunks; starts are rounded to the millisecond).
  const std::string cursor_b = cursor_on_disk(state_, url_b);
  ASSERT_FALSE(cursor_b.empty());
  const std::vector<ReceivedChunk> got_b = wait_received({output_b}, 3);
  ASSERT_FALSE(got_b.empty());
  const auto first_b = std::find_if(chunks.begin(), chunks.end(), [&](const ChunkTruth& c) {
    return c.start_unix_ns == got_b.front().time_unix_ns;
  });
  ASSERT_NE(first_b, chunks.end()) << "the first request B received is no chunk of the store";
  ASSERT_NE(first_b, chunks.begin()) << "B received the chunks from before the reload";
  const ChunkTruth& before_b = *(first_b - 1);
  EXPECT_GT(first_b->start_unix_ns + 1'001'000'000, sighup_unix_ns)
      << first_b->name << " ended before the SIGHUP";
  EXPECT_LT(first_b->start_unix_ns, in_effect_unix_ns + 1'000'000) << first_b->name;
  expect_exactly_the_chunks(
      chunks, wait_received({output_b}, chunks_up_to(chunks, cursor_b) - chunks_up_to(chunks, before_b.name)),
      cursor_b, before_b.name);
}

// A reload that removes an endpoint: hpd stops sending to it and its status entry goes; its cursor
// file stays (naming the last chunk it accepted), so that adding it back goes on where it was: the
// chunks recorded meanwhile are sent, each once, in order. The other endpoint goes on undisturbed.
TEST_F(ContinuousPush, AReloadThatRemovesAnEndpointStopsSendingToItAndAddingItBackGoesOnWhereItWas) {
  TwoCollectors two(dir_);
  ASSERT_TRUE(two.a.up());
  ASSERT_TRUE(two.b.up());
  const auto& [output_a, output_b, a, b, url_a, url_b] = two;
  const std::string both = push_config(state_, a.endpoint(), "otlp_endpoint.second = " + b.endpoint() + "\n");
  Hpd hpd(start_with(both));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  std::map<std::string, json> s;
  ASSERT_TRUE(wait_sent(hpd, {{url_a, 2}, {url_b, 2}}, &s)) << json(s).dump() << "\n" << hpd.log();

  std::ofstream(hpd.config_path()) << push_config(state_, a.endpoint());
  hpd.signal(SIGHUP);
  ASSERT_TRUE(hpd.wait_log("configuration reloaded", 20)) << hpd.log();
  // Its status entry goes (at the next chunk boundary, where a reload takes effect).
  ASSERT_TRUE(wait_push_by_url(
      hpd, [&](auto& m) { return m.count(url_a) && !m.count(url_b); }, &s))
      << json(s).dump() << "\n"
      << hpd.log();
  const uint64_t a_sent = field(s[url_a], "chunks_sent");
  // A request in flight at the reload may still end (its cursor then is written); after that, while
  // the other endpoint accepts 3 chunks and 3 more, the removed one's cursor stays where it was.
  ASSERT_TRUE(wait_sent(hpd, {{url_a, a_sent + 3}}, &s)) << json(s).dump() << "\n" << hpd.log();
  const std::string cursor_b = cursor_on_disk(state_, url_b);
  ASSERT_FALSE(cursor_b.empty()) << "the removed endpoint's cursor file is gone";
  ASSERT_TRUE(wait_sent(hpd, {{url_a, a_sent + 6}}, &s)) << json(s).dump() << "\n" << hpd.log();
  EXPECT_EQ(cursor_on_disk(state_, url_b), cursor_b);
  EXPECT_GT(text(s[url_a], "last_sent"), cursor_b) << json(s).dump();
  EXPECT_FALSE(s.count(url_b)) << json(s).dump();
  {
    // It received exactly the chunks up to its cursor, none since.
    const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
    expect_exactly_the_chunks(chunks, wait_received({output_b}, chunks_up_to(chunks, cursor_b)), cursor_b);
  }

  // Added back: it goes on after its cursor, with the chunks recorded while it was not configured.
  const size_t missed = chunks_on_disk(state_).size() - chunks_up_to(chunks_on_disk(state_), cursor_b);
  std::ofstream(hpd.config_path()) << both;
  hpd.signal(SIGHUP);
  ASSERT_TRUE(wait_sent(hpd, {{url_b, missed + 1}}, &s)) << json(s).dump() << "\n" << hpd.log();
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
  const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
  for (const auto& [url, output] : {std::pair{url_a, output_a}, std::pair{url_b, output_b}}) {
    SCOPED_TRACE(url);
    const std::string cursor = cursor_on_disk(state_, url);
    expect_exactly_the_chunks(chunks, wait_received({output}, chunks_up_to(chunks, cursor)), cursor);
  }
}

// hpd's threads named `comm` (/proc/PID/task/*/comm).
size_t threads_named(pid_t pid, const std::string& comm) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string name = read_small_file(e.path().string() + "/comm").value_or("");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (name == comm) ++n;
  }
  return n;
}

// Waits until hpd has `want` threads named `comm`; false after 240 s.
bool wait_threads(const Hpd& hpd, const std::string& comm, size_t want, size_t* seen) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while ((*seen = threads_named(hpd.pid(), comm)) != want && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return *seen == want;
}

// One pusher thread per endpoint configured, none with push off; a reload adds and ends them. The
// endpoints need not answer: their threads exist while they are configured.
TEST_F(ContinuousPush, PusherThreadsAreAsManyAsTheEndpointsConfigured) {
  const std::string off =
      "continuous = on\ncontinuous_chunk_seconds = 1\ncontinuous_frequency = 97\nstate_directory = " +
      state_ + "\n";
  Hpd hpd(start_with(off));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  // Running: a chunk was written (and the trimming thread, which works also with push off, is there).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (field(hpd.status()["continuous"], "chunks_on_disk") < 1 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_GE(field(hpd.status()["continuous"], "chunks_on_disk"), 1u) << hpd.log();
  EXPECT_EQ(threads_named(hpd.pid(), "hpd-push"), 0u);
  EXPECT_EQ(threads_named(hpd.pid(), "hpd-trim"), 1u);

  const std::string endpoint_a = "http://127.0.0.1:" + std::to_string(free_port());
  const std::string endpoint_b = "http://127.0.0.1:" + std::to_string(free_port());
  size_t seen = 0;
  std::ofstream(hpd.config_path()) << push_config(state_, endpoint_a,
                                                  "otlp_endpoint.b = " + endpoint_b + "\n");
  hpd.signal(SIGHUP);
  ASSERT_TRUE(wait_threads(hpd, "hpd-push", 2, &seen)) << seen << " pusher threads\n" << hpd.log();
  EXPECT_EQ(push_status_by_url(hpd).size(), 2u);

  std::ofstream(hpd.config_path()) << push_config(state_, endpoint_b);
  hpd.signal(SIGHUP);
  ASSERT_TRUE(wait_threads(hpd, "hpd-push", 1, &seen)) << seen << " pusher threads\n" << hpd.log();

  std::ofstream(hpd.config_path()) << off;
  hpd.signal(SIGHUP);
  ASSERT_TRUE(wait_threads(hpd, "hpd-push", 0, &seen)) << seen << " pusher threads\n" << hpd.log();
  EXPECT_TRUE(push_status_by_url(hpd).empty());
  EXPECT_EQ(threads_named(hpd.pid(), "hpd-trim"), 1u);
  EXPECT_EQ(hpd.terminate(), 0) << hpd.log();
}

TEST_F(ContinuousPush, EndpointAnsweringErrorsShowsInStatusAndLogWhileHpdKeepsSampling) {
  const std::string body = "queue full, retry later\n";
  CannedServer server("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
                      true);
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(server.port());
  Hpd hpd(start_with(push_config(state_, endpoint)));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  json p;
  ASSERT_TRUE(wait_push(
      hpd, [](const json& s) { return !text(s, "last_error").empty(); }, &p))
      << hpd.log();
  EXPECT_NE(text(p, "last_error").find("answered HTTP 503: queue full, retry later"), std::string::npos)
      << p.dump();
  // Sampling goes on: more chunks are written while every push fails and is retried.
  const uint64_t samples = field(hpd.status()["continuous"], "samples");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while ((server.connections() < 4 || field(hpd.status()["continuous"], "samples") <= samples ||
          field(push_status(hpd), "chunks_queued") < 3) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(server.connections(), 4);
  EXPECT_GT(field(hpd.status()["continuous"], "samples"), samples);
  p = push_status(hpd);
  EXPECT_GE(field(p, "chunks_queued"), 3u) << p.dump();
  EXPECT_EQ(field(p, "chunks_sent"), 0u);
  const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
  EXPECT_NE(status.out.find("answered HTTP 503: queue full, retry later"), std::string::npos) << status.out;
  // The log says it once, not at every retry.
  const std::string log = hpd.log();
  size_t lines = 0;
  for (size_t at = log.find("answered HTTP 503"); at != std::string::npos;
       at = log.find("answered HTTP 503", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << log;
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

TEST_F(ContinuousPush, UnsentChunksRemovedByRetentionAreCountedAndSaid) {
  LoopbackSocket closed(false);  // bound, not listening: connections are refused
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(closed.port());
  // At most 1 byte of chunks: retention removes each chunk after it was written, before it was sent.
  Hpd hpd(start_with(push_config(state_, endpoint, "continuous_max_bytes = 1\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  json p;
  ASSERT_TRUE(wait_push(
      hpd, [](const json& s) { return field(s, "chunks_dropped") >= 2; }, &p))
      << p.dump() << "\n"
      << hpd.log();
  EXPECT_EQ(field(p, "chunks_sent"), 0u);
  EXPECT_TRUE(hpd.wait_log("before it was sent to " + endpoint, 10)) << hpd.log();
  const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
  EXPECT_NE(status.out.find(" dropped unsent"), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find(" 0 dropped unsent"), std::string::npos) << status.out;
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

// Two endpoints, both down, and retention removing every chunk: each endpoint counts the chunks it
// had not sent, on its own; neither counts more than retention removed.
TEST_F(ContinuousPush, UnsentChunksRemovedByRetentionAreCountedForEachEndpoint) {
  LoopbackSocket closed_a(false), closed_b(false);  // bound, not listening: connections are refused
  const std::string url_a = "http://127.0.0.1:" + std::to_string(closed_a.port()) + "/v1development/profiles";
  const std::string url_b = "http://127.0.0.1:" + std::to_string(closed_b.port()) + "/v1development/profiles";
  Hpd hpd(
      start_with(push_config(state_, url_a, "continuous_max_bytes = 1\notlp_endpoint.b = " + url_b + "\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  std::map<std::string, json> s;
  const auto both_dropped = [&] {
    return field(s[url_a], "chunks_dropped") >= 2 && field(s[url_b], "chunks_dropped") >= 2;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (!both_dropped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s = push_status_by_url(hpd);
  }
  ASSERT_TRUE(both_dropped()) << json(s).dump() << "\n" << hpd.log();
  const uint64_t removed = field(hpd.status()["continuous"], "chunks_removed");
  for (const std::string& url : {url_a, url_b}) {
    s = push_status_by_url(hpd);
    EXPECT_LE(field(s[url], "chunks_dropped"), removed) << url << " " << s[url].dump();
    EXPECT_EQ(field(s[url], "chunks_sent"), 0u);
    EXPECT_TRUE(hpd.wait_log("before it was sent to " + url, 10)) << hpd.log();
  }
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

// Waits until hpd, its pushes failing (an endpoint refused or rejected), has queued at least `at_least`
// chunks with the last error said; `p` gets the push status. A timeout fails with it and hpd's log.
::testing::AssertionResult queued_while_failing(const Hpd& hpd, uint64_t at_least, json* p) {
  if (wait_push(
          hpd,
          [&](const json& s) {
            return field(s, "chunks_queued") >= at_least && !text(s, "last_error").empty();
          },
          p))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << p->dump() << "\n" << hpd.log();
}

// hpd's anonymous resident memory (RssAnon of /proc/PID/status: its heap and stacks, not the
// eBPF maps it has mapped) less the unwind tables it keeps (status cfi.kept.bytes: bounded by
// max_kept_unwind_tables_mb, and grown by every new program the host starts, which a system-wide
// recording samples), in KiB; 0 when it cannot be read.
// RssAnon of /proc/PID/status, in KiB; 0 when it cannot be read.
uint64_t rss_anon_kib(pid_t pid) {
  const std::string status = read_small_file("/proc/" + std::to_string(pid) + "/status").value_or("");
  const size_t at = status.find("\nRssAnon:");
  return at == std::string::npos ? 0 : std::stoull(status.substr(at + 10));
}

// The unwind tables hpd keeps (its status cfi.kept.bytes), in KiB.
uint64_t kept_tables_kib(const json& status) {
  return status.at("cfi").at("kept").at("bytes").get<uint64_t>() >> 10;
}

uint64_t working_kib(const Hpd& hpd) {
  const uint64_t anon = rss_anon_kib(hpd.pid());
  if (anon == 0) return 0;
  const uint64_t kept = kept_tables_kib(hpd.status());
  return anon > kept ? anon - kept : 0;
}

// Issues #31 and #32: with the endpoint down, hpd's memory does not grow with the chunks that wait
// for it (they wait on disk, not in memory), and sampling goes on. The first chunk's export (the
// chunk symbolized and encoded once, kept for the retries) is done before the reference is taken;
// then 25 more chunks of 1 s, each one read at once: the lowest of the last 5 readings (what a leak
// keeps; the working memory of compiling a new program's unwind table is freed and trimmed after its
// chunk: a build beside the test once lifted one reading by 96 MB for three chunks) may not be more
// than kMarginKib above the reference. Readings are hpd's anonymous memory less the unwind tables it
// keeps (working_kib): those grow with each program started meanwhile on the host, within their own
// bound, which status reports (a fresh-clone run beside other builds saw VmRSS step up 52 MB at one
// chunk, then stay flat). The margin holds the chunk in progress; a leak of 2.5 MB or more per chunk
// passes it within the 25, and so did the freed memory glibc kept before hpd trimmed it (+80 to +118
// MB).
TEST_F(ContinuousPush, WithTheEndpointDownMemoryStaysFlatAndTheChunksWaitOnDisk) {
  constexpr uint64_t kMarginKib = 48 << 10;
  constexpr uint64_t kChunks = 25;
  LoopbackSocket closed(false);  // bound, not listening: connections are refused
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(closed.port());
  Hpd hpd(start_with(push_config(state_, endpoint)));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  json p;
  ASSERT_TRUE(queued_while_failing(hpd, 2, &p));
  uint64_t queued = field(p, "chunks_queued");
  const uint64_t reference_kib = working_kib(hpd);
  ASSERT_GT(reference_kib, 0u);
  std::vector<uint64_t> readings;
  std::string trace = std::to_string(queued) + " queued: " + std::to_string(reference_kib) + " KiB";
  const uint64_t last = queued + kChunks;
  while (queued < last) {
    ASSERT_TRUE(queued_while_failing(hpd, queued + 1, &p));
    queued = field(p, "chunks_queued");
    const uint64_t kib = working_kib(hpd);
    readings.push_back(kib);
    trace += ", " + std::to_string(queued) + ": " + std::to_string(kib);
  }
  std::printf("RssAnon less the kept unwind tables after each chunk (KiB): %s\n", trace.c_str());
  ASSERT_GE(readings.size(), 5u);
  const uint64_t kept_kib = *std::min_element(readings.end() - 5, readings.end());
  EXPECT_LE(kept_kib, reference_kib + kMarginKib)
      << "RssAnon less the kept unwind tables after each chunk (KiB): " << trace;
  EXPECT_EQ(field(p, "chunks_sent"), 0u);
  EXPECT_EQ(field(p, "chunks_dropped"), 0u);
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
  // Every chunk the endpoint did not get is in the store, each with samples.
  const std::string cursor = cursor_on_disk(state_);
  size_t waiting = 0;
  for (const ChunkTruth& c : chunks_on_disk(state_)) {
    if (c.name <= cursor) continue;
    ++waiting;
    EXPECT_GT(c.samples, 0u) << c.name;
  }
  EXPECT_GE(waiting, last) << "chunks on disk after the cursor '" << cursor << "'";
}

// Issues #31, #32 and #35: a host that starts processes all the time, each with stacks no earlier
// sample had (tests/fixtures/stack_churn: a fork every few ms, call chains 40 deep of random shape),
// sampled at 997 Hz in chunks of 1 s with the endpoint down. The collection drops, at each chunk
// boundary, the processes and threads that exited and the stacks no chunk still to be cut names, so
// that hpd's memory (working_kib: RssAnon less the kept unwind tables) does not grow with them. The
// test counts the distinct stacks of the chunks written (told apart by their frames) at their
// addresses' bytes alone (8 each, plus the 12 bytes of the stack's entry: a lower bound of what a
// stack table that kept them would hold; their processes and threads not counted), and runs until
// they reach 3 times kMarginKib. The reference is the lowest of the 5 readings from the point where
// they reached a third of that (past the start's one-time steps: the first tables, kallsyms, the
// first export), the end the lowest of the last 5 (a table compiled for a new program lifts a reading
// until it is trimmed after its chunk): a collection that kept the stacks grows by 2 times kMarginKib
// in between, however fast the machine samples, since the test waits for the stacks, not for a time.
// Seen failing before the change: +53 MB (51 to 104 MB) for 49 MB of stacks; after: +1.4, +6.7, -12.7 MB.
TEST_F(ContinuousPush, ProcessesAndStacksThatComeAndGoLeaveTheMemoryFlat) {
  constexpr uint64_t kMarginKib = 24 << 10;
  constexpr uint64_t kStackEntryBytes = 12;  // sizeof(RawStack)
  LoopbackSocket closed(false);              // bound, not listening: connections are refused
  const std::string config =
      "continuous = on\ncontinuous_chunk_seconds = 1\ncontinuous_frequency = 997\n"
      "state_directory = " +
      state_ + "\notlp_endpoint = http://127.0.0.1:" + std::to_string(closed.port()) +
      "\npush_retry_max = 2s\n";
  Hpd hpd(start_with(config));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  Background churn({kFixtures + "/stack_churn", "3600", "4", "40"});
  json p;
  ASSERT_TRUE(queued_while_failing(hpd, 3, &p));
  uint64_t queued = field(p, "chunks_queued");
  std::set<std::string> counted;
  std::unordered_set<uint64_t> seen;  // the frames' hashes of the stacks met
  uint64_t stack_bytes = 0;
  std::vector<uint64_t> readings;
  size_t reference_from = SIZE_MAX;  // the first reading with a third of the stacks
  std::string trace;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(20);
  while (stack_bytes < 3 * (kMarginKib << 10) || reference_from == SIZE_MAX ||
         readings.size() < reference_from + 10) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the stacks written in 20 minutes: " << (stack_bytes >> 10) << " KiB; readings " << trace;
    ASSERT_TRUE(queued_while_failing(hpd, queued + 1, &p));
    queued = field(p, "chunks_queued");
    const uint64_t kib = working_kib(hpd);
    readings.push_back(kib);
    for (const auto& e : fs::directory_iterator(state_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("chunk-", 0) != 0 || !name.ends_with(".hpr") || !counted.insert(name).second) continue;
      const RawStackTable& stacks = read_capture_file(e.path().string()).profile.stacks;
      for (uint32_t i = 0; i < stacks.size(); ++i) {
        const auto kernel = stacks.kernel_frames(i);
        const auto user = stacks.user_frames(i);
        uint64_t h = kernel.size();
        for (const uint64_t a : kernel) h = (h ^ a) * 0x100000001b3ULL;
        for (const uint64_t a : user) h = (h ^ a) * 0x100000001b3ULL;
        if (seen.insert(h).second) stack_bytes += 8 * (kernel.size() + user.size()) + kStackEntryBytes;
      }
    }
    if (reference_from == SIZE_MAX && stack_bytes >= (kMarginKib << 10)) reference_from = readings.size() - 1;
    trace +=
        (trace.empty() ? "" : ", ") + std::to_string(kib) + " (" + std::to_string(stack_bytes >> 10) + ")";
  }
  std::printf("RssAnon less the kept unwind tables after each chunk, KiB (the stacks met so far, KiB): %s\n",
              trace.c_str());
  ASSERT_GE(readings.size(), reference_from + 10);
  const uint64_t reference_kib =
      *std::min_element(readings.begin() + static_cast<ptrdiff_t>(reference_from),
                        readings.begin() + static_cast<ptrdiff_t>(reference_from) + 5);
  ASSERT_GT(reference_kib, 0u);
  const uint64_t kept_kib = *std::min_element(readings.end() - 5, readings.end());
  EXPECT_LE(kept_kib, reference_kib + kMarginKib)
      << "RssAnon less the kept unwind tables after each chunk, KiB (the stacks met so far): " << trace;
  EXPECT_EQ(field(p, "chunks_dropped"), 0u);
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

// The continuous profile's chunks written since continuous mode was turned on (status
// continuous.chunks_written).
uint64_t chunks_written(const Hpd& hpd) {
  const json status = hpd.status();
  return status.contains("continuous") ? field(status["continuous"], "chunks_written") : 0;
}

// One reading of hpd's memory, in KiB: RssAnon (/proc/PID/status), the unwind tables it keeps, and
// malloc's count of its heap in use (status memory.heap_in_use_bytes).
struct MemoryReading {
  int64_t anon = 0, tables = 0, in_use = 0;
  int64_t working() const { return anon - tables; }  // as working_kib
  int64_t held() const { return anon - in_use; }     // resident, and not in use by hpd
};

// Waits for the next chunk, then reads hpd's memory; false when no chunk came in 240 s.
bool read_after_a_chunk(const Hpd& hpd, MemoryReading* r) {
  const uint64_t was = chunks_written(hpd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (chunks_written(hpd) <= was) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r->anon = static_cast<int64_t>(rss_anon_kib(hpd.pid()));
  if (r->anon == 0) return false;
  const json s = hpd.status();
  r->tables = static_cast<int64_t>(kept_tables_kib(s));
  r->in_use = static_cast<int64_t>(field(s["memory"], "heap_in_use_bytes") >> 10);
  return r->in_use > 0;
}

// Issue #31: a large program run beside a continuous hpd (clang++, whose libLLVM and libclang-cpp make
// unwind tables of about 30 MB) leaves in hpd's memory what hpd uses (its tables), not the memory it
// freed on the way. Compiling the tables frees blocks of tens of MB; glibc's adaptive thresholds then
// let each arena keep up to 64 MB free at its top, resident, which malloc_trim does not return for a
// thread's arena: RssAnon less the kept tables stepped up 11 to 18 MB after one compile and stayed (a
// sawtooth to +80 MB under load), while malloc's count in use grew by the tables alone. hpd fixes
// the thresholds at its start. The test compiles until the tables kept grew by kTablesKib (a wait on
// hpd, not on time), and compares what is resident but not in use (RssAnon less malloc's in-use
// count), the lowest of 5 readings each after a chunk, before and after: other programs that start
// beside the test (a CI's build) add tables and modules hpd uses, which this does not count.
TEST_F(ContinuousPush, ALargeProgramBesideLeavesWhatHpdUsesAndNotWhatItFreed) {
  constexpr int64_t kTablesKib = 16 << 10;
  // Seen beside a CI run: 1342 -> 1032 KiB. Without the fixed thresholds, on a quiet machine, working
  // memory (RssAnon less the tables) rose +10.9 and +12.4 MB, failing; beside a CI run whose tests
  // start compilers (large programs: the thresholds had risen before the first reading) 7584 -> 3027
  // KiB, passing: the test tells the difference when nothing large ran beside hpd before it.
  constexpr int64_t kMarginKib = 6 << 10;
  const std::string config =
      "continuous = on\ncontinuous_chunk_seconds = 1\ncontinuous_frequency = 997\n"
      "state_directory = " +
      state_ + "\n";
  Hpd hpd(start_with(config));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  auto lowest_of_five = [&](std::string* trace, MemoryReading* lowest) {
    for (int i = 0; i < 5; ++i) {
      MemoryReading r;
      if (!read_after_a_chunk(hpd, &r)) return false;
      *trace += std::string(trace->empty() ? "" : ", ") + "anon " + std::to_string(r.anon) + " tables " +
                std::to_string(r.tables) + " in use " + std::to_string(r.in_use);
      if (i == 0 || r.held() < lowest->held()) *lowest = r;
    }
    return true;
  };
  // Past the start's one-time steps (the first tables, kallsyms, the first chunk): until the kept tables
  // stayed the same from one chunk to the next and malloc holds no more than is resident. Three chunks
  // were not always enough: beside the sanitizer tests and the suite the tables grew from 31 to 60 MiB
  // during the "before" readings, whose first (65 MiB resident, 74 MiB in use, as the tables were being
  // allocated) made the baseline -10 MiB and the test fail. Bounded: programs beside it may keep adding
  // tables, which the comparison below does not count.
  MemoryReading r, previous;
  ASSERT_TRUE(read_after_a_chunk(hpd, &previous)) << hpd.log();
  for (int i = 0; i < 120; ++i) {
    ASSERT_TRUE(read_after_a_chunk(hpd, &r)) << hpd.log();
    if (i >= 1 && r.tables == previous.tables && r.in_use <= r.anon) break;
    previous = r;
  }
  std::string before_trace;
  MemoryReading before;
  ASSERT_TRUE(lowest_of_five(&before_trace, &before)) << before_trace << "\n" << hpd.log();

  const std::string source = dir_.file("large.cpp");
  std::ofstream(source)
      << "#include <map>\n#include <regex>\n#include <string>\n"
         "std::map<std::string, int> count(const std::string& text) {\n"
         "  std::map<std::string, int> out;\n"
         "  const std::regex word(\"([a-z]+)@([a-z]+)\\\\.(com|org)\");\n"
         "  for (std::sregex_iterator it(text.begin(), text.end(), word), end; it != end; ++it)\n"
         "    ++out[(*it)[2]];\n"
         "  return out;\n}\n";
  int compiles = 0;
  int64_t tables = before.tables;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (tables < before.tables + kTablesKib) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << compiles << " compiles; tables kept " << before.tables << " -> " << tables << " KiB";
    const RunResult run_result = run({HPD_CLANGXX, "-O2", "-c", source, "-o", dir_.file("large.o")}, 300);
    ASSERT_EQ(run_result.exit_code, 0) << run_result.err;
    ++compiles;
    tables = static_cast<int64_t>(kept_tables_kib(hpd.status()));
  }
  // The compile's chunk and the next one, then the readings.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(read_after_a_chunk(hpd, &r)) << hpd.log();
  std::string after_trace;
  MemoryReading after;
  ASSERT_TRUE(lowest_of_five(&after_trace, &after)) << after_trace << "\n" << hpd.log();
  const json status = hpd.status();
  std::printf(
      "%d compiles; KiB, each after a chunk: before %s; after %s; resident not in use %ld -> %ld; "
      "working (RssAnon less the tables) %ld -> %ld; heap free now %lu\n",
      compiles, before_trace.c_str(), after_trace.c_str(), static_cast<long>(before.held()),
      static_cast<long>(after.held()), static_cast<long>(before.working()),
      static_cast<long>(after.working()),
      static_cast<unsigned long>(field(status["memory"], "heap_free_bytes") >> 10));
  // The kept tables are malloc'd: malloc's count holds them.
  EXPECT_GE(after.in_use, after.tables);
  EXPECT_LE(after.held(), before.held() + kMarginKib)
      << "before " << before_trace << "; after " << after_trace;
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

TEST(ContinuousPushConfig, BadPushValuesRefuseToStartWithFileAndLine) {
  const testing::TempDir tmp("hpd-push-conf");
  const std::string conf = tmp.file("hpd.conf");
  std::ofstream(conf)
      << "continuous = on\notlp_endpoint = collector:4318\npush_labels = team\npush_timeout = 0\n";
  const RunResult r = run({HPD_HPD_PATH, "--config", conf, "--socket", tmp.file("s")}, 20);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.err.find(conf + ":2: bad value 'collector:4318' for otlp_endpoint: 'collector:4318' is not a URL: "
                        "give http://HOST:PORT"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(conf + ":3: bad value 'team' for push_labels: expected KEY=VALUE pairs"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(conf + ":4: bad value '0' for push_timeout"), std::string::npos) << r.err;
}

// Safe transport (issue #32): TLS with a test CA made by the test (openssl), a client certificate, a
// bearer token read from a root-only file, each against the real collector configured to require it.
class ContinuousPushTls : public ContinuousPush {
 protected:
  // The collector's receivers over TLS with the test CA's server certificate.
  CollectorTls server_tls(const std::string& client_ca = "", const std::string& token = "") const {
    CollectorTls tls;
    tls.cert_file = pki_.server_cert;
    tls.key_file = pki_.server_key;
    tls.client_ca_file = client_ca;
    tls.bearer_token = token;
    return tls;
  }
  TestPki pki_{dir_.path()};
};

TEST_F(ContinuousPushTls, OverHttpsVerifiedWithTheCaFileEveryChunkArrives) {
  const std::string output = dir_.file("received.json");
  Collector collector(dir_.path(), output, 0, "profiles", server_tls());
  ASSERT_TRUE(collector.up());
  ASSERT_EQ(collector.endpoint().rfind("https://", 0), 0u);
  json p;
  push_then_check(state_, collector.endpoint(), output, 2, "push_ca_file = " + pki_.ca_cert + "\n", &p);
  EXPECT_EQ(text(p, "endpoint"), collector.endpoint() + "/v1development/profiles");
  EXPECT_EQ(field(p, "chunks_dropped"), 0u);
}

TEST_F(ContinuousPushTls, OverGrpcsWithAClientCertificateEveryChunkArrives) {
  const std::string output = dir_.file("received.json");
  Collector collector(dir_.path(), output, 0, "profiles", server_tls(pki_.ca_cert));
  ASSERT_TRUE(collector.up());
  ASSERT_EQ(collector.grpc_endpoint().rfind("grpcs://", 0), 0u);
  json p;
  push_then_check(state_, collector.grpc_endpoint(), output, 2,
                  "push_ca_file = " + pki_.ca_cert + "\npush_client_cert = " + pki_.client_cert +
                      "\npush_client_key = " + pki_.client_key + "\n",
                  &p);
}

TEST_F(ContinuousPushTls, ABearerTokenFromARootOnlyFileIsWhatTheCollectorRequires) {
  const std::string output = dir_.file("received.json");
  const std::string token = "hpd-test-token-7f3a";
  Collector collector(dir_.path(), output, 0, "profiles", server_tls("", token));
  ASSERT_TRUE(collector.up());
  const std::string headers = dir_.file("push-headers");
  std::ofstream(headers) << "# the collector's token\nAuthorization: Bearer " << token << "\n";
  ASSERT_EQ(::chmod(headers.c_str(), 0600), 0);
  json p;
  push_then_check(state_, collector.endpoint(), output, 2,
                  "push_ca_file = " + pki_.ca_cert + "\npush_headers_file = " + headers + "\n", &p);
}

TEST_F(ContinuousPushTls, WithoutTheTokenTheCollectorRefusesAndStatusSaysSo) {
  const std::string token = "hpd-test-token-7f3a";
  Collector collector(dir_.path(), dir_.file("received.json"), 0, "profiles", server_tls("", token));
  ASSERT_TRUE(collector.up());
  Hpd hpd(start_with(push_config(state_, collector.endpoint(), "push_ca_file = " + pki_.ca_cert + "\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  json p;
  ASSERT_TRUE(wait_push(
      hpd, [](const json& s) { return !text(s, "last_error").empty(); }, &p))
      << hpd.log();
  EXPECT_NE(text(p, "last_error").find("answered HTTP 401"), std::string::npos) << p.dump();
  EXPECT_EQ(field(p, "chunks_sent"), 0u);
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
}

TEST_F(ContinuousPushTls, AWrongCaIsSaidInLogAndStatusAndNoChunkIsLostOnceItIsFixed) {
  const std::string output = dir_.file("received.json");
  Collector collector(dir_.path(), output, 0, "profiles", server_tls());
  ASSERT_TRUE(collector.up());
  Hpd hpd(
      start_with(push_config(state_, collector.endpoint(), "push_ca_file = " + pki_.other_ca_cert + "\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  json p;
  ASSERT_TRUE(queued_while_failing(hpd, 3, &p));
  const std::string url = collector.endpoint() + "/v1development/profiles";
  EXPECT_NE(text(p, "last_error").find("TLS error with " + url + ": "), std::string::npos) << p.dump();
  EXPECT_NE(text(p, "last_error").find("certificate"), std::string::npos) << p.dump();
  EXPECT_EQ(field(p, "chunks_sent"), 0u);
  EXPECT_EQ(field(p, "chunks_dropped"), 0u);
  EXPECT_TRUE(hpd.wait_log("continuous push: pushing chunk", 10)) << hpd.log();
  EXPECT_NE(hpd.log().find("failed: TLS error with " + url), std::string::npos) << hpd.log();
  const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
  EXPECT_NE(status.out.find("TLS error with " + url), std::string::npos) << status.out << status.err;
  // Sampling goes on while every push fails.
  const uint64_t samples = field(hpd.status()["continuous"], "samples");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (field(hpd.status()["continuous"], "samples") <= samples &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GT(field(hpd.status()["continuous"], "samples"), samples);

  // The CA fixed and hpd reloaded: the queue drains, from the first chunk on. Chunks go oldest first, so
  // once the chunks queued at the fix and one more are sent, that backlog is out (which ones arrived is
  // checked below). Not that the queue is then empty: with a chunk a second, whether the push catches up
  // is the machine's speed (beside four CPU hogs it sent about a chunk a second, and 14 stayed queued).
  const uint64_t queued = field(push_status(hpd), "chunks_queued");
  std::ofstream(hpd.config_path()) << push_config(state_, collector.endpoint(),
                                                  "push_ca_file = " + pki_.ca_cert + "\n");
  hpd.signal(SIGHUP);
  ASSERT_TRUE(wait_push(
      hpd, [&](const json& s) { return field(s, "chunks_sent") >= queued + 1; }, &p))
      << p.dump() << "\n"
      << hpd.log();
  EXPECT_TRUE(hpd.wait_log("works again", 10)) << hpd.log();
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();
  const std::vector<ChunkTruth> chunks = chunks_on_disk(state_);
  const std::string cursor = cursor_on_disk(state_);
  ASSERT_FALSE(chunks.empty());
  const std::vector<ReceivedChunk> got = wait_received({output}, chunks_up_to(chunks, cursor));
  // Every chunk from the first one on, once, in order: none lost while the CA was wrong.
  expect_exactly_the_chunks(chunks, got, cursor);
  EXPECT_GE(got.size(), queued + 1);
}

TEST(ContinuousPushConfig, AHeadersFileOthersCanReadOrNotRootsRefusesToStartWithFileAndLine) {
  const testing::TempDir tmp("hpd-push-headers");
  const std::string headers = tmp.file("headers");
  std::ofstream(headers) << "Authorization: Bearer not-for-everyone\n";
  const std::string conf = tmp.file("hpd.conf");
  std::ofstream(conf) << "continuous = on\notlp_endpoint = https://127.0.0.1:4318\npush_headers_file = "
                      << headers << "\n";
  const auto start = [&] { return run({HPD_HPD_PATH, "--config", conf, "--socket", tmp.file("s")}, 20); };

  ASSERT_EQ(::chmod(headers.c_str(), 0644), 0);
  RunResult r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(conf + ":3: bad value '" + headers + "' for push_headers_file: " + headers +
                       ": mode 0644 lets its group or others in"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("not-for-everyone"), std::string::npos) << r.err;

  ASSERT_EQ(::chmod(headers.c_str(), 0640), 0);
  r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.err.find(conf + ":3: bad value '" + headers + "' for push_headers_file: " + headers + ": mode 0640"),
      std::string::npos)
      << r.err;

  ASSERT_EQ(::chmod(headers.c_str(), 0600), 0);
  ASSERT_EQ(::chown(headers.c_str(), 65534, 65534), 0);
  r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(conf + ":3: bad value '" + headers + "' for push_headers_file: " + headers +
                       ": owned by uid 65534, not 0"),
            std::string::npos)
      << r.err;

  // A line that is not a header: its number, never its text.
  ASSERT_EQ(::chown(headers.c_str(), 0, 0), 0);
  std::ofstream(headers) << "Authorization: Bearer x\nsecret-without-a-name\n";
  r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(conf + ":3: bad value '" + headers + "' for push_headers_file: " + headers +
                       ":2: expected a header `Name: value`"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("secret-without-a-name"), std::string::npos) << r.err;

  // Root's, mode 0600: accepted; --check-config lists the file, not the token.
  std::ofstream(headers) << "Authorization: Bearer not-for-everyone\n";
  const RunResult check = run({HPD_HPD_PATH, "--check-config", "--config", conf}, 20);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("push_headers_file = " + headers + "\n"), std::string::npos) << check.out;
  EXPECT_EQ((check.out + check.err).find("not-for-everyone"), std::string::npos) << check.out;

  // A client certificate without its key, a CA file that is not there.
  std::ofstream(conf) << "continuous = on\notlp_endpoint = https://127.0.0.1:4318\npush_client_cert = "
                      << headers << "\npush_ca_file = " << tmp.file("missing.pem") << "\n";
  r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(conf + ":3: push_client_cert is given without push_client_key"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(conf + ":4: bad value '" + tmp.file("missing.pem") + "' for push_ca_file: "),
            std::string::npos)
      << r.err;
}

TEST(ContinuousPushConfig, AClientKeyOthersCanReadOrNotRootsRefusesToStartAndIsRecheckedOnSighup) {
  const testing::TempDir tmp("hpd-push-key");
  const std::string cert = tmp.file("client.pem");
  const std::string key = tmp.file("client.key");
  std::ofstream(cert) << "-----BEGIN CERTIFICATE-----\nnot-checked-here\n-----END CERTIFICATE-----\n";
  std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\nkey-for-root-only\n-----END PRIVATE KEY-----\n";
  const std::string settings = "push_client_cert = " + cert + "\npush_client_key = " + key + "\n";
  const std::string conf = tmp.file("hpd.conf");
  std::ofstream(conf) << "continuous = on\notlp_endpoint = https://127.0.0.1:4318\n" << settings;
  const auto start = [&] { return run({HPD_HPD_PATH, "--config", conf, "--socket", tmp.file("s")}, 20); };
  const std::string bad = conf + ":4: bad value '" + key + "' for push_client_key: " + key + ": ";

  for (const mode_t mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(key.c_str(), mode), 0);
    const RunResult r = start();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(r.err.find(bad + "mode " + text + " lets its group or others in"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("key-for-root-only"), std::string::npos) << r.err;
  }
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  ASSERT_EQ(::chown(key.c_str(), 65534, 65534), 0);
  RunResult r = start();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(bad + "owned by uid 65534, not 0"), std::string::npos) << r.err;
  ASSERT_EQ(::chown(key.c_str(), 0, 0), 0);

  // Root's, mode 0600 or 0400: accepted; --check-config shows the path, never the key.
  for (const mode_t mode : {0600, 0400}) {
    ASSERT_EQ(::chmod(key.c_str(), mode), 0);
    const RunResult check = run({HPD_HPD_PATH, "--check-config", "--config", conf}, 20);
    EXPECT_EQ(check.exit_code, 0) << check.err;
    EXPECT_NE(check.out.find("push_client_key = " + key + "\n"), std::string::npos) << check.out;
    EXPECT_EQ((check.out + check.err).find("key-for-root-only"), std::string::npos) << check.out;
  }

  // Re-checked at each SIGHUP: a key opened to others keeps the old configuration, with the line.
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  Hpd hpd(start_with("otlp_endpoint = https://127.0.0.1:4318\n" + settings));
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  hpd.signal(SIGHUP);
  EXPECT_TRUE(hpd.wait_log("keeping the old configuration", 20)) << hpd.log();
  EXPECT_NE(hpd.log().find(":3: bad value '" + key + "' for push_client_key: " + key +
                           ": mode 0644 lets its group or others in"),
            std::string::npos)
      << hpd.log();
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  hpd.signal(SIGHUP);
  EXPECT_TRUE(hpd.wait_log("configuration reloaded", 20)) << hpd.log();
  EXPECT_EQ(hpd.log().find("key-for-root-only"), std::string::npos) << hpd.log();
  EXPECT_EQ(hpd.terminate(), 0) << hpd.log();
}

// Compression per endpoint: hpd pushes the same chunks gzip-compressed (the default) over HTTP and
// over gRPC, and uncompressed (push_compression.NAME = none) over HTTP, each to its own collector:
// each receives every chunk once with the store's sample totals; the status counts fewer bytes on the
// wire with gzip, and the same bytes before compression as the uncompressed endpoint sent.
TEST_F(ContinuousPush, GzipAndUncompressedEndpointsReceiveTheSameChunksAndGzipSendsFewerBytes) {
  const std::string output_gzip = dir_.file("received-gzip.json");
  const std::string output_grpc = dir_.file("received-grpc.json");
  const std::string output_none = dir_.file("received-none.json");
  Collector gzip(dir_.path(), output_gzip);
  Collector grpc(dir_.path(), output_grpc);
  Collector none(dir_.path(), output_none);
  for (const Collector* c : {&gzip, &grpc, &none}) ASSERT_TRUE(c->up());
  const std::string url_gzip = gzip.endpoint() + "/v1development/profiles";
  const std::string url_grpc =
      grpc.grpc_endpoint() + "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
  const std::string url_none = none.endpoint() + "/v1development/profiles";
  Hpd hpd(start_with(push_config(state_, gzip.endpoint(),
                                 "otlp_endpoint.grpc = " + grpc.grpc_endpoint() + "\notlp_endpoint.plain = " +
                                     none.endpoint() + "\npush_compression.plain = none\n")));
  ASSERT_TRUE(hpd.wait_notify("READY=1", 60)) << hpd.log();
  // Wait for a moment when the three have the same chunks (at least 3): their counts compare.
  std::map<std::string, json> s;
  const auto same_chunks = [&] {
    if (!s.count(url_gzip) || !s.count(url_grpc) || !s.count(url_none)) return false;
    const std::string last = text(s[url_none], "last_sent");
    return field(s[url_none], "chunks_sent") >= 3 && text(s[url_gzip], "last_sent") == last &&
           text(s[url_grpc], "last_sent") == last &&
           field(s[url_gzip], "chunks_sent") == field(s[url_none], "chunks_sent") &&
           field(s[url_grpc], "chunks_sent") == field(s[url_none], "chunks_sent");
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (!same_chunks() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = push_status_by_url(hpd);
  }
  ASSERT_TRUE(same_chunks()) << json(s).dump() << "\n" << hpd.log();
  const uint64_t chunks = field(s[url_none], "chunks_sent");
  const uint64_t plain = field(s[url_none], "bytes_sent");
  EXPECT_EQ(field(s[url_none], "bytes_uncompressed"), plain) << json(s).dump();
  EXPECT_LT(field(s[url_gzip], "bytes_sent"), plain) << json(s).dump();
  EXPECT_EQ(field(s[url_gzip], "bytes_uncompressed"), plain) << json(s).dump();
  EXPECT_LT(field(s[url_grpc], "bytes_sent"), plain) << json(s).dump();
  EXPECT_EQ(field(s[url_grpc], "bytes_uncompressed"), plain) << json(s).dump();
  std::printf("%llu chunks: %llu bytes uncompressed, %llu with gzip over HTTP, %llu over gRPC\n",
              static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(plain),
              static_cast<unsigned long long>(field(s[url_gzip], "bytes_sent")),
              static_cast<unsigned long long>(field(s[url_grpc], "bytes_sent")));
  const RunResult status = run({kHpctl, "--socket", hpd.socket(), "status"});
  EXPECT_NE(status.out.find(" uncompressed), "), std::string::npos) << status.out << status.err;
  ASSERT_EQ(hpd.terminate(), 0) << hpd.log();

  // Each collector: every chunk up to its endpoint's cursor, once, in order, with the store's totals.
  const std::vector<ChunkTruth> on_disk = chunks_on_disk(state_);
  for (const auto& [url, output] : {std::pair{url_gzip, output_gzip}, std::pair{url_grpc, output_grpc},
                                    std::pair{url_none, output_none}}) {
    SCOPED_TRACE(url);
    const std::string cursor = cursor_on_disk(state_, url);
    ASSERT_FALSE(cursor.empty());
    expect_exactly_the_chunks(on_disk, wait_received({output}, chunks_up_to(on_disk, cursor)), cursor);
  }
}

TEST(ContinuousPushConfig, AnUnknownCompressionRefusesToStartWithFileAndLine) {
  const testing::TempDir tmp("hpd-push-compression-conf");
  const std::string conf = tmp.file("hpd.conf");
  std::ofstream(conf) << "continuous = on\notlp_endpoint = http://127.0.0.1:4318\npush_compression = zstd\n"
                         "otlp_endpoint.b = http://127.0.0.1:4319\npush_compression.b = gz\n";
  const RunResult r = run({HPD_HPD_PATH, "--config", conf, "--socket", tmp.file("s")}, 20);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(conf + ":3: bad value 'zstd' for push_compression: expected gzip or none"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(conf + ":5: bad value 'gz' for push_compression.b: expected gzip or none"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace hpd::test
