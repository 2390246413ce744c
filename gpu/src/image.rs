//! What both vendors check on a device-code image before loading it: its source stamp
//! against the module's source ([`stamp`]); and the module a bare image is compiled as. (Reading the images is the vendors' business,
//! with the one ELF reader, [`crate::elf`].)

use xthunk_core::ir::Module;
use xthunk_core::kernels::portable::stamp;

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
