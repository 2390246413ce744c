//! The one MessagePack reader of the GPU backends: the small part of MessagePack that AMD
//! code-object metadata (`NT_AMDGPU_METADATA`) uses, bounds-checked and depth-limited; a
//! truncated or hostile document is an error, never a panic or a huge allocation.

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Ext,
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::UInt(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

const MAX_DEPTH: usize = 32;

pub struct Parser<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Parser { data, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).ok_or("length overflows")?;
        let s = self.data.get(self.at..end).ok_or("truncated")?;
        self.at = end;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, String> {
        Ok(self.take(n)?.iter().fold(0u64, |a, b| (a << 8) | *b as u64))
    }

    /// A length that cannot exceed what is left (every element takes at least a byte).
    fn count(&mut self, n: usize) -> Result<usize, String> {
        let c = usize::try_from(self.be(n)?).map_err(|_| "count too large")?;
        if c > self.data.len() - self.at {
            return Err("count exceeds the data".into());
        }
        Ok(c)
    }

    pub fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply".into());
        }
        let b = self.take(1)?[0];
        Ok(match b {
            0x00..=0x7f => Value::UInt(b as u64),
            0xe0..=0xff => Value::Int(b as i8 as i64),
            0x80..=0x8f => self.map((b & 0x0f) as usize, depth)?,
            0x90..=0x9f => self.array((b & 0x0f) as usize, depth)?,
            0xa0..=0xbf => self.str((b & 0x1f) as usize)?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.count(1 << (b - 0xc4))?;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.count(1 << (b - 0xc7))?;
                self.take(n + 1)?;
                Value::Ext
            }
            0xca => Value::Float(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => Value::Float(f64::from_bits(self.be(8)?)),
            0xcc..=0xcf => Value::UInt(self.be(1 << (b - 0xcc))?),
            0xd0 => Value::Int(self.be(1)? as u8 as i8 as i64),
            0xd1 => Value::Int(self.be(2)? as u16 as i16 as i64),
            0xd2 => Value::Int(self.be(4)? as u32 as i32 as i64),
            0xd3 => Value::Int(self.be(8)? as i64),
            0xd4..=0xd8 => {
                self.take(1 + (1 << (b - 0xd4)))?;
                Value::Ext
            }
            0xd9..=0xdb => {
                let n = self.count(1 << (b - 0xd9))?;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.count(if b == 0xdc { 2 } else { 4 })?;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.count(if b == 0xde { 2 } else { 4 })?;
                self.map(n, depth)?
            }
            _ => return Err(format!("unknown type byte {b:#04x}")),
        })
    }

    fn str(&mut self, n: usize) -> Result<Value, String> {
        Ok(Value::Str(
            String::from_utf8_lossy(self.take(n)?).into_owned(),
        ))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(v))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let val = self.value(depth + 1)?;
            v.push((k, val));
        }
        Ok(Value::Map(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_metadata_subset() {
        // {"a": [1, -1, "x"], "b": 300}
        let data = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xff, 0xa1, b'x', 0xa1, b'b', 0xcd, 0x01, 0x2c,
        ];
        let v = Parser::new(&data).value(0);
        let Ok(v) = v else {
            unreachable!("{v:?}");
        };
        assert_eq!(v.get("b").and_then(Value::as_u64), Some(300));
        assert_eq!(
            v.get("a").and_then(Value::as_array).map(<[Value]>::len),
            Some(3)
        );
        // Truncation and absurd counts are errors, not panics or huge allocations.
        assert!(Parser::new(&[0x92, 0x01]).value(0).is_err());
        assert!(
            Parser::new(&[0xdd, 0xff, 0xff, 0xff, 0xff])
                .value(0)
                .is_err()
        );
        let deep = vec![0x91u8; 100];
        assert!(Parser::new(&deep).value(0).is_err());
    }
}
