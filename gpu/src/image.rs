//! What both vendors check on a device-code image before loading it: its source stamp
//! against the module's source ([`stamp`]); and what a portable image compiles as (its
//! translation unit; the module a bare image is compiled in). (Reading the images is the vendors' business,
//! with the one ELF reader, [`crate::elf`].)

use xthunk_core::ir::{Module, ModuleImage};
use xthunk_core::kernels::portable::{self, stamp};

/// Whether a compiled image whose symbols are `symbols` may be used for `module`: `Err` with
/// the message when its source stamp differs from `expected` (the module's source); an image
/// without a stamp is used with a warning. `image` describes it (`cubin(sm_90)`,
/// `hsaco(gfx90a)`).
pub fn check_stamp<'a>(
    module: &str,
    expected: &str,
    image: &str,
    symbols: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    match stamp::check_stamp(expected, symbols) {
        stamp::Stamp::Matches => Ok(()),
        stamp::Stamp::Missing => {
            tracing::warn!(
                module,
                "the {image} image records no source stamp: it cannot be checked against the module's source"
            );
            Ok(())
        }
        stamp::Stamp::Differs { found } => {
            Err(stamp::stale_message(module, image, expected, &found))
        }
    }
}

/// The module a bare image is compiled as (`xthunk compile` of one image, with no module
/// around it): named `source`, default options.
pub fn bare_module() -> Module {
    Module {
        name: "source".into(),
        images: vec![],
        options: Default::default(),
    }
}

/// The translation unit a portable image of `module` compiles as: the standard library for
/// `standard`, the module's code with its options (and the prelude) for `source`; `None` for
/// an image that is not portable source.
pub fn portable_source(module: &Module, image: &ModuleImage) -> Option<String> {
    match image {
        ModuleImage::Standard => Some(portable::standard_source().to_string()),
        ModuleImage::Source { code } => Some(portable::module_source_with(
            &module.name,
            code,
            &module.options,
        )),
        _ => None,
    }
}

/// Why `image` is not compiled: it is not portable source.
pub fn not_portable(image: &ModuleImage) -> String {
    format!(
        "a {} image is not portable source; only `standard` and `source` images are compiled",
        image.describe()
    )
}
