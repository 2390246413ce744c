//! Index arithmetic of generated kernels, without divisions where the shapes allow it.
//!
//! A kernel's element index `i` is split into per-dimension indices, each a *digit*
//! `(i / d) % m` of a mixed-radix number; reshapes, transposes and buffer reads put digits
//! back together (a row-major linear index) and take them apart again. Done naively, every
//! reshape of a transposed value costs a division and a modulo per dimension per element —
//! the im2col of a convolution did tens of them per element. Here a linear index is a sum of
//! digits times strides, adjacent digits of one base merge (`(i / 9) % 3 * 3 + (i / 3) % 3`
//! is `(i / 3) % 9`), and taking a sum apart picks the digits that fall in each new
//! dimension, splitting a digit at a boundary where the sizes divide (`(i / 3) % 9` is
//! `(i / 3) % 3` and `(i / 9) % 3`). What cannot be taken apart so is divided as before.
//!
//! The expressions are C text: the forms this module writes are the forms it reads back
//! ([`Terms::parse`]), so an index passed through several ops keeps its structure. A digit is
//! a plain identifier, `(b / dLL)` or `((b / dLL) % mLL)`; a sum is `(t + t + …)` with each
//! `t` a digit, optionally `* sLL`, and a digit without a modulus whose range is known wrapped
//! as `xh_r(digit, rangeLL)` (the prelude's identity function: the range costs nothing at run
//! time, and the sum read back knows it).

/// `(base / div) % modulus` (no modulus: the quotient itself).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Digit {
    base: String,
    div: u64,
    modulus: Option<u64>,
}

impl Digit {
    fn render(&self) -> String {
        match (self.div, self.modulus) {
            (1, None) => self.base.clone(),
            (d, None) => format!("({} / {d}LL)", self.base),
            (d, Some(m)) => format!("(({} / {d}LL) % {m}LL)", self.base),
        }
    }

    fn parse(s: &str) -> Option<Digit> {
        if is_ident(s) {
            return Some(Digit {
                base: s.into(),
                div: 1,
                modulus: None,
            });
        }
        let quotient = |q: &str| -> Option<(String, u64)> {
            let q = q.strip_prefix('(')?.strip_suffix("LL)")?;
            let (b, d) = q.split_once(" / ")?;
            if !is_ident(b) {
                return None;
            }
            Some((b.to_string(), d.parse().ok()?))
        };
        if let Some(inner) = s.strip_prefix('(').and_then(|r| r.strip_suffix("LL)"))
            && let Some((q, m)) = inner.rsplit_once(" % ")
            && let Some((base, div)) = quotient(q)
        {
            return Some(Digit {
                base,
                div,
                modulus: Some(m.parse().ok()?),
            });
        }
        let (base, div) = quotient(s)?;
        Some(Digit {
            base,
            div,
            modulus: None,
        })
    }
}

/// A digit and its range: `xh_r(digit, rLL)`, or a digit (its modulus as its range).
fn parse_ranged(s: &str) -> Option<(Digit, Option<u64>)> {
    if let Some(inner) = s.strip_prefix("xh_r(").and_then(|r| r.strip_suffix("LL)")) {
        let (d, r) = inner.rsplit_once(", ")?;
        let digit = Digit::parse(d)?;
        return Some((digit, Some(r.parse().ok()?)));
    }
    let digit = Digit::parse(s)?;
    let range = digit.modulus;
    Some((digit, range))
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// `digit * stride`, the digit below `range` when it is known.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    digit: Digit,
    stride: u64,
    range: Option<u64>,
}

/// A sum of terms (an index or a linear index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Terms(Vec<Term>);

