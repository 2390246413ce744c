//! The checks, by area: `memory/`, `copy/`, `memset/`, `stream/`, `kernels/`, `gemm/`,
//! `kernels/user/` (portable kernels from source), `executor/`, `collectives/` (on several
//! devices), `custom_call/`. Every check draws its random inputs from a
//! generator seeded by its name (see [`crate::util::seed_for`]); a failure message ends with
//! the seed.

use crate::util::{CheckResult, CheckRng, rng_from, seed_for};
use crate::{Check, CheckFailure};
use std::sync::Arc;
use xthunk_core::backend::Device;

mod collectives;
mod copy;
mod custom_call;
mod executor;
mod gemm;
mod kernels;
mod memory;
mod stream;

pub use kernels::{standard_kernel_checks, user_kernel_checks, user_kernels_module};

/// Every check, grouped by area.
pub fn all() -> Vec<Check> {
    let mut v = Vec::new();
    v.extend(memory::checks());
    v.extend(copy::checks());
    v.extend(stream::checks());
    v.extend(kernels::checks());
    v.extend(gemm::checks());
    v.extend(executor::checks());
    v.extend(collectives::checks());
    v.extend(custom_call::checks());
    v
}

type SeededFn = dyn Fn(&Arc<dyn Device>, &mut CheckRng) -> CheckResult + Send + Sync;

fn with_seed(
    name: &str,
    f: Box<SeededFn>,
) -> impl Fn(&Arc<dyn Device>) -> CheckResult + Send + Sync + 'static {
    let seed = seed_for(name);
    move |device| {
        let mut rng = rng_from(seed);
        f(device, &mut rng).map_err(|e| match e {
            CheckFailure::Mismatch(m) => CheckFailure::Mismatch(format!("{m} [seed {seed:#x}]")),
            other => other,
        })
    }
}

/// A check with a generator seeded by its name.
pub(crate) fn seeded(
    name: impl Into<String>,
    f: impl Fn(&Arc<dyn Device>, &mut CheckRng) -> CheckResult + Send + Sync + 'static,
) -> Check {
    let name = name.into();
    let body = with_seed(&name, Box::new(f));
    Check::new(name, body)
}

/// An exclusive check (runs alone) with a seeded generator.
pub(crate) fn seeded_exclusive(
    name: impl Into<String>,
    f: impl Fn(&Arc<dyn Device>, &mut CheckRng) -> CheckResult + Send + Sync + 'static,
) -> Check {
    let name = name.into();
    let body = with_seed(&name, Box::new(f));
    Check::exclusive(name, body)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_well_formed() {
        let checks = super::all();
        let mut names = std::collections::BTreeSet::new();
        for c in &checks {
            // `area/what`, or `kernels/user/what`.
            let parts: Vec<&str> = c.name.split('/').collect();
            let area_len = if c.name.starts_with("kernels/user/") {
                3
            } else {
                2
            };
            assert!(
                parts.len() == area_len && parts.iter().all(|p| !p.is_empty()),
                "bad check name `{}`",
                c.name
            );
            assert!(names.insert(c.name.clone()), "duplicate check `{}`", c.name);
        }
    }
}
