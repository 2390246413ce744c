//! Launch limits: what one launch may ask of an emulated device (one table per API, which
//! `cuDeviceGetAttribute` / `hipDeviceGetAttribute` and `cuFuncGetAttribute` report too),
//! and the check of a launch's shape against them and against the function's own limits
//! (its launch bound and static shared memory, read from its image), every product checked.
//!
//! As on a GPU: a shape beyond the device's limits is an invalid configuration (CUDA:
//! `CUDA_ERROR_INVALID_VALUE`, HIP: `hipErrorInvalidConfiguration`), a block larger than the
//! function was compiled for is "too many resources requested for launch".

use crate::context::Api;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::kernel_info::KernelInfo;

/// What one launch may ask of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub threads_per_block: u32,
    pub block: [u32; 3],
    pub grid: [u32; 3],
    /// Dynamic plus static shared memory of one block (without opt-in), in bytes.
    pub shared_per_block: u32,
    /// Threads along one dimension of the whole launch (grid × block), where bounded.
    pub threads_per_dim: Option<u64>,
}

/// An NVIDIA GPU's limits (every one since compute capability 3.0).
pub const CUDA: DeviceLimits = DeviceLimits {
    threads_per_block: 1024,
    block: [1024, 1024, 64],
    grid: [i32::MAX as u32, 65535, 65535],
    shared_per_block: 48 * 1024,
    threads_per_dim: None,
};

/// An AMD GPU's limits (HIP refuses 2^32 or more work-items along a dimension).
pub const HIP: DeviceLimits = DeviceLimits {
    threads_per_block: 1024,
    block: [1024, 1024, 1024],
    grid: [i32::MAX as u32; 3],
    shared_per_block: 64 * 1024,
    threads_per_dim: Some(u32::MAX as u64),
};

/// The limits of `api`'s devices.
pub fn of(api: Api) -> &'static DeviceLimits {
    match api {
        Api::Cuda => &CUDA,
        Api::Hip => &HIP,
    }
}

/// The most threads per block a function accepts: the device's, or its launch bound.
pub fn function_max_threads(api: Api, info: &KernelInfo) -> u32 {
    let dev = of(api).threads_per_block;
    info.max_threads.map_or(dev, |m| m.min(dev))
}

/// The dynamic shared memory one block of a function may have: the device's shared memory
/// per block less the function's static shared memory.
pub fn function_max_dynamic_shared(api: Api, info: &KernelInfo) -> u32 {
    of(api)
        .shared_per_block
        .saturating_sub(info.static_shared.unwrap_or(0))
}

fn config(call: &str, message: String) -> EmuError {
    EmuError::new(
        Code::InvalidConfiguration,
        Kind::InvalidValue,
        call,
        message,
    )
}

