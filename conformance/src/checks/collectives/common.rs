//! What the collective checks share: their time limits ([`RUN_LIMIT`], [`FAILURE_RUN_LIMIT`])
//! and [`check`], a collective check with a generator seeded by its name.

use crate::check::Check;
use crate::context::{CHECK_TIMEOUTS, Collectives, FAILURE_TIMEOUTS};
use crate::failure::CheckFailure;
use crate::util::{CheckResult, CheckRng, rng_from, seed_for};
use std::time::Duration;

/// How long a run may take before it counts as hung: well past the terminate timeout, after
/// which a stuck collective must have failed.
pub(super) const RUN_LIMIT: Duration =
    Duration::from_secs(CHECK_TIMEOUTS.terminate_after.as_secs() + 30);
/// The same for runs on the [`FAILURE_TIMEOUTS`] provider.
pub(super) const FAILURE_RUN_LIMIT: Duration =
    Duration::from_secs(FAILURE_TIMEOUTS.terminate_after.as_secs() + 8);

/// A check `collectives/{name}` on `ranks` devices, with a generator seeded by its name.
pub(super) fn check(
    name: impl Into<String>,
    ranks: usize,
    f: impl Fn(&Collectives, &mut CheckRng) -> CheckResult + Send + Sync + 'static,
) -> Check {
    let name = format!("collectives/{}", name.into());
    let seed = seed_for(&name);
    Check::collective(name, ranks, move |ctx| {
        let mut rng = rng_from(seed);
        f(ctx, &mut rng).map_err(|e| match e {
            CheckFailure::Mismatch(m) => CheckFailure::Mismatch(format!("{m} [seed {seed:#x}]")),
            other => other,
        })
    })
}
