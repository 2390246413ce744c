//! The checks, by area: `memory/`, `copy/`, `memset/`, `stream/`, `kernels/`, `gemm/`,
//! `kernels/user/` (portable kernels from source), `executor/`, `collectives/` (on several
//! devices), `custom_call/`. Every check draws its random inputs from a
//! generator seeded by its name (see [`crate::util::seed_for`]); a failure message ends with
//! the seed.

use crate::check::Check;

mod collectives;
mod copy;
mod custom_call;
mod executor;
mod gemm;
mod kernels;
mod memory;
mod seed;
mod stream;

pub use kernels::{
    cuda_kernel_checks, cuda_kernels, standard_kernel_checks, user_kernel_checks,
    user_kernels_module,
};

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
