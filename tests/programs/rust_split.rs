// rust_split: a Rust program with a known CPU split and a known allocation
// volume, for checking that Rust's symbols come out as Rust names (both
// mangling schemes: the test builds it with each) and that the split is true.
//   rust_split MS   thread "alpha" burns 3*MS ms of CPU in spin_alpha, thread
//                   "beta" MS ms in inner::Worker::crunch; main allocates
//                   2000 x 100000 bytes in churn. Prints each thread's CPU
//                   time as measured by the kernel, so the test compares the
//                   samples with the truth.
// Built by the test with the rustc `make deps` installs (Debian's 1.63): no
// crates, libc's clock_gettime declared here.
use std::thread;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}
extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// Burns until this thread has used `ms` of CPU (not wall time: the machine
// may be shared, and the split is of CPU).
#[inline(never)]
fn spin_alpha(ms: u64) -> u64 {
    let end = thread_cpu_ns() + ms * 1_000_000;
    let mut x = 1u64;
    while thread_cpu_ns() < end {
        for i in 0..20000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    x
}

mod inner {
    pub struct Worker {
        pub seed: u64,
    }
    impl Worker {
        #[inline(never)]
        pub fn crunch(&self, ms: u64) -> u64 {
            let end = super::thread_cpu_ns() + ms * 1_000_000;
            let mut x = self.seed;
            while super::thread_cpu_ns() < end {
                for i in 0..20000 {
                    x = x.wrapping_mul(2862933555777941757).wrapping_add(i);
                }
            }
            x ^ self.seed
        }
    }
}

#[inline(never)]
fn churn() -> usize {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for i in 0..2000 {
        // The 100000-byte block gets a line of its own: `kept` growing (96,
        // 192, 384 bytes) on the same line would share its heap site, and a
        // sampled 384-byte block stands for ~1400 allocations on its own.
        let block = vec![i as u8; 100_000];
        kept.push(block);
        if kept.len() > 10 {
            kept.remove(0);
        }
    }
    kept.len()
}

fn main() {
    let ms: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let alpha = thread::Builder::new()
        .name("alpha".into())
        .spawn(move || {
            let x = spin_alpha(3 * ms);
            (x, thread_cpu_ns())
        })
        .unwrap();
    let beta = thread::Builder::new()
        .name("beta".into())
        .spawn(move || {
            let x = inner::Worker { seed: 7 }.crunch(ms);
            (x, thread_cpu_ns())
        })
        .unwrap();
    let kept = churn();
    let (xa, alpha_ns) = alpha.join().unwrap();
    let (xb, beta_ns) = beta.join().unwrap();
    println!("alpha_cpu_ns {}", alpha_ns);
    println!("beta_cpu_ns {}", beta_ns);
    println!("checksum {} {}", (xa ^ xb) & 1, kept);
}