impl Terms {
    /// The terms of an expression this module wrote (or a plain identifier), else `None`.
    pub(crate) fn parse(s: &str) -> Option<Terms> {
        if s == "0LL" {
            return Some(Terms(vec![]));
        }
        if let Some((digit, range)) = parse_ranged(s) {
            return Some(Terms(vec![Term {
                digit,
                stride: 1,
                range,
            }]));
        }
        let inner = s.strip_prefix('(')?.strip_suffix(')')?;
        let mut terms = vec![];
        for t in split_top(inner, " + ")? {
            let (d, stride) = match t.rsplit_once(" * ") {
                Some((d, s)) if depth_zero(t, t.len() - s.len() - 3) => {
                    (d, s.strip_suffix("LL")?.parse().ok()?)
                }
                _ => (t, 1),
            };
            let (digit, range) = parse_ranged(d)?;
            terms.push(Term {
                digit,
                stride,
                range,
            });
        }
        Some(Terms(terms))
    }

    /// The C expression (a digit without a modulus whose range is known is wrapped in
    /// `xh_r` inside a sum, so that the sum read back knows its range).
    fn render(&self) -> String {
        match self.0.as_slice() {
            [] => "0LL".into(),
            [t] if t.stride == 1 => t.digit.render(),
            ts => {
                let parts: Vec<String> = ts
                    .iter()
                    .map(|t| {
                        let d = match (t.digit.modulus, t.range) {
                            (None, Some(r)) => format!("xh_r({}, {r}LL)", t.digit.render()),
                            _ => t.digit.render(),
                        };
                        if t.stride == 1 {
                            d
                        } else {
                            format!("{d} * {}LL", t.stride)
                        }
                    })
                    .collect();
                format!("({})", parts.join(" + "))
            }
        }
    }

    /// Sorted by stride, largest first, terms of range 1 (always 0) left out, adjacent
    /// digits of one base merged.
    fn normalize(mut self) -> Terms {
        self.0.retain(|t| t.range != Some(1));
        self.0.sort_by_key(|t| std::cmp::Reverse(t.stride));
        let mut out: Vec<Term> = vec![];
        for lo in self.0 {
            if let Some(hi) = out.last_mut()
                && let Some(r) = lo.range
                && hi.digit.base == lo.digit.base
                && lo.digit.modulus == Some(r)
                && hi.digit.div == lo.digit.div.saturating_mul(r)
                && hi.stride == lo.stride.saturating_mul(r)
                && (hi.digit.modulus.is_none() || hi.digit.modulus == hi.range)
            {
                hi.digit.div = lo.digit.div;
                hi.digit.modulus = hi.digit.modulus.and_then(|m| m.checked_mul(r));
                hi.range = hi.range.and_then(|m| m.checked_mul(r));
                hi.stride = lo.stride;
                continue;
            }
            out.push(lo);
        }
        Terms(out)
    }

    /// `self` with every term straddling `boundary` split there (`None` when one cannot be:
    /// the boundary is not a multiple of its stride, or does not divide its range).
    fn split_at(self, boundary: u64) -> Option<Terms> {
        let mut out = vec![];
        for t in self.0 {
            let top = t.range.and_then(|r| t.stride.checked_mul(r));
            let straddles = t.stride < boundary && top.is_none_or(|top| top > boundary);
            if !straddles {
                out.push(t);
                continue;
            }
            if !boundary.is_multiple_of(t.stride) {
                return None;
            }
            let p = boundary / t.stride;
            if t.range.is_some_and(|r| r % p != 0) || t.digit.modulus.is_some_and(|m| m % p != 0) {
                return None;
            }
            let div = t.digit.div.checked_mul(p)?;
            out.push(Term {
                digit: Digit {
                    base: t.digit.base.clone(),
                    div,
                    modulus: t.digit.modulus.map(|m| m / p),
                },
                stride: boundary,
                range: t.range.map(|r| r / p),
            });
            out.push(Term {
                digit: Digit {
                    base: t.digit.base,
                    div: t.digit.div,
                    modulus: Some(p),
                },
                stride: t.stride,
                range: Some(p),
            });
        }
        Some(Terms(out))
    }
}

