//! A bounded MessagePack reader: enough for the `NT_AMDGPU_METADATA` note of AMD code objects
//! (maps, arrays, strings, integers, booleans; floats, binaries and extensions are read and
//! kept opaque). Every length is checked against the bytes left and nesting is limited, so a
//! malformed note is an error, never a panic or a large allocation.

/// A decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    /// Any integer (negative ones too).
    Int(i128),
    Str(String),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    /// A float, a binary or an extension: present, not interpreted.
    Other,
}

/// The deepest nesting read (the metadata nests 4 levels).
const MAX_DEPTH: usize = 32;

impl Value {
    /// The value of `key` in a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
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
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// Decodes the one value at the start of `data`.
pub fn decode(data: &[u8]) -> Result<Value, String> {
    let mut r = Reader { data, pos: 0 };
    r.value(0)
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or("truncated MessagePack data")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |a, &b| (a << 8) | u64::from(b)))
    }

    fn int(&mut self, n: usize) -> Result<i128, String> {
        let u = self.uint(n)?;
        let bits = 8 * n as u32;
        // Sign-extend an n-byte two's complement value.
        let shift = 128 - bits;
        Ok(((i128::from(u)) << shift) >> shift)
    }

    fn len(&mut self, n: usize) -> Result<usize, String> {
        usize::try_from(self.uint(n)?).map_err(|_| "MessagePack length too large".to_string())
    }

    fn string(&mut self, n: usize) -> Result<Value, String> {
        let b = self.take(n)?;
        Ok(Value::Str(String::from_utf8_lossy(b).into_owned()))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        // Each element takes at least a byte: a count beyond what is left is malformed (and
        // never sizes an allocation).
        if n > self.data.len() - self.pos {
            return Err("MessagePack array longer than its data".into());
        }
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(v))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, String> {
        if n > (self.data.len() - self.pos) / 2 {
            return Err("MessagePack map longer than its data".into());
        }
        let mut v = Vec::new();
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            v.push((k, self.value(depth + 1)?));
        }
        Ok(Value::Map(v))
    }

    fn skip(&mut self, n: usize) -> Result<Value, String> {
        self.take(n)?;
        Ok(Value::Other)
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("MessagePack data nested too deeply".into());
        }
        let b = self.take(1)?[0];
        match b {
            0x00..=0x7f => Ok(Value::Int(i128::from(b))),
            0x80..=0x8f => self.map(usize::from(b & 0x0f), depth),
            0x90..=0x9f => self.array(usize::from(b & 0x0f), depth),
            0xa0..=0xbf => self.string(usize::from(b & 0x1f)),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Bool(false)),
            0xc3 => Ok(Value::Bool(true)),
            0xc4..=0xc6 => {
                let n = self.len(1 << (b - 0xc4))?;
                self.skip(n)
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (b - 0xc7))?;
                self.skip(n.checked_add(1).ok_or("MessagePack length too large")?)
            }
            0xca => self.skip(4),
            0xcb => self.skip(8),
            0xcc..=0xcf => Ok(Value::Int(i128::from(self.uint(1 << (b - 0xcc))?))),
            0xd0..=0xd3 => Ok(Value::Int(self.int(1 << (b - 0xd0))?)),
            0xd4..=0xd8 => self.skip(1 + (1 << (b - 0xd4))),
            0xd9..=0xdb => {
                let n = self.len(1 << (b - 0xd9))?;
                self.string(n)
            }
            0xdc | 0xdd => {
                let n = self.len(2 << (b - 0xdc))?;
                self.array(n, depth)
            }
            0xde | 0xdf => {
                let n = self.len(2 << (b - 0xde))?;
                self.map(n, depth)
            }
            0xe0..=0xff => Ok(Value::Int(i128::from(b as i8))),
            0xc1 => Err("MessagePack byte 0xc1 is never used".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_maps_arrays_strings_and_integers() {
        // {"a": [1, -1, 300, true], "bb": "x", "c": 1.5}
        let data = [
            0x83, 0xa1, b'a', 0x94, 0x01, 0xff, 0xcd, 0x01, 0x2c, 0xc3, 0xa2, b'b', b'b', 0xa1,
            b'x', 0xa1, b'c', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
        ];
        let v = decode(&data);
        let Ok(v) = v else { unreachable!("{v:?}") };
        let a = v.get("a").and_then(Value::as_array).unwrap_or(&[]);
        assert_eq!(
            a,
            &[
                Value::Int(1),
                Value::Int(-1),
                Value::Int(300),
                Value::Bool(true)
            ]
        );
        assert_eq!(v.get("bb").and_then(Value::as_str), Some("x"));
        assert_eq!(v.get("c"), Some(&Value::Other));
        assert_eq!(Value::Int(-1).as_u64(), None);
    }

    #[test]
    fn malformed_data_is_an_error() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0xdc, 0xff, 0xff]).is_err()); // 65535 elements, none there
        assert!(decode(&[0xdb, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode(&[0xc1]).is_err());
        let deep = vec![0x91u8; 100];
        assert!(decode(&deep).is_err_and(|e| e.contains("deeply")));
    }
}
