//! A pass's team: the pool's other threads held for one pass, waiting for its products by
//! spinning rather than asleep, as llama.cpp's threads wait between a graph's operations (in the
//! browser: `crate::engine::cpu::forward::pass_on_the_pool`).
//!
//! A decoding step is ~200 short products (a projection each, 0.1–1 ms). Handed to rayon, each
//! one wakes the pool's sleeping threads; in the browser a wake is a notify through shared
//! memory that took longer than many of the products, so the second thread joined late and
//! waited between them (docs/speed.md, "a generation's step, by thread"). A whole pass's steps
//! are longer, but a wake after the threads slept a while (between two keystrokes) is slower
//! still: 26 ms of a MiniLM pass of 60 (docs/speed.md, "a pass after a pause"). Inside
//! [`with_team`], the thread running the pass posts each step's tasks to the team
//! ([`for_each_task`], [`for_each_part`]); the others, which joined once at the pass's start,
//! claim them as they come and spin between them. The thread that posted takes tasks too, so a
//! step finishes even when no other thread has joined.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// One product's tasks, as the thread that posted them holds them while they run.
type Task<'a> = &'a (dyn Fn(usize) + Sync);

/// The bits of [`Team::claim`]: a job's number, its tasks and the next task to claim.
const TASK_BITS: u32 = 20;
const NUMBER_BITS: u32 = 64 - 2 * TASK_BITS;
/// The most tasks a job of the team takes (more go to rayon's pool).
const MAX_TASKS: usize = (1 << TASK_BITS) - 1;

/// A job's number, its number of tasks and its next task to claim, as one word.
#[derive(Clone, Copy)]
struct Claim {
    number: u64,
    tasks: usize,
    next: usize,
}

impl Claim {
    fn pack(self) -> u64 {
        self.number << (2 * TASK_BITS) | (self.tasks as u64) << TASK_BITS | self.next as u64
    }

    fn unpack(word: u64) -> Self {
        let mask = (1u64 << TASK_BITS) - 1;
        Self {
            number: word >> (2 * TASK_BITS),
            tasks: ((word >> TASK_BITS) & mask) as usize,
            next: (word & mask) as usize,
        }
    }
}

/// What the threads of a team share.
struct Team {
    /// The job posted last (on its poster's stack while it runs).
    job: AtomicPtr<Task<'static>>,
    /// The job's [`Claim`], in one word: a thread claims a task by swapping in the next one
    /// while the word is still the one it read, so it never claims a task of a job that has
    /// finished, and a task it claimed keeps its job (and `job`) in place until it is done.
    claim: AtomicU64,
    /// The job's tasks finished.
    done: AtomicUsize,
    /// The step is over: the other threads leave.
    over: AtomicBool,
    /// A task panicked (natively; wasm aborts on a panic).
    panicked: AtomicBool,
}