/// `s` split at `sep` where no parenthesis is open (`None` if they do not balance).
fn split_top<'a>(s: &'a str, sep: &str) -> Option<Vec<&'a str>> {
    let mut parts = vec![];
    let (mut depth, mut start, mut i) = (0i64, 0usize, 0usize);
    let b = s.as_bytes();
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return None;
        }
        if depth == 0 && s[i..].starts_with(sep) {
            parts.push(&s[start..i]);
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    (depth == 0).then(|| {
        parts.push(&s[start..]);
        parts
    })
}

/// Whether no parenthesis is open at byte `at` of `s`.
fn depth_zero(s: &str, at: usize) -> bool {
    let mut depth = 0i64;
    for c in s.as_bytes()[..at].iter() {
        match c {
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
    }
    depth == 0
}

/// The row-major linear index of `idx` in `dims`, as digits where the indices are digits
/// (adjacent ones merged), else the plain formula; in a form [`split`] takes apart.
pub(crate) fn linear(idx: &[String], dims: &[u64]) -> String {
    if idx.is_empty() {
        return "0".into();
    }
    structured_linear(idx, dims).unwrap_or_else(|| plain_linear(idx, dims))
}

fn structured_linear(idx: &[String], dims: &[u64]) -> Option<String> {
    let mut all = vec![];
    let mut stride = 1u64;
    for (e, &d) in idx.iter().zip(dims).rev() {
        let Terms(ts) = Terms::parse(e)?;
        let single = ts.len() == 1;
        for mut t in ts {
            if single && t.stride == 1 {
                // The index is below its dimension.
                t.range = Some(t.range.map_or(d, |r| r.min(d)));
            }
            t.stride = t.stride.checked_mul(stride)?;
            all.push(t);
        }
        stride = stride.checked_mul(d)?;
    }
    Some(Terms(all).normalize().render())
}

fn plain_linear(idx: &[String], dims: &[u64]) -> String {
    let mut e = idx[0].clone();
    for (i, d) in idx.iter().zip(dims).skip(1) {
        e = format!("({e}) * {d}LL + {i}");
    }
    e
}

/// The indices, in `dims`, of the row-major position `lin` (below the product of `dims`):
/// for each dimension, the digits of `lin` that fall in it (`None` for one that cannot be
/// taken apart so: the caller divides).
pub(crate) fn split(lin: &str, dims: &[u64]) -> Vec<Option<String>> {
    let mut out = vec![None; dims.len()];
    let Some(total) = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)) else {
        return out;
    };
    let Some(Terms(mut ts)) = Terms::parse(lin) else {
        return out;
    };
    if total == 0 {
        return out;
    }
    // A term of unknown range is bounded by the total.
    for t in &mut ts {
        if t.range.is_none() {
            t.range = Some((total - 1) / t.stride.max(1) + 1);
        }
    }
    let terms = Terms(ts).normalize();
    // The terms must not overlap (each below the next one's stride).
    let mut by_stride = terms.0.clone();
    by_stride.sort_by_key(|t| t.stride);
    if by_stride.windows(2).any(|w| {
        w[0].range
            .and_then(|r| w[0].stride.checked_mul(r))
            .is_none_or(|top| top > w[1].stride)
    }) {
        return out;
    }
    let mut stride = 1u64;
    for d in (0..dims.len()).rev() {
        let (lo, hi) = (
            stride,
            if d == 0 {
                None
            } else {
                stride.checked_mul(dims[d])
            },
        );
        out[d] = window(&terms, lo, hi);
        stride = stride.saturating_mul(dims[d]);
    }
    out
}

