// The synthetic Profile described in synthetic_profile.h, built through the Profile's interning API.
#include "synthetic_profile.h"

namespace hpd::testing {

Profile make_synthetic_profile() {
  Profile p;
  p.meta.product = "hpd synthetic";
  RecordingInfo& info = p.meta.recording;
  info.start_unix_ns = 1767225600123456789ull;
  info.start_mono_ns = 1000000000ull;
  info.end_mono_ns = info.start_mono_ns + 20000000ull;
  info.interval_ns = 1000000;
  info.frequency_hz = 1000;
  info.backend = "perf";
  info.event = "task-clock";
  info.call_graph = "fp";
  info.target = "./myapp --fast";
  info.arguments = {"hpctl", "record", "--", "./myapp", "it's here"};
  info.hostname = "testhost";
  info.kernel_release = "6.18.0";
  info.kernel_frames = true;
  info.logical_cpus = 2;
  p.meta.lost = LostCounts{3, 1, 2, 0};
  p.meta.missing_modules = {"/opt/lib/libgone.so"};

  Lib app;
  app.name = "myapp";
  app.path = "/usr/bin/myapp";
  app.build_id = kSyntheticBuildId;
  const uint32_t app_lib = p.intern_lib(app);
  Lib libc;
  libc.name = "libc.so.6";
  libc.path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  const uint32_t libc_lib = p.intern_lib(libc);
  Lib kernel;
  kernel.name = "[kernel.kallsyms]";
  kernel.path = "[kernel.kallsyms]";
  kernel.build_id = "aabbccddeeff00112233445566778899aabbccdd";
  kernel.is_kernel = true;
  const uint32_t kernel_lib = p.intern_lib(kernel);

  const uint32_t f_main = p.intern_func("main", "/src/app.cpp", app_lib);
  const uint32_t f_compute = p.intern_func("compute(int)", "/src/app.cpp", app_lib);
  const uint32_t f_helper = p.intern_func("std::vector<int>::push_back(int const&)",
                                          "/usr/include/c++/12/bits/stl_vector.h", app_lib);
  const uint32_t f_syscall = p.intern_func("do_syscall", "/src/app.cpp", app_lib);
  const uint32_t f_sys_read = p.intern_func("ksys_read", "", kernel_lib);
  const uint32_t f_worker = p.intern_func("worker_loop", "/src/worker.cpp", app_lib);
  const uint32_t f_memcpy = p.intern_func("__memcpy_avx_unaligned_erms", "", libc_lib);
  const uint32_t f_futex = p.intern_func("futex_wait", "", libc_lib);

  const uint32_t s_main = p.intern_native_symbol(app_lib, 0x1000, 0x40, "main");
  const uint32_t s_compute = p.intern_native_symbol(app_lib, 0x1100, 0x80, "compute(int)");
  const uint32_t s_syscall = p.intern_native_symbol(app_lib, 0x1200, 0x20, "do_syscall");
  const uint32_t s_worker = p.intern_native_symbol(app_lib, 0x1300, 0x40, "worker_loop");
  const uint32_t s_memcpy = p.intern_native_symbol(libc_lib, 0x9000, 0, "__memcpy_avx_unaligned_erms");
  const uint32_t s_futex = p.intern_native_symbol(libc_lib, 0xa000, 0, "futex_wait");
  const uint32_t s_sys_read = p.intern_native_symbol(kernel_lib, 0x100000, 0x200, "ksys_read");

  const auto frame = [&](uint32_t func, uint32_t symbol, uint32_t lib, int64_t address, uint32_t line,
                         uint8_t depth, Category category) {
    Frame f;
    f.func = func;
    f.native_symbol = symbol;
    f.lib = lib;
    f.address = address;
    f.line = line;
    f.inline_depth = depth;
    f.category = category;
    return p.intern_frame(f);
  };
  const uint32_t fr_main = frame(f_main, s_main, app_lib, 0x100f, 12, 0, Category::kUser);
  // compute() at 0x1122 with push_back inlined into it: one address, two frames.
  const uint32_t fr_compute = frame(f_compute, s_compute, app_lib, 0x1122, 25, 0, Category::kUser);
  const uint32_t fr_helper = frame(f_helper, s_compute, app_lib, 0x1122, 1287, 1, Category::kUser);
  const uint32_t fr_compute_leaf = frame(f_compute, s_compute, app_lib, 0x1130, 30, 0, Category::kUser);
  const uint32_t fr_compute_call = frame(f_compute, s_compute, app_lib, 0x1140, 33, 0, Category::kUser);
  const uint32_t fr_syscall = frame(f_syscall, s_syscall, app_lib, 0x1210, 44, 0, Category::kUser);
  const uint32_t fr_sys_read = frame(f_sys_read, s_sys_read, kernel_lib, 0x100010, 0, 0, Category::kKernel);
  const uint32_t fr_worker = frame(f_worker, s_worker, app_lib, 0x1310, 8, 0, Category::kUser);
  const uint32_t fr_memcpy = frame(f_memcpy, s_memcpy, libc_lib, 0x9010, 0, 0, Category::kUser);
  const uint32_t fr_worker_idle = frame(f_worker, s_worker, app_lib, 0x1320, 9, 0, Category::kIdle);
  const uint32_t fr_futex = frame(f_futex, s_futex, libc_lib, 0xa005, 0, 0, Category::kIdle);

  const uint32_t st_main = p.intern_stack(kNoIndex, fr_main);
  const uint32_t st_compute = p.intern_stack(st_main, fr_compute);
  const uint32_t st_helper = p.intern_stack(st_compute, fr_helper);
  const uint32_t st_compute_leaf = p.intern_stack(st_main, fr_compute_leaf);
  const uint32_t st_recursion_outer = p.intern_stack(st_main, fr_compute_call);
  const uint32_t st_recursion = p.intern_stack(st_recursion_outer, fr_compute_leaf);
  const uint32_t st_syscall = p.intern_stack(st_main, fr_syscall);
  const uint32_t st_sys_read = p.intern_stack(st_syscall, fr_sys_read);
  const uint32_t st_worker = p.intern_stack(kNoIndex, fr_worker);
  const uint32_t st_memcpy = p.intern_stack(st_worker, fr_memcpy);
  const uint32_t st_worker_idle = p.intern_stack(kNoIndex, fr_worker_idle);
  const uint32_t st_futex = p.intern_stack(st_worker_idle, fr_futex);

  const uint64_t t0 = info.start_mono_ns;
  const auto on_cpu = [&](uint64_t offset_ns, uint32_t stack, uint64_t cpu_ns) {
    Sample s;
    s.time_ns = t0 + offset_ns;
    s.stack = stack;
    s.cpu_delta_ns = cpu_ns;
    s.stack_end = StackEnd::kComplete;
    return s;
  };

  Thread main_thread;
  main_thread.pid = 100;
  main_thread.tid = 100;
  main_thread.name = "myapp";
  main_thread.process_name = "myapp";
  main_thread.is_main = true;
  main_thread.start_ns = 0;
  const uint32_t main_stacks[] = {st_helper,       st_helper, st_compute_leaf, st_helper, st_recursion,
                                  st_compute_leaf, st_helper, st_sys_read,     kNoIndex};
  uint64_t offset = 123457;  // sub-millisecond offsets exercise the time precision
  for (uint32_t stack : main_stacks) {
    main_thread.samples.push_back(on_cpu(offset, stack, stack == st_sys_read ? 500000 : 1000000));
    offset += 1000001;
  }

  Thread worker;
  worker.pid = 100;
  worker.tid = 101;
  worker.name = "w\xC3\xB6rker";  // "wörker": UTF-8 passes through
  worker.process_name = "myapp";
  worker.start_ns = t0 + 2000000;
  worker.end_ns = t0 + 15000000;
  worker.samples.push_back(on_cpu(2500000, st_memcpy, 2000000));
  worker.samples.push_back(on_cpu(4500000, st_memcpy, 2000000));
  Sample off;
  off.time_ns = t0 + 5000000;
  off.stack = st_futex;
  off.kind = SampleKind::kOffCpu;
  off.off_cpu_ns = 5000000;
  worker.samples.push_back(off);
  worker.samples.push_back(on_cpu(10500000, st_memcpy, 2000000));

  p.threads.push_back(std::move(main_thread));
  p.threads.push_back(std::move(worker));
  return p;
}

bool charge_first_off_cpu_sample(Profile& p, uint64_t ns) {
  for (Thread& t : p.threads) {
    for (Sample& s : t.samples) {
      if (!is_off_cpu_interval(s.kind)) continue;
      s.cpu_delta_ns = ns;
      return true;
    }
  }
  return false;
}

}  // namespace hpd::testing
