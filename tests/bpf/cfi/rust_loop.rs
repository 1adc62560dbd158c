// cfi fixture: rustc -O (std without frame pointers) spending its time in its own functions and in
// std's sort, formatting and BTreeMap, for argv[1] seconds.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut total = 0u64;
    let mut round = 0u64;
    while Instant::now() < end {
        total = total.wrapping_add(churn(round));
        round += 1;
    }
    println!("{}", total);
}
