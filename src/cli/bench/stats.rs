//! The statistics of `xthunk bench`: goals on a ratio, medians with their spread, and the
//! interleaved rounds every ratio is measured in.

use serde::Serialize;
use std::time::{Duration, Instant};
use xthunk::Result as Res;

/// How a measured ratio is compared with its goal (serialized as the operator).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Cmp {
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
}

/// A goal on the ratio: `{"op": "<=", "value": 1.1}` in the JSON.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Goal {
    #[serde(rename = "op")]
    pub cmp: Cmp,
    pub value: f64,
}

impl Goal {
    pub fn le(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Le,
            value,
        })
    }
    pub fn ge(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Ge,
            value,
        })
    }
    pub fn gt(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Gt,
            value,
        })
    }
    pub fn met(&self, r: f64) -> bool {
        match self.cmp {
            Cmp::Le => r <= self.value,
            Cmp::Ge => r >= self.value,
            Cmp::Gt => r > self.value,
        }
    }
    pub fn op(&self) -> &'static str {
        match self.cmp {
            Cmp::Le => "<=",
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
        }
    }
    pub fn text(&self) -> String {
        format!("{} {}x", self.op(), fmt_num(self.value))
    }
}

/// A median with the 25th and 75th percentiles (a statistic that is not finite is `null` in
/// the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub p25: f64,
    pub p75: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Spread {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if s.is_empty() {
                f64::NAN
            } else {
                s[((s.len() - 1) as f64 * q).round() as usize]
            }
        };
        Spread {
            median: at(0.5),
            p25: at(0.25),
            p75: at(0.75),
        }
    }

    /// Applies `f` (monotonic increasing) to every statistic.
    pub fn map(self, f: impl Fn(f64) -> f64) -> Spread {
        Spread {
            median: f(self.median),
            p25: f(self.p25),
            p75: f(self.p75),
        }
    }
}

/// A spread of times turned into a spread of rates (`f` decreasing: the quartiles swap).
pub fn inverse(t: Spread, f: impl Fn(f64) -> f64) -> Spread {
    Spread {
        median: f(t.median),
        p25: f(t.p75),
        p75: f(t.p25),
    }
}

/// How many rounds, and how long a benchmark may take before it stops early.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    pub rounds: usize,
    pub budget: Duration,
}

/// Fewer rounds than this are never reported (unless the round count asked is smaller).
const MIN_ROUNDS: usize = 3;

/// One variant of a comparison: runs its work once and returns the seconds it took.
pub type Variant<'a> = &'a mut dyn FnMut() -> Res<f64>;

/// Runs every variant once per round, back to back, after one untimed warm-up round; the order
/// alternates between rounds (forward, then backward) so that neither variant always runs
/// first. Each variant returns the seconds its work took. Stops after `plan.rounds` rounds, or
/// once `plan.budget` is spent and at least [`MIN_ROUNDS`] rounds are done. Returns each
/// variant's times, aligned by round.
pub fn interleaved(plan: Rounds, variants: &mut [Variant<'_>]) -> Res<Vec<Vec<f64>>> {
    let k = variants.len();
    let mut times = vec![Vec::with_capacity(plan.rounds); k];
    let start = Instant::now();
    for round in 0..=plan.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..k).collect()
        } else {
            (0..k).rev().collect()
        };
        for i in order {
            let t = (variants[i])()?;
            if round > 0 {
                times[i].push(t);
            }
        }
        if round >= MIN_ROUNDS && start.elapsed() > plan.budget {
            break;
        }
    }
    Ok(times)
}

/// Per-round `num[i] / den[i]`.
pub fn ratios(num: &[f64], den: &[f64]) -> Vec<f64> {
    num.iter().zip(den).map(|(a, b)| a / b).collect()
}

/// The seconds since `start`.
pub fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// `98.2`, `1.23`, `0.0456`, `12345`: about three significant digits.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "n/a".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_goals() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median, s.p25, s.p75), (3.0, 2.0, 4.0));
        assert!(Spread::of(&[]).median.is_nan());
        assert!(Goal::le(1.5).is_some_and(|g| g.met(1.5) && !g.met(1.6)));
        assert!(Goal::ge(2.0).is_some_and(|g| g.met(2.0) && !g.met(1.9)));
        assert!(Goal::gt(1.0).is_some_and(|g| !g.met(1.0) && g.met(1.01)));
        let inv = inverse(s, |t| 1.0 / t);
        assert_eq!((inv.median, inv.p25, inv.p75), (1.0 / 3.0, 0.25, 0.5));
    }

    #[test]
    fn interleaving_alternates_and_skips_warm_up() {
        let mut log = vec![];
        let log = std::cell::RefCell::new(&mut log);
        let plan = Rounds {
            rounds: 3,
            budget: Duration::from_secs(60),
        };
        let t = interleaved(
            plan,
            &mut [
                &mut || {
                    log.borrow_mut().push('a');
                    Ok(1.0)
                },
                &mut || {
                    log.borrow_mut().push('b');
                    Ok(2.0)
                },
            ],
        );
        assert_eq!(t.ok(), Some(vec![vec![1.0; 3], vec![2.0; 3]]));
        assert_eq!(log.borrow().iter().collect::<String>(), "abbaabba");
    }
}
