// Test driver: runs a ContinuousProfiler in its own process, so that a test can SIGKILL it mid-chunk.
// Usage: continuous_driver DIR CHUNK_SECONDS FREQUENCY_HZ [FLUSH_SECONDS]
// Prints "started" once recording runs; SIGTERM or SIGINT stop it cleanly and print its stats.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "hpd/continuous/continuous.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DIR CHUNK_SECONDS FREQUENCY_HZ [FLUSH_SECONDS]\n", argv[0]);
    return 2;
  }
  hpd::continuous::ContinuousOptions options;
  options.dir = argv[1];
  options.chunk_seconds = std::atof(argv[2]);
  options.frequency_hz = static_cast<uint32_t>(std::atoi(argv[3]));
  if (argc > 4) options.flush_seconds = std::atof(argv[4]);
  options.retry_seconds = 1;
  // Blocked before the recording thread starts, so that only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    hpd::continuous::ContinuousProfiler profiler(options);
    profiler.start();
    std::printf("started\n");
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop_signals, &signal);
    profiler.stop();
    const hpd::continuous::Stats s = profiler.stats();
    std::printf("chunks_written %llu\nchunks_salvaged %llu\nsamples %llu\nmax_gap_ns %llu\nlast_error %s\n",
                static_cast<unsigned long long>(s.chunks_written),
                static_cast<unsigned long long>(s.chunks_salvaged),
                static_cast<unsigned long long>(s.samples), static_cast<unsigned long long>(s.max_gap_ns),
                s.last_error.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "continuous_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
