// Call-count fixture in Rust (-Zinstrument-mcount=yes): callee is called exactly A times from caller_a
// and B times from caller_b, each caller once from main: `calls_fixture_rust A B`.
use std::hint::black_box;

#[inline(never)]
#[no_mangle]
pub extern "C" fn callee(i: u64) -> u64 {
    black_box(i.wrapping_mul(7))
}

#[inline(never)]
#[no_mangle]
pub extern "C" fn caller_a(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_add(callee(black_box(i)));
    }
    s
}

#[inline(never)]
#[no_mangle]
pub extern "C" fn caller_b(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_add(callee(black_box(i * 3)));
    }
    s
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().unwrap_or(0)).collect();
    let a = args.first().copied().unwrap_or(1000);
    let b = args.get(1).copied().unwrap_or(250);
    let t0 = std::time::Instant::now();
    let s = caller_a(black_box(a)).wrapping_add(caller_b(black_box(b)));
    let ns = t0.elapsed().as_nanos();
    println!("{}", s);
    // For bench/calls_bench.sh: the time of the calls alone, without start-up and exit.
    if std::env::var_os("HPD_CALLS_TIME").is_some() {
        eprintln!("calls_ns {}", ns);
    }
}
