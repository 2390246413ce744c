//! What the portable-source scan reports: a [`Finding`] at a line of the user's source.

/// A vendor-only construct found in portable source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// 1-based line in the user's source.
    pub line: usize,
    /// The construct as written (the identifier, or the directive's first word).
    pub construct: String,
    /// What to use instead.
    pub hint: &'static str,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(why) = self.hint.strip_prefix("the module does not parse: ") {
            return write!(
                f,
                "line {}: the module does not parse: `{}`: {why}",
                self.line, self.construct
            );
        }
        write!(
            f,
            "line {}: `{}` is not in the portable subset ({})",
            self.line, self.construct, self.hint
        )
    }
}
