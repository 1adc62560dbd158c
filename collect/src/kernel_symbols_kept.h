// The kernel's symbols (/proc/kallsyms) of a recording: read for it, or, in a process that keeps them
// across recordings (hpd: keep_kernel_symbols in hpd/collect/recorder.h), the table an earlier
// recording read, read again at the recording's end only when its kernel addresses need it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

namespace hpd {

class KernelSymbols;
struct RawProfile;

// The table a recording starts with: the kept one, else read now (and kept when keeping is on). An
// empty table (kallsyms unreadable, or hidden by kptr_restrict) is never kept.
std::shared_ptr<const KernelSymbols> recording_kernel_symbols();
// The same for a recording whose programs are loaded while the table is read: a table read now is given
// to `complete` (which adds the code loaded meanwhile) before it is used or kept.
std::shared_ptr<const KernelSymbols> recording_kernel_symbols(
    const std::function<void(KernelSymbols&)>& complete);

// `completed`: `was` with code loaded since it was read added, named as /proc/kallsyms names it now (a
// recording's own programs): kept in its place, unless `was` is no longer the kept table.
void kernel_symbols_completed(const std::shared_ptr<const KernelSymbols>& was,
                              std::shared_ptr<const KernelSymbols> completed);

// The table that names `profile`'s kernel addresses: `used` (the one the recording started with),
// unless keeping is on and an address is neither in the kernel image nor in `named` (code outside it
// that `used` is known to name as a read now would: RecordResult::kernel_code_named): such an address,
// in a module, a BPF program, a trampoline, or nowhere in `used`, may have been loaded, or replaced,
// since `used` was read, so /proc/kallsyms is read again (and kept).
std::shared_ptr<const KernelSymbols> kernel_symbols_for_profile(
    const RawProfile& profile, std::shared_ptr<const KernelSymbols> used,
    std::span<const std::pair<uint64_t, uint64_t>> named = {});

}  // namespace hpd
