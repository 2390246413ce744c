//! Launch limits: what one kernel launch may ask of a device ([`LaunchLimits`]: threads per
//! block, block and grid extents, dynamic shared memory), and the load-time check of every
//! kernel thunk of a program against the device's ([`check_launch_limits`]).
//!
//! GPU backends read their limits from the driver (`cuDeviceGetAttribute`,
//! `hipDeviceGetAttribute`); the host backend has no limits of its own and takes
//! [`LaunchLimits::PORTABLE`], so that a program the host loads also loads on every GPU.

use crate::ir::{Dim3, Executable, KernelThunk, Thunk, ThunkPath, ValidationError};

/// What one kernel launch may ask of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    /// Threads of one block (`x · y · z`).
    pub max_threads_per_block: u32,
    /// The largest block extent in each dimension.
    pub max_block: Dim3,
    /// The largest grid extent (in blocks) in each dimension.
    pub max_grid: Dim3,
    /// Dynamic shared memory of one block, in bytes (without a per-kernel opt-in).
    pub max_shared_mem_per_block: u32,
    /// Threads along one dimension of the whole launch (grid × block extent): HIP refuses a
    /// launch of 2^32 work-items or more in a dimension; `u64::MAX` where there is no such
    /// bound (CUDA).
    pub max_threads_per_dim: u64,
}

impl LaunchLimits {
    /// CUDA's limits, the same on every NVIDIA GPU since compute capability 3.0: 1,024 threads
    /// per block, blocks up to (1024, 1024, 64), grids up to (2^31 - 1, 65535, 65535) blocks,
    /// 48 KiB of dynamic shared memory per block without opt-in.
    pub const CUDA: LaunchLimits = LaunchLimits {
        max_threads_per_block: 1024,
        max_block: Dim3::new(1024, 1024, 64),
        max_grid: Dim3::new(i32::MAX as u32, 65535, 65535),
        max_shared_mem_per_block: 48 * 1024,
        max_threads_per_dim: u64::MAX,
    };

    /// What every GPU xthunk supports accepts: CUDA's limits ([`Self::CUDA`]), with HIP's bound
    /// of 2^32 - 1 threads along one dimension (AMD GPUs allow larger blocks, as many blocks
    /// and 64 KiB of shared memory, so nothing else is stricter there). The host backend's
    /// limits.
    pub const PORTABLE: LaunchLimits = LaunchLimits {
        max_threads_per_dim: u32::MAX as u64,
        ..Self::CUDA
    };

    /// Checks one launch shape against these limits; `Err` gives the field (`block.z`,
    /// `grid`, `shared_mem`, …) and what exceeds which limit. `device` names the device in
    /// the message.
    pub fn check(
        &self,
        grid: Dim3,
        block: Dim3,
        shared_mem: u32,
        device: &str,
    ) -> Result<(), (String, String)> {
        let dims = |d: Dim3| [("x", d.x), ("y", d.y), ("z", d.z)];
        for ((axis, b), (_, max)) in dims(block).into_iter().zip(dims(self.max_block)) {
            if b > max {
                return Err((
                    format!("block.{axis}"),
                    format!(
                        "a block {axis}-extent of {b} threads exceeds the limit of {max} on {device}"
                    ),
                ));
            }
        }
        // An exact product (`Dim3::count` cannot overflow).
        let threads = block.count();
        if threads > u128::from(self.max_threads_per_block) {
            return Err((
                "block".into(),
                format!(
                    "{block} is {threads} threads per block; the limit on {device} is {}",
                    self.max_threads_per_block
                ),
            ));
        }
        for ((axis, g), (_, max)) in dims(grid).into_iter().zip(dims(self.max_grid)) {
            if g > max {
                return Err((
                    format!("grid.{axis}"),
                    format!(
                        "a grid {axis}-extent of {g} blocks exceeds the limit of {max} on {device}"
                    ),
                ));
            }
        }
        for ((axis, g), (_, b)) in dims(grid).into_iter().zip(dims(block)) {
            // u32 × u32 fits a u64.
            let along = u64::from(g) * u64::from(b);
            if along > self.max_threads_per_dim {
                return Err((
                    format!("grid.{axis}"),
                    format!(
                        "{g} blocks of {b} threads along {axis} are {along} threads; the limit \
                         on {device} is {} along one dimension",
                        self.max_threads_per_dim
                    ),
                ));
            }
        }
        if shared_mem > self.max_shared_mem_per_block {
            return Err((
                "shared_mem".into(),
                format!(
                    "{shared_mem} bytes of dynamic shared memory exceed the limit of {} bytes \
                     per block on {device}",
                    self.max_shared_mem_per_block
                ),
            ));
        }
        Ok(())
    }
}