/// `(L / lo) % (hi / lo)` (no modulus without `hi`) of the sum `L` of `terms`, as terms.
fn window(terms: &Terms, lo: u64, hi: Option<u64>) -> Option<String> {
    let mut t = terms.clone().split_at(lo)?;
    if let Some(hi) = hi {
        t = t.split_at(hi)?;
    }
    let mut inside = vec![];
    for mut x in t.0 {
        let top = x.range.and_then(|r| x.stride.checked_mul(r))?;
        let below = top <= lo;
        let above = hi.is_some_and(|h| x.stride >= h);
        if below || above {
            continue;
        }
        if x.stride % lo != 0 {
            return None;
        }
        x.stride /= lo;
        inside.push(x);
    }
    Some(Terms(inside).normalize().render())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// Evaluates the C integer expressions of this module (`+ * / %`, parentheses, literals
    /// with `LL`, identifiers from `vars`).
    fn eval(s: &str, vars: &[(&str, i64)]) -> i64 {
        let toks = tokens(s);
        let mut p = 0;
        let v = sum(&toks, &mut p, vars);
        assert_eq!(p, toks.len(), "trailing tokens in {s}");
        v
    }

    fn tokens(s: &str) -> Vec<String> {
        let mut out = vec![];
        let mut cur = String::new();
        for c in s.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                cur.push(c);
            } else {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                if !c.is_whitespace() {
                    out.push(c.to_string());
                }
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    fn sum(t: &[String], p: &mut usize, vars: &[(&str, i64)]) -> i64 {
        let mut v = product(t, p, vars);
        while *p < t.len() && t[*p] == "+" {
            *p += 1;
            v += product(t, p, vars);
        }
        v
    }

    fn product(t: &[String], p: &mut usize, vars: &[(&str, i64)]) -> i64 {
        let mut v = atom(t, p, vars);
        while *p < t.len() && ["*", "/", "%"].contains(&t[*p].as_str()) {
            let op = t[*p].clone();
            *p += 1;
            let r = atom(t, p, vars);
            v = match op.as_str() {
                "*" => v * r,
                "/" => v / r,
                _ => v % r,
            };
        }
        v
    }

    fn atom(t: &[String], p: &mut usize, vars: &[(&str, i64)]) -> i64 {
        let tok = t[*p].clone();
        *p += 1;
        if tok == "xh_r" {
            // The prelude's identity on an index with its range.
            assert_eq!(t[*p], "(");
            *p += 1;
            let v = sum(t, p, vars);
            assert_eq!(t[*p], ",");
            *p += 1;
            let r = sum(t, p, vars);
            assert_eq!(t[*p], ")");
            *p += 1;
            assert!((0..r).contains(&v), "xh_r({v}, {r}): out of range");
            return v;
        }
        if tok == "(" {
            let v = sum(t, p, vars);
            assert_eq!(t[*p], ")");
            *p += 1;
            return v;
        }
        if let Some(n) = tok.strip_suffix("LL") {
            return n.parse().unwrap();
        }
        if let Ok(n) = tok.parse() {
            return n;
        }
        vars.iter().find(|(k, _)| *k == tok).unwrap().1
    }

    /// The division-based reference of `split`: `(lin / stride) % dim`.
    fn digits(lin: i64, dims: &[u64]) -> Vec<i64> {
        let mut out = vec![0; dims.len()];
        let mut l = lin;
        for d in (0..dims.len()).rev() {
            out[d] = l % dims[d] as i64;
            l /= dims[d] as i64;
        }
        out
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random chains of transposes and reshapes, as the emitter composes them: the
    /// indices of every value at every element equal the division-based ones.
    #[test]
    fn reshapes_and_transposes_of_digits_equal_the_divisions() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut structured = 0;
        for _ in 0..300 {
            let rank = 1 + rng.below(4) as usize;
            let dims: Vec<u64> = (0..rank)
                .map(|_| [1, 2, 3, 4, 6, 8][rng.below(6) as usize])
                .collect();
            let n: u64 = dims.iter().product();
            // The output's indices, from the element index `i`.
            let mut idx: Vec<String> = {
                let mut v = vec![String::new(); rank];
                let mut s = 1;
                for d in (0..rank).rev() {
                    v[d] = if d == 0 {
                        format!("(i / {s}LL)")
                    } else {
                        format!("((i / {s}LL) % {}LL)", dims[d])
                    };
                    s *= dims[d];
                }
                v
            };
            let mut cur = dims.clone();
            // The reference: a function from i to the indices, built alongside.
            let mut steps: Vec<(Vec<usize>, Vec<u64>)> = vec![];
            for _ in 0..3 {
                // A transpose (its operand's index d is our index perm^-1 …): permute.
                let mut perm: Vec<usize> = (0..cur.len()).collect();
                for k in (1..perm.len()).rev() {
                    perm.swap(k, rng.below(k as u64 + 1) as usize);
                }
                let pidx: Vec<String> = perm.iter().map(|&p| idx[p].clone()).collect();
                let pdims: Vec<u64> = perm.iter().map(|&p| cur[p]).collect();
                // Then a reshape of the permuted value to new dims with the same count.
                let new = factor(n, &mut rng);
                let lin = linear(&pidx, &pdims);
                let parts = split(&lin, &new);
                idx = parts
                    .iter()
                    .enumerate()
                    .map(|(d, p)| {
                        p.clone().unwrap_or_else(|| {
                            let s: u64 = new[d + 1..].iter().product();
                            format!("((({lin}) / {s}LL) % {}LL)", new[d])
                        })
                    })
                    .collect();
                structured += parts.iter().filter(|p| p.is_some()).count();
                steps.push((perm, new.clone()));
                cur = new;
            }
            for i in 0..n as i64 {
                let mut want = digits(i, &dims);
                let mut wd = dims.clone();
                for (perm, new) in &steps {
                    let pv: Vec<i64> = perm.iter().map(|&p| want[p]).collect();
                    let pd: Vec<u64> = perm.iter().map(|&p| wd[p]).collect();
                    let mut lin = 0i64;
                    for (v, d) in pv.iter().zip(&pd) {
                        lin = lin * *d as i64 + v;
                    }
                    want = digits(lin, new);
                    wd = new.clone();
                }
                let got: Vec<i64> = idx.iter().map(|e| eval(e, &[("i", i)])).collect();
                assert_eq!(got, want, "i {i} dims {dims:?} steps {steps:?} idx {idx:?}");
            }
        }
        assert!(
            structured > 500,
            "only {structured} indices were taken apart without division"
        );
    }

    fn factor(mut n: u64, rng: &mut Rng) -> Vec<u64> {
        let mut out = vec![];
        while n > 1 {
            let ds: Vec<u64> = (2..=n).filter(|d| n.is_multiple_of(*d)).collect();
            let d = ds[rng.below(ds.len() as u64) as usize];
            out.push(d);
            n /= d;
        }
        if out.is_empty() || rng.below(3) == 0 {
            out.insert(rng.below(out.len() as u64 + 1) as usize, 1);
        }
        out
    }

    #[test]
    fn adjacent_digits_merge_and_split_back() {
        let idx = [
            "((i / 9LL) % 3LL)".to_string(),
            "((i / 3LL) % 3LL)".to_string(),
        ];
        assert_eq!(linear(&idx, &[3, 3]), "((i / 3LL) % 9LL)");
        let parts = split("((i / 3LL) % 9LL)", &[3, 3]);
        assert_eq!(
            parts,
            vec![
                Some("((i / 9LL) % 3LL)".into()),
                Some("((i / 3LL) % 3LL)".into())
            ]
        );
        // The whole index back: no division left but the thread's own digits.
        let idx = [
            "(i / 12LL)".to_string(),
            "((i / 4LL) % 3LL)".to_string(),
            "((i / 1LL) % 4LL)".to_string(),
        ];
        assert_eq!(linear(&idx, &[5, 3, 4]), "i");
    }
}
