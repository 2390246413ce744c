//! Checks with a random generator seeded by their name ([`seeded`], [`seeded_exclusive`]): a
//! mismatch's message ends with the seed.

use crate::check::Check;
use crate::failure::CheckFailure;
use crate::util::{CheckResult, CheckRng, rng_from, seed_for};
use std::sync::Arc;
use xthunk_core::backend::Device;

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
