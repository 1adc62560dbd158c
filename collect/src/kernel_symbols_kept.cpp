// The kernel's symbols kept across recordings (kernel_symbols_kept.h).
#include "kernel_symbols_kept.h"

#include <atomic>
#include <mutex>

#include "hpd/collect/recorder.h"
#include "hpd/model/raw_profile.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd {
namespace {

struct Kept {
  std::mutex mutex;
  bool keep = false;
  std::shared_ptr<const KernelSymbols> table;
  std::atomic<uint64_t> reads{0};
  uint64_t completions = 0;  // under the mutex
};

Kept& kept() {
  static Kept k;
  return k;
}

std::shared_ptr<const KernelSymbols> read_kallsyms(const std::function<void(KernelSymbols&)>& complete = {}) {
  auto symbols = std::make_shared<KernelSymbols>();
  symbols->load();
  if (complete) complete(*symbols);
  kept().reads.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(kept().mutex);
  if (kept().keep && !symbols->empty()) kept().table = symbols;
  return symbols;
}

}  // namespace

void keep_kernel_symbols(bool keep) {
  std::lock_guard lock(kept().mutex);
  kept().keep = keep;
  if (!keep) kept().table.reset();
}

KernelSymbolsStatus kernel_symbols_status() {
  KernelSymbolsStatus status;
  status.reads = kept().reads.load(std::memory_order_relaxed);
  std::lock_guard lock(kept().mutex);
  status.kept = kept().keep;
  status.completions = kept().completions;
  if (kept().table) status.symbols = kept().table->size();
  return status;
}

std::shared_ptr<const KernelSymbols> recording_kernel_symbols() {
  return recording_kernel_symbols({});
}

std::shared_ptr<const KernelSymbols> recording_kernel_symbols(
    const std::function<void(KernelSymbols&)>& complete) {
  {
    std::lock_guard lock(kept().mutex);
    if (kept().table) return kept().table;
  }
  return read_kallsyms(complete);
}

std::shared_ptr<const KernelSymbols> kept_kernel_symbols(bool read_again) {
  return read_again ? read_kallsyms() : recording_kernel_symbols();
}

void kernel_symbols_completed(const std::shared_ptr<const KernelSymbols>& was,
                              std::shared_ptr<const KernelSymbols> completed) {
  std::lock_guard lock(kept().mutex);
  if (!kept().keep || !was || kept().table != was || !completed || completed->empty()) return;
  kept().table = std::move(completed);
  ++kept().completions;
}

std::shared_ptr<const KernelSymbols> kernel_symbols_for_profile(
    const RawProfile& profile, std::shared_ptr<const KernelSymbols> used,
    std::span<const std::pair<uint64_t, uint64_t>> named) {
  {
    std::lock_guard lock(kept().mutex);
    if (!kept().keep) return used;
  }
  // A frame's lines are looked up at it and at the byte before it (KernelSymbols::lines_for).
  const auto in_named = [named](uint64_t a) {
    for (const auto& [start, end] : named) {
      if (a > start && a < end) return true;
    }
    return false;
  };
  for (const uint64_t a : profile.kernel_addresses()) {  // those of stacks let go too
    if (!used->frame_in_kernel_image(a) && !in_named(a)) return read_kallsyms();
  }
  return used;
}

}  // namespace hpd
