//! How busy the machine was while a benchmark ran, from Linux's CPU time counters.

/// CPU time counters (Linux, in clock ticks): all CPUs' total and busy time, and this
/// process's own user + system time, to show how much other work shared the machine while a
/// benchmark ran.
pub struct CpuSnapshot {
    total: u64,
    busy: u64,
    own: u64,
}

impl CpuSnapshot {
    pub fn take() -> Option<CpuSnapshot> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3)? + cpu.get(4)?;
        let me = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = me.rsplit(')').next()?.split_whitespace().collect();
        let own = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(CpuSnapshot {
            total,
            busy: total.saturating_sub(idle),
            own,
        })
    }

    /// `machine load meanwhile: xthunk 48%, other processes 52% of 2 CPUs`.
    pub fn since(&self, cpus: usize) -> Option<String> {
        let now = CpuSnapshot::take()?;
        let ticks = now.total.saturating_sub(self.total);
        // Too short to say (the counters tick every 10 ms per CPU).
        if ticks < 20 {
            return None;
        }
        let total = ticks as f64;
        let busy = now.busy.saturating_sub(self.busy) as f64;
        let own = now.own.saturating_sub(self.own) as f64;
        Some(format!(
            "machine load meanwhile: this process {:.0}%, other processes {:.0}% of {cpus} CPUs",
            100.0 * (own / total).min(1.0),
            100.0 * ((busy - own).max(0.0) / total).min(1.0),
        ))
    }
}
