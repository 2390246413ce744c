//! One section of an ELF image, as `image.rs` reads it and `kernel_info.rs` looks into it.

/// One section of an ELF image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    /// `sh_type`.
    pub ty: u32,
    pub(crate) offset: usize,
    /// `sh_size` (for `SHT_NOBITS` sections too, which occupy no bytes of the file).
    pub size: usize,
}

impl Section {
    /// The section's bytes in the file (`None` for `SHT_NOBITS` or out of bounds).
    pub fn bytes<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        if self.ty == 8 {
            return None;
        }
        data.get(self.offset..self.offset.checked_add(self.size)?)
    }
}
