//! The clock of a trace's per-thunk marks ([`Clock`]): the CPU's time-stamp counter where it
//! is trustworthy (x86-64 with an invariant TSC that the Linux kernel itself uses as its
//! clocksource), else `std::time::Instant`. A TSC read costs a fraction of an `Instant::now()`
//! (a few instructions, no conversion); the marks stay raw ticks while the execution runs and
//! are turned into the tracer's nanoseconds when the trace is read, by a [`TickMap`] that
//! anchors them to `Instant` at both ends of the execution (so they align exactly with the
//! executions, host spans and device times, which are on `Instant`, and with the wall-clock
//! origin that merges the traces of several processes).

use std::time::Instant;

/// Where a [`Clock`]'s ticks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// The time-stamp counter (`rdtsc`).
    Tsc,
    /// `Instant::now()`: a tick is a nanosecond since the clock's origin.
    Instant,
}

/// A cheap monotonic clock for per-thunk marks.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    source: ClockSource,
    origin: Instant,
}

impl Clock {
    /// The TSC where it is reliable (see [`tsc_reliable`]), else `Instant` ticks from `origin`.
    pub fn detect(origin: Instant) -> Self {
        let source = if tsc_reliable() {
            ClockSource::Tsc
        } else {
            ClockSource::Instant
        };
        Clock { source, origin }
    }

    /// A clock of `source` (the TSC only where [`tsc_reliable`]: else `Instant`).
    pub fn of(source: ClockSource, origin: Instant) -> Self {
        match source {
            ClockSource::Tsc if tsc_reliable() => Clock { source, origin },
            _ => Clock {
                source: ClockSource::Instant,
                origin,
            },
        }
    }

    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// Now, in ticks.
    #[inline(always)]
    pub fn ticks(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.source == ClockSource::Tsc {
            return rdtsc();
        }
        self.instant_ticks(Instant::now())
    }

    fn instant_ticks(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// An instant and the ticks at it (the TSC read on both sides of the `Instant` read,
    /// halved: the error is half an `Instant::now()`; tried again, up to three times, when
    /// the thread was held up in between).
    pub fn anchor(&self) -> (u64, Instant) {
        /// Ticks between the two reads beyond which the pair is read again (an undisturbed
        /// pair is a few hundred ticks apart).
        const TIGHT: u64 = 5_000;
        match self.source {
            ClockSource::Tsc => {
                let mut best: Option<(u64, u64, Instant)> = None;
                for _ in 0..3 {
                    let before = self.ticks();
                    let at = Instant::now();
                    let gap = self.ticks().saturating_sub(before);
                    if best.is_none_or(|(g, _, _)| gap < g) {
                        best = Some((gap, before, at));
                    }
                    if gap < TIGHT {
                        break;
                    }
                }
                match best {
                    Some((gap, before, at)) => (before.saturating_add(gap / 2), at),
                    None => (self.ticks(), Instant::now()),
                }
            }
            ClockSource::Instant => {
                let at = Instant::now();
                (self.instant_ticks(at), at)
            }
        }
    }
}

/// Turns one execution's ticks into nanoseconds since the tracer's origin: linear between
/// two anchors (ticks, ns), taken when the execution's recording began and ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickMap {
    pub ticks: (u64, u64),
    pub ns: (u64, u64),
}

impl TickMap {
    /// Instant ticks are already nanoseconds since the origin.
    pub const IDENTITY: TickMap = TickMap {
        ticks: (0, 1),
        ns: (0, 1),
    };

    /// Nanoseconds at tick `t` (monotonic in `t`; ticks before the first anchor map to it).
    pub fn ns(&self, t: u64) -> u64 {
        let (k0, k1) = self.ticks;
        let (n0, n1) = self.ns;
        if *self == Self::IDENTITY {
            return t;
        }
        if k1 <= k0 || n1 <= n0 {
            return n0;
        }
        let dt = u128::from(t.saturating_sub(k0));
        let scaled = dt * u128::from(n1 - n0) / u128::from(k1 - k0);
        n0.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX))
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(unused_unsafe)]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` only reads the time-stamp counter; every x86-64 CPU has it (it is
    // part of the x86-64 baseline) and it has no memory effects.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// Whether the TSC can time traces: x86-64, the CPU says its TSC is invariant (constant rate
/// in every power state) and, on Linux, the kernel chose it as its clocksource (it checked
/// that the TSCs of all CPUs agree and keeps watching them; on a machine where they drift or
/// a hypervisor makes them jump it falls back to another clocksource, and so does this).
/// Elsewhere `Instant`. `XTHUNK_TRACE_CLOCK=instant` forces `Instant`. Decided once.
pub fn tsc_reliable() -> bool {
    static RELIABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RELIABLE.get_or_init(|| {
        if std::env::var("XTHUNK_TRACE_CLOCK").is_ok_and(|v| v == "instant") {
            return false;
        }
        invariant_tsc() && kernel_uses_tsc()
    })
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
fn invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: `cpuid` is available on every x86-64 CPU and only reads identification data.
    let max_extended = unsafe { __cpuid(0x8000_0000) }.eax;
    if max_extended < 0x8000_0007 {
        return false;
    }
    // SAFETY: as above; leaf 0x8000_0007 exists (checked against the maximum leaf).
    let power = unsafe { __cpuid(0x8000_0007) };
    power.edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[cfg(target_os = "linux")]
fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(not(target_os = "linux"))]
fn kernel_uses_tsc() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_is_monotonic_and_exact_at_its_anchors() {
        let m = TickMap {
            ticks: (1_000, 4_000),
            ns: (50, 1_050),
        };
        assert_eq!(m.ns(1_000), 50);
        assert_eq!(m.ns(4_000), 1_050);
        assert_eq!(m.ns(2_500), 550);
        assert_eq!(m.ns(10), 50, "before the first anchor");
        let mut last = 0;
        for t in (0..5_000).step_by(7) {
            let n = m.ns(t);
            assert!(n >= last, "{t}: {n} < {last}");
            last = n;
        }
        assert_eq!(TickMap::IDENTITY.ns(12_345), 12_345);
        let flat = TickMap {
            ticks: (7, 7),
            ns: (3, 9),
        };
        assert_eq!(flat.ns(100), 3);
    }

    #[test]
    fn ticks_between_anchors_map_between_their_instants() {
        for source in [ClockSource::Tsc, ClockSource::Instant] {
            let origin = Instant::now();
            let c = Clock::of(source, origin);
            let ns = |t: Instant| t.duration_since(origin).as_nanos() as u64;
            let (k0, a0) = c.anchor();
            let mid_instant = Instant::now();
            let mid = c.ticks();
            let after_mid = Instant::now();
            std::thread::sleep(std::time::Duration::from_millis(2));
            let (k1, a1) = c.anchor();
            let m = if c.source() == ClockSource::Instant {
                TickMap::IDENTITY
            } else {
                TickMap {
                    ticks: (k0, k1),
                    ns: (ns(a0), ns(a1)),
                }
            };
            assert!(k1 > k0);
            let got = m.ns(mid);
            // Within a few microseconds of the instants read around it (the anchors' error).
            assert!(
                got + 5_000 >= ns(mid_instant) && got <= ns(after_mid) + 5_000,
                "{source:?}: {got} not near {}..{}",
                ns(mid_instant),
                ns(after_mid)
            );
            assert!(m.ns(k1) <= ns(a1) && m.ns(k0) >= ns(a0));
        }
    }
}
