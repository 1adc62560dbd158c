// MIP snapshots taken while recording (hpctl record --mip): first and last per (pid, module).
#include "mip_recording.h"

#include <algorithm>
#include <exception>

#include "hpd/mip/mip.h"

namespace hpd::session {
namespace {

RawMipSnapshot to_raw(const mip::Module& m, int32_t pid, uint64_t time_ns) {
  RawMipSnapshot s;
  s.pid = pid;
  s.time_ns = time_ns;
  s.module_hash = m.module_hash;
  s.counts_calls = m.counts_calls();
  s.functions.reserve(m.functions.size());
  for (const mip::Function& f : m.functions) {
    RawMipFunction r;
    r.name = f.name;
    r.address = m.addresses_known ? f.file_address : 0;
    r.size = f.size;
    r.call_count = f.call_count;
    r.first_call = f.order_sum;  // one raw profile: the first-call timestamp itself
    r.blocks_covered = f.blocks_covered();
    r.blocks_total = f.blocks_total();
    s.functions.push_back(std::move(r));
  }
  return s;
}

}  // namespace

MipRecording::MipRecording(bool every_process) : every_process_(every_process) {}
MipRecording::~MipRecording() = default;

void MipRecording::note(const std::string& text) {
  if (std::find(notes_.begin(), notes_.end(), text) == notes_.end()) notes_.push_back(text);
}

void MipRecording::on_flush(const RawProfile& raw) {
  for (const RawProcess& p : raw.processes) {
    Target& t = targets_[p.pid];
    if (t.gone || p.end_ns != 0) {
      t.gone = true;
      continue;
    }
    // A process is checked when first seen and again when it maps more (exec, dlopen).
    if (!t.reader && t.mappings_seen != p.mappings.size()) {
      t.mappings_seen = p.mappings.size();
      try {
        if (every_process_ || mip::process_has_mip(p.pid))
          t.reader = std::make_unique<mip::LiveReader>(p.pid);
      } catch (const std::exception& e) {
        note(std::string("MIP: process ") + std::to_string(p.pid) + ": " + e.what());
      }
    } else if (t.reader && t.mappings_seen != p.mappings.size()) {
      t.mappings_seen = p.mappings.size();
      try {
        t.reader->discover();
      } catch (const mip::MipError& e) {
        if (e.code() == mip::ErrorCode::kProcessGone) t.gone = true;
      }
    }
    if (t.reader && !t.gone) read(p.pid, t);
  }
}

void MipRecording::read(int32_t pid, Target& target) {
  try {
    const mip::Snapshot snap = target.reader->snapshot();
    for (const mip::ModuleError& e : snap.errors) note("MIP: " + e.path + ": " + e.message);
    for (const mip::Module& m : snap.modules) {
      Kept k{m.path, m.build_id, to_raw(m, pid, snap.time_ns)};
      auto it = kept_.find({pid, m.path});
      if (it == kept_.end()) {
        kept_.emplace(std::make_pair(pid, m.path), std::make_pair(k, k));
      } else {
        it->second.second = std::move(k);
      }
      ++taken_;
    }
  } catch (const mip::MipError& e) {
    // An exited process keeps its last good snapshot: "the end" is the last read before exit.
    if (e.code() == mip::ErrorCode::kProcessGone) {
      target.gone = true;
    } else {
      note(std::string("MIP: process ") + std::to_string(pid) + ": " + e.what());
      if (e.code() == mip::ErrorCode::kPermission) target.gone = true;
    }
  }
}

void MipRecording::finish(RawProfile& raw) {
  for (auto& [pid, t] : targets_) {
    if (t.reader && !t.gone) read(pid, t);
  }
  for (auto& [key, pair] : kept_) {
    auto& [first, last] = pair;
    const uint32_t module = raw.intern_module(first.path, first.build_id);
    first.snapshot.module = module;
    last.snapshot.module = raw.intern_module(last.path, last.build_id);
    const bool same = first.snapshot.time_ns == last.snapshot.time_ns;
    raw.mip_snapshots.push_back(std::move(first.snapshot));
    if (!same) raw.mip_snapshots.push_back(std::move(last.snapshot));
  }
  std::stable_sort(raw.mip_snapshots.begin(), raw.mip_snapshots.end(),
                   [](const RawMipSnapshot& a, const RawMipSnapshot& b) { return a.time_ns < b.time_ns; });
  kept_.clear();
}

}  // namespace hpd::session
