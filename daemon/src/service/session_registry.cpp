// The session registry (limits, lookup, totals) and the memory estimate max_session_memory_mb is held to.
#include "session_registry.h"

#include "hpd/model/raw_profile.h"
#include "hpd/service/server.h"

namespace hpd::service {

std::string SessionRegistry::add(const std::shared_ptr<Session>& session, uint32_t max,
                                 uint32_t max_per_user) {
  std::lock_guard lock(mutex_);
  if (sessions_.size() >= max) {
    return "hpd already runs its maximum of " + std::to_string(max) +
           " sessions (max_sessions in hpd.conf); try again later";
  }
  if (session->uid != 0) {
    uint32_t mine = 0;
    for (const auto& [id, s] : sessions_) mine += s->uid == session->uid ? 1 : 0;
    if (mine >= max_per_user) {
      return "you (uid " + std::to_string(session->uid) + ") already run " + std::to_string(mine) +
             " sessions, the most one user may (max_sessions_per_user in hpd.conf); try again later";
    }
  }
  session->id = next_id_++;
  sessions_[session->id] = session;
  return "";
}

void SessionRegistry::remove(const Session& session) {
  std::lock_guard lock(mutex_);
  if (sessions_.erase(session.id) == 0) return;
  finished_samples_ += session.samples.load();
  finished_lost_ += session.lost.load();
  ++finished_;
}

std::shared_ptr<Session> SessionRegistry::find(uint64_t id) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Session>> SessionRegistry::list() {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

void SessionRegistry::stop_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [id, s] : sessions_) s->stop.store(true);
}

SessionRegistry::Totals SessionRegistry::totals() {
  std::lock_guard lock(mutex_);
  Totals t{sessions_.size(), finished_, finished_samples_, finished_lost_};
  for (const auto& [id, s] : sessions_) {
    t.samples += s->samples.load();
    t.lost += s->lost.load();
  }
  return t;
}

uint64_t SessionRegistry::user_memory(uid_t uid) {
  std::lock_guard lock(mutex_);
  uint64_t bytes = 0;
  for (const auto& [id, s] : sessions_)
    if (s->uid == uid) bytes += s->memory_bytes.load();
  return bytes;
}

SessionRegistry::Memory SessionRegistry::memory() {
  std::lock_guard lock(mutex_);
  Memory m;
  for (const auto& [id, s] : sessions_) {
    const uint64_t bytes = s->memory_bytes.load();
    m.bytes += bytes;
    m.by_user[s->uid] += bytes;
  }
  return m;
}

uint64_t estimate_profile_bytes(const RawProfile& p, bool released_come_back) {
  // Samples written out are released (a capture streamed while recording): only their sums stay, about
  // three words more each for their index.
  uint64_t bytes = p.samples.capacity() * sizeof(RawSample);
  if (released_come_back) bytes += p.sample_offset * sizeof(RawSample);
  bytes +=
      p.released.capacity() * (sizeof(RawSampleSum) + 24) + p.released.size() * (sizeof(RawSampleSum) + 16);
  // What the stack table holds, including what it keeps for the next stacks after letting some go.
  bytes += p.stacks.memory_bytes();
  for (const RawProcess& process : p.processes) {
    bytes += sizeof(RawProcess) + process.mappings.capacity() * sizeof(RawMapping) + process.exe.size() +
             process.cgroup.size();
    for (const std::string& arg : process.cmdline) bytes += arg.size() + sizeof arg;
  }
  bytes += p.threads.capacity() * (sizeof(RawThread) + 32);
  for (const RawModule& module : p.modules)
    bytes += sizeof module + module.path.size() + module.build_id.size();
  bytes += p.call_edges.capacity() * sizeof(RawCallEdge);
  for (const RawMipSnapshot& snapshot : p.mip_snapshots) {
    bytes += sizeof snapshot + snapshot.functions.capacity() * (sizeof(RawMipFunction) + 32);
  }
  return bytes;
}

}  // namespace hpd::service
