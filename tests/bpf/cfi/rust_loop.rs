// cfi fixture: rustc -O (std without frame pointers) spending its time in its own functions and in
// std's sort, formatting and BTreeMap, for argv[1] seconds of its thread's CPU time (as many samples on a
// loaded machine as on a quiet one).
use std::collections::BTreeMap;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn cpu_seconds() -> f64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[inline(never)]
fn churn(round: u64) -> u64 {
    let mut v: Vec<u64> = (0..4000u64).map(|i| (i.wrapping_mul(2654435761) ^ round) % 100_000).collect();
    v.sort_unstable();
    let mut map = BTreeMap::new();
    for (i, x) in v.iter().enumerate().take(500) {
        map.insert(*x, format!("{}-{}", i, x));
    }
    map.values().map(|s| s.len() as u64).sum::<u64>() + v[v.len() / 2]
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let end = cpu_seconds() + seconds;
    let mut total = 0u64;
    let mut round = 0u64;
    while cpu_seconds() < end {
        total = total.wrapping_add(churn(round));
        round += 1;
    }
    println!("{}", total);
}