/// Checks the shape of a launch of the function `name` (`info`: what its image says) on a
/// device of `api`.
pub fn check_launch(
    api: Api,
    name: &str,
    info: &KernelInfo,
    (grid, block, shared): ([u32; 3], [u32; 3], u32),
    call: &str,
) -> EmuResult<()> {
    if grid.contains(&0) || block.contains(&0) {
        return Err(crate::error::invalid(
            call,
            format!("empty launch: grid {grid:?}, block {block:?}"),
        ));
    }
    let dev = of(api);
    const AXES: [&str; 3] = ["x", "y", "z"];
    for i in 0..3 {
        if block[i] > dev.block[i] {
            return Err(config(
                call,
                format!(
                    "block {block:?}: {} threads along {} exceed the device's limit of {}",
                    block[i], AXES[i], dev.block[i]
                ),
            ));
        }
        if grid[i] > dev.grid[i] {
            return Err(config(
                call,
                format!(
                    "grid {grid:?}: {} blocks along {} exceed the device's limit of {}",
                    grid[i], AXES[i], dev.grid[i]
                ),
            ));
        }
        // u32 × u32 fits a u64.
        let along = u64::from(grid[i]) * u64::from(block[i]);
        if let Some(max) = dev.threads_per_dim.filter(|&m| along > m) {
            return Err(config(
                call,
                format!(
                    "grid {grid:?} of blocks {block:?}: {along} work-items along {} exceed the \
                     device's limit of {max}",
                    AXES[i]
                ),
            ));
        }
    }
    // Each extent is at most 1024 here, but the product is checked all the same.
    let threads = block
        .iter()
        .try_fold(1u64, |acc, &b| acc.checked_mul(u64::from(b)))
        .unwrap_or(u64::MAX);
    if threads > u64::from(dev.threads_per_block) {
        return Err(config(
            call,
            format!(
                "block {block:?} is {threads} threads; the device allows at most {} per block",
                dev.threads_per_block
            ),
        ));
    }
    let max = function_max_threads(api, info);
    if threads > u64::from(max) {
        return Err(EmuError::new(
            Code::LaunchOutOfResources,
            Kind::InvalidValue,
            call,
            format!(
                "block {block:?} is {threads} threads; `{name}` accepts at most {max} per block \
                 (its launch bounds)"
            ),
        ));
    }
    let static_shared = info.static_shared.unwrap_or(0);
    let total = u64::from(shared) + u64::from(static_shared);
    if total > u64::from(dev.shared_per_block) {
        return Err(config(
            call,
            format!(
                "{shared} bytes of dynamic shared memory and {static_shared} of `{name}`'s static \
                 shared memory exceed the device's limit of {} bytes per block (without opt-in)",
                dev.shared_per_block
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(api: Api, info: &KernelInfo, g: [u32; 3], b: [u32; 3], s: u32) -> Option<Code> {
        let r = check_launch(api, "k", info, (g, b, s), "t");
        let _ = crate::diag::take();
        r.err().map(|e| e.code)
    }

    #[test]
    fn device_and_function_limits() {
        let none = KernelInfo::default();
        let one = [1, 1, 1];
        assert_eq!(
            code(Api::Cuda, &none, [i32::MAX as u32, 65535, 65535], one, 0),
            None
        );
        assert_eq!(code(Api::Cuda, &none, one, [1024, 1, 1], 48 * 1024), None);
        let config = Some(Code::InvalidConfiguration);
        assert_eq!(
            code(Api::Cuda, &none, [65536, 65536, 65536], one, 0),
            config
        );
        assert_eq!(code(Api::Hip, &none, [65536, 65536, 65536], one, 0), None);
        assert_eq!(code(Api::Cuda, &none, one, [1, 1, 65], 0), config);
        assert_eq!(code(Api::Hip, &none, one, [1, 1, 65], 0), None);
        assert_eq!(code(Api::Cuda, &none, one, [64, 32, 1], 0), config);
        assert_eq!(code(Api::Cuda, &none, one, one, 48 * 1024 + 1), config);
        assert_eq!(code(Api::Hip, &none, one, one, 48 * 1024 + 1), None);
        // HIP: at most 2^32 - 1 work-items along a dimension.
        let wide = [1 << 22, 1, 1];
        assert_eq!(code(Api::Hip, &none, wide, [1024, 1, 1], 0), config);
        assert_eq!(code(Api::Cuda, &none, wide, [1024, 1, 1], 0), None);
        // The function's own launch bound and static shared memory.
        let bounded = KernelInfo {
            max_threads: Some(128),
            static_shared: Some(40 * 1024),
            ..KernelInfo::default()
        };
        assert_eq!(code(Api::Cuda, &bounded, one, [128, 1, 1], 0), None);
        assert_eq!(
            code(Api::Cuda, &bounded, one, [129, 1, 1], 0),
            Some(Code::LaunchOutOfResources)
        );
        assert_eq!(code(Api::Cuda, &bounded, one, one, 8 * 1024), None);
        assert_eq!(code(Api::Cuda, &bounded, one, one, 8 * 1024 + 1), config);
        assert_eq!(function_max_threads(Api::Cuda, &bounded), 128);
        assert_eq!(function_max_dynamic_shared(Api::Cuda, &bounded), 8 * 1024);
        assert_eq!(
            code(Api::Cuda, &none, [0, 1, 1], one, 0),
            Some(Code::InvalidValue)
        );
    }
}