/// Checks the grid, block and dynamic shared memory of every kernel thunk of `exe` (nested
/// ones included) against `limits` (a device's, from its capabilities). `device` names the
/// device in messages (the executor passes `backend:ordinal (name)`). The error names the
/// thunk path, the dimension and the limit. Called at load, after validation.
pub fn check_launch_limits(
    exe: &Executable,
    limits: &LaunchLimits,
    device: &str,
) -> Result<(), ValidationError> {
    for (i, t) in exe.entry.iter().enumerate() {
        walk(t, &ThunkPath::entry(i), &mut |k, path| {
            limits
                .check(k.grid, k.block, k.shared_mem, device)
                .map_err(|(field, message)| ValidationError {
                    path: path.clone(),
                    field,
                    message,
                })
        })?;
    }
    Ok(())
}

/// Calls `f` on every kernel thunk under `t` (itself included), with its path.
fn walk(
    t: &Thunk,
    path: &ThunkPath,
    f: &mut dyn FnMut(&KernelThunk, &ThunkPath) -> Result<(), ValidationError>,
) -> Result<(), ValidationError> {
    if let Some(k) = t.as_kernel() {
        f(k, path)?;
    }
    for (list, thunks) in t.nested() {
        for (i, c) in thunks.iter().enumerate() {
            walk(c, &path.in_list(&list, i), f)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn check(l: &LaunchLimits, grid: Dim3, block: Dim3, shared: u32) -> Option<String> {
        l.check(grid, block, shared, "dev").err().map(|(f, _)| f)
    }

    #[test]
    fn each_limit_names_its_field() {
        let l = LaunchLimits::PORTABLE;
        let one = Dim3::new(1, 1, 1);
        assert_eq!(
            check(&l, Dim3::new(i32::MAX as u32, 65535, 65535), one, 0),
            None
        );
        assert_eq!(check(&l, one, Dim3::new(1024, 1, 1), 48 * 1024), None);
        assert_eq!(check(&l, one, Dim3::new(1, 1, 64), 0), None);
        assert_eq!(
            check(&l, Dim3::new(65536, 65536, 65536), one, 0).as_deref(),
            Some("grid.y")
        );
        assert_eq!(
            check(&l, Dim3::new(1 << 31, 1, 1), one, 0).as_deref(),
            Some("grid.x")
        );
        assert_eq!(
            check(&l, one, Dim3::new(1, 1, 65), 0).as_deref(),
            Some("block.z")
        );
        assert_eq!(
            check(&l, one, Dim3::new(1025, 1, 1), 0).as_deref(),
            Some("block.x")
        );
        assert_eq!(
            check(&l, one, Dim3::new(64, 32, 1), 0).as_deref(),
            Some("block")
        );
        assert_eq!(
            check(&l, one, one, 48 * 1024 + 1).as_deref(),
            Some("shared_mem")
        );
        // 2^31 - 1 blocks of 1024 threads: fine on CUDA, more than 2^32 - 1 work-items on AMD.
        let wide = Dim3::new(i32::MAX as u32, 1, 1);
        assert_eq!(
            check(&LaunchLimits::CUDA, wide, Dim3::new(1024, 1, 1), 0),
            None
        );
        assert_eq!(
            check(&l, wide, Dim3::new(1024, 1, 1), 0).as_deref(),
            Some("grid.x")
        );
        assert_eq!(
            check(&l, Dim3::new(1 << 22, 1, 1), Dim3::new(1024, 1, 1), 0),
            Some("grid.x".into())
        );
        assert_eq!(
            check(&l, Dim3::new((1 << 22) - 1, 1, 1), Dim3::new(1024, 1, 1), 0),
            None
        );
    }

    #[test]
    fn messages_name_the_value_and_the_limit() {
        let l = LaunchLimits::CUDA;
        let (f, m) = l
            .check(
                Dim3::new(65536, 65536, 65536),
                Dim3::new(1, 1, 1),
                0,
                "cuda:0 (X)",
            )
            .unwrap_err();
        assert_eq!(f, "grid.y");
        assert!(
            m.contains("65536") && m.contains("65535") && m.contains("cuda:0 (X)"),
            "{m}"
        );
        // A block whose exact count is 2^64 (wraps to 0 in 64-bit arithmetic) is caught by
        // its extents first, and its count is never computed in a narrower type.
        let (f, _) = l
            .check(
                Dim3::new(1, 1, 1),
                Dim3::new(1 << 22, 1 << 22, 1 << 20),
                0,
                "d",
            )
            .unwrap_err();
        assert_eq!(f, "block.x");
    }
}
