//! Random kills for the write paths' crash tests: a seeded schedule of SIGKILLs, each at a
//! random time into a run or at a random moment between two of its journal lines, and a runner
//! that watches the journal grow while it waits.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A small seeded generator for the kill schedule (splitmix64): no dependency, and a failing
/// run prints its seed.
pub struct Schedule {
    state: u64,
    pub seed: u64,
    /// Where [`Schedule::next_step`] is in its walk over a run's steps.
    turn: usize,
}

impl Schedule {
    /// Seeded from `KUBEHASH_TEST_SEED`, or the clock; the seed is printed so a failure can be
    /// repeated (the schedule's choices, not the machine's timing).
    pub fn from_env_or_clock() -> Schedule {
        let seed = std::env::var("KUBEHASH_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("kill schedule seed {seed} (KUBEHASH_TEST_SEED={seed} repeats it)");
        let mut s = Schedule {
            state: seed,
            seed,
            turn: 0,
        };
        // The walk over a run's steps starts anywhere.
        s.turn = s.below(64) as usize;
        s
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn below_duration(&mut self, d: Duration) -> Duration {
        Duration::from_micros(self.below(d.as_micros().max(1) as u64))
    }

    /// Where to kill attempt `attempt` (from 0) of a round of kills of runs shaped like `shape`:
    /// the first, on a fresh run, in its next step in turn; the others at random.
    pub fn kill_at(&mut self, attempt: usize, shape: &Shape) -> KillAt {
        match attempt {
            0 => self.next_step(shape),
            _ => self.pick(shape),
        }
    }

    /// Where to kill a fresh run shaped like `shape`: in the step after the next of its journal
    /// lines in turn. Its steps differ several times over in length; taken in turn, the short
    /// ones are attacked as often as the long ones.
    fn next_step(&mut self, shape: &Shape) -> KillAt {
        let lines = shape.lines_at.len();
        if lines == 0 {
            return self.pick(shape);
        }
        self.turn += 1;
        self.in_step_after(shape, 1 + self.turn % lines)
    }

    /// Where to kill a run shaped like `shape`, at random: half the time at a random time up to a
    /// little past its length, half in the step after a random journal line (a run after a kill
    /// writes fewer lines; one it never writes is a run to its end).
    fn pick(&mut self, shape: &Shape) -> KillAt {
        let lines = shape.lines_at.len();
        if lines == 0 || self.below(2) == 0 {
            return KillAt::Time(self.below_duration(shape.time * 6 / 5));
        }
        let line = 1 + self.below(lines as u64) as usize;
        self.in_step_after(shape, line)
    }

    /// A random moment between journal line `line` (from 1) and the next, timed as in `shape`.
    fn in_step_after(&mut self, shape: &Shape, line: usize) -> KillAt {
        let next = shape.lines_at.get(line).copied().unwrap_or(shape.time);
        KillAt::Line {
            line,
            jitter: self.below_duration(next.saturating_sub(shape.lines_at[line - 1])),
        }
    }
}

/// When a kill lands: a random time into the run, or just after the journal reaches a random
/// line of the run's own (the moment the write it announces, or the line saying it was done,
/// comes next).
#[derive(Debug, Clone, Copy)]
pub enum KillAt {
    Time(Duration),
    Line {
        line: usize,
        jitter: Duration,
    },
    /// Never: the run goes to its end.
    Never,
}

/// How a run went: whether it ended by itself (successfully), and when each journal line it
/// wrote appeared.
pub struct Run {
    pub ended: bool,
    pub lines_at: Vec<Duration>,
}

/// How a run without kills went: its length, and when each of its journal lines appeared.
pub struct Shape {
    pub time: Duration,
    pub lines_at: Vec<Duration>,
}

/// Runs `kubehash args` to its end, for the [`Shape`] of the runs to kill.
pub fn measure(args: &[String], journal: &Path) -> Shape {
    let started = Instant::now();
    let run = run_killed(args, journal, KillAt::Never);
    assert!(run.ended, "{args:?} failed without a kill");
    Shape {
        time: started.elapsed(),
        lines_at: run.lines_at,
    }
}

/// Runs `kubehash args`, SIGKILLed at `at` unless it ends first, watching `journal` grow.
pub fn run_killed(args: &[String], journal: &Path, at: KillAt) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let base = std::fs::read(journal).map_or(0, |b| b.len());
    let mut lines_at = Vec::new();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Run {
                ended: status.success(),
                lines_at,
            };
        }
        let lines = std::fs::read(journal)
            .map(|b| {
                b.get(base..)
                    .map_or(0, |new| new.iter().filter(|&&c| c == b'\n').count())
            })
            .unwrap_or(0);
        while lines_at.len() < lines {
            lines_at.push(start.elapsed());
        }
        let due = match at {
            KillAt::Time(t) => start.elapsed() >= t,
            KillAt::Line { line, .. } => lines >= line,
            KillAt::Never => false,
        };
        if due {
            if let KillAt::Line { jitter, .. } = at {
                let spin = Instant::now();
                while spin.elapsed() < jitter {
                    std::hint::spin_loop();
                }
            }
            // SIGKILL: nothing of the process's own runs after it.
            let _ = child.kill();
            let _ = child.wait();
            return Run {
                ended: false,
                lines_at,
            };
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{args:?} ran for a minute");
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}