thread_local! {
    /// The team the calling thread leads, if it leads one.
    static LEADING: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` on the calling thread with the pool's other threads holding themselves ready for
/// the tasks [`for_each_task`] posts until `f` returns (the products, the attention's heads,
/// the norms' and activations' rows). The other threads take no other work meanwhile, so
/// rayon's own parallel loops inside `f` (a layer's projections side by side) run on the
/// calling thread alone, each of their products still shared. Called from outside rayon's
/// pool, or with a pool of one thread, `f` simply runs.
pub fn with_team<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let threads = rayon::current_num_threads();
    let Some(leader) = rayon::current_thread_index() else {
        return f();
    };
    if threads < 2 || leading() {
        return f();
    }
    let team = Team {
        job: AtomicPtr::new(std::ptr::null_mut()),
        claim: AtomicU64::new(0),
        done: AtomicUsize::new(0),
        over: AtomicBool::new(false),
        panicked: AtomicBool::new(false),
    };
    /// Ends the step when `f` returns or unwinds, so that the other threads leave.
    struct Over<'a>(&'a Team);
    impl Drop for Over<'_> {
        fn drop(&mut self) {
            LEADING.set(std::ptr::null());
            self.0.over.store(true, Ordering::Release);
        }
    }
    rayon::in_place_scope(|s| {
        for _ in 1..threads {
            let team = &team;
            s.spawn(move |_| {
                // the leader may find a job it spawned itself while it waits inside `f`
                if rayon::current_thread_index() != Some(leader) {
                    team.help();
                }
            });
        }
        LEADING.set(&team);
        let _over = Over(&team);
        f()
    })
}

/// Runs `task(i)` for every `i` in `0..tasks`, each once: on the team the calling thread leads
/// ([`with_team`]), else on rayon's pool. Returns when every task has.
pub fn for_each_task(tasks: usize, task: impl Fn(usize) + Sync) {
    if tasks == 1 {
        return task(0); // nothing to share
    }
    let team = LEADING.get();
    if team.is_null() || !(2..=MAX_TASKS).contains(&tasks) {
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each(&task);
        return;
    }
    // SAFETY: `with_team` clears `LEADING` before its team goes out of scope
    let team = unsafe { &*team };
    team.run(tasks, &task);
}

/// Runs `f` on each of `parts` once, each part a task of [`for_each_task`] (a chunk of rows
/// that one task writes alone, say): on the team the calling thread leads, else on rayon's
/// pool. Returns when every part is done.
pub fn for_each_part<T: Send>(parts: impl IntoIterator<Item = T>, f: impl Fn(T) + Sync) {
    let parts: Vec<Mutex<Option<T>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    for_each_task(parts.len(), |i| {
        let part = parts[i].lock().map(|mut p| p.take());
        f(part.ok().flatten().expect("each part is taken by one task"))
    });
}

/// Whether the calling thread leads a team: its products may be cut finer than for rayon, a
/// task being claimed with one atomic swap rather than handed over.
pub fn leading() -> bool {
    !LEADING.get().is_null()
}

impl Team {
    /// Posts `tasks` tasks of `task`, takes them with the other threads, and waits until every
    /// one is finished.
    fn run(&self, tasks: usize, task: Task) {
        let last = Claim::unpack(self.claim.load(Ordering::Relaxed));
        let posted = Claim {
            number: (last.number + 1) & ((1 << NUMBER_BITS) - 1),
            tasks,
            next: 0,
        };
        self.done.store(0, Ordering::Relaxed);
        // SAFETY (of the lifetime's erasure): a thread reads the job only once it has claimed
        // one of its tasks, and this returns only when every task is finished
        let erased: *const Task = &task;
        self.job
            .store(erased as *mut Task<'static>, Ordering::Relaxed);
        self.claim.store(posted.pack(), Ordering::Release);
        self.take(posted);
        while self.done.load(Ordering::Acquire) < tasks {
            std::hint::spin_loop();
        }
        if self.panicked.load(Ordering::Relaxed) {
            panic!("a task of a team's job panicked");
        }
    }

    /// Claims and runs the tasks of the job `seen` names until none is left (or another job
    /// is posted).
    fn take(&self, mut seen: Claim) {
        let number = seen.number;
        while seen.number == number && seen.next < seen.tasks {
            let claimed = Claim {
                next: seen.next + 1,
                ..seen
            };
            match self.claim.compare_exchange_weak(
                seen.pack(),
                claimed.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // SAFETY: the claim synchronised with the job's post (after `job` was
                    // stored), and its poster waits for this task before it posts another
                    let task = unsafe { *self.job.load(Ordering::Relaxed) };
                    self.run_task(task, seen.next);
                    self.done.fetch_add(1, Ordering::Release);
                    seen = claimed;
                }
                Err(now) => seen = Claim::unpack(now),
            }
        }
    }

    /// Runs task `i`, noting a panic (natively) rather than leaving the poster waiting for it
    /// or, on the poster's own thread, unwinding while the others still run its job.
    fn run_task(&self, task: Task, i: usize) {
        #[cfg(not(target_arch = "wasm32"))]
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(i))).is_err() {
            self.panicked.store(true, Ordering::Relaxed);
        }
        #[cfg(target_arch = "wasm32")]
        task(i);
    }

    /// Another thread's part: takes each job's tasks as it is posted, spinning between them,
    /// until the step is over.
    fn help(&self) {
        let mut taken = 0;
        loop {
            let seen = Claim::unpack(self.claim.load(Ordering::Acquire));
            if seen.number != taken {
                self.take(seen);
                taken = seen.number;
            } else if self.over.load(Ordering::Acquire) {
                return;
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Many jobs of many sizes on a team of 4: each task of each runs exactly once, and the
    /// step's value comes back.
    #[test]
    fn every_task_runs_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let sizes: Vec<usize> = (0..300).map(|j| (j * 37) % 101).collect();
        let total = pool.install(|| {
            with_team(|| {
                assert!(leading());
                let mut total = 0;
                for &n in &sizes {
                    let runs: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                    for_each_task(n, |i| {
                        runs[i].fetch_add(1, Ordering::Relaxed);
                    });
                    let counts: Vec<u32> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                    assert!(counts.iter().all(|&c| c == 1), "job of {n}: {counts:?}");
                    total += n;
                }
                total
            })
        });
        assert_eq!(total, sizes.iter().sum::<usize>());
        assert!(!leading());
    }

    /// Other threads take part: with tasks that wait long enough, more than one thread runs
    /// them (a team that left everything to its leader would pass the test above).
    #[test]
    fn other_threads_take_tasks() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let threads = pool.install(|| {
            with_team(|| {
                let seen: Vec<AtomicUsize> =
                    (0..64).map(|_| AtomicUsize::new(usize::MAX)).collect();
                for _ in 0..20 {
                    for_each_task(64, |i| {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        seen[i].store(rayon::current_thread_index().unwrap(), Ordering::Relaxed);
                    });
                }
                let mut ids: Vec<usize> = seen.iter().map(|s| s.load(Ordering::Relaxed)).collect();
                ids.sort();
                ids.dedup();
                ids
            })
        });
        assert_eq!(threads, vec![0, 1]);
    }

    /// A task that panics on another thread is reported to the leader, which panics in turn
    /// rather than waiting for ever.
    #[test]
    fn a_panicking_task_panics_the_leader() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
                let leader = rayon::current_thread_index();
                with_team(|| {
                    for _ in 0..50 {
                        for_each_task(64, |_| {
                            std::thread::sleep(std::time::Duration::from_micros(50));
                            if rayon::current_thread_index() != leader {
                                panic!("a task on the other thread");
                            }
                        });
                    }
                })
            })
        }));
        assert!(result.is_err());
    }
}
