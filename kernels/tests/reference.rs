//! `docs/kernels-reference.md` is what the catalogue generates: every standard kernel with
//! its parameters and semantics. `XTHUNK_BLESS=1` rewrites the page instead of comparing.

#![allow(clippy::panic)]

use std::path::PathBuf;
use xthunk_kernels::kernels::reference::reference_markdown;
use xthunk_kernels::kernels::standard_library;

#[test]
fn the_reference_page_matches_the_catalogue() {
    let lib = standard_library();
    let text = match reference_markdown(lib) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    // Every kernel has its row.
    for name in lib.names() {
        assert!(text.contains(&format!("| `{name}` |")), "{name} has no row");
    }
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/kernels-reference.md");
    if std::env::var_os("XTHUNK_BLESS").is_some() {
        if let Err(e) = std::fs::write(&page, &text) {
            panic!("writing {}: {e}", page.display());
        }
        return;
    }
    let on_disk = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} differs from the catalogue; regenerate it with \
         `XTHUNK_BLESS=1 cargo test -p xthunk-kernels --test reference` and review the diff",
        page.display()
    );
}
