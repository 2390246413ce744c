//! The typed view a handler gets of one call: its buffers (device pointer, element type,
//! dims), its attributes with typed decoding ([`FromAttr`]: a wrong or missing attribute is
//! an error naming it), and the stream, device and thunk it runs for.

use super::errors::HandlerError;
use crate::backend::{Device, DevicePtr, Stream};
use crate::ir::{AttrArray, AttrValue, Attributes, DType, ThunkPath};

/// One operand or result at issue time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallBuffer<'a> {
    /// The device address of the slice's first byte (a host address on the host backend, and
    /// on emulated devices, whose memory is host memory).
    pub ptr: DevicePtr,
    pub dtype: DType,
    pub dims: &'a [u64],
    /// Bytes (the element count times the element size, checked at load).
    pub size: u64,
}

impl CallBuffer<'_> {
    /// Elements (dims multiply without overflow: checked at load).
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// One call of a handler.
pub struct Call<'a> {
    pub(crate) target: &'a str,
    pub(crate) path: &'a ThunkPath,
    pub(crate) operands: Vec<CallBuffer<'a>>,
    pub(crate) results: Vec<CallBuffer<'a>>,
    pub(crate) attributes: &'a Attributes,
    pub(crate) stream: &'a dyn Stream,
    pub(crate) device: &'a dyn Device,
}

impl<'a> Call<'a> {
    pub fn target(&self) -> &str {
        self.target
    }

    /// The thunk's path in the program, e.g. `entry[2].body[0]`.
    pub fn path(&self) -> &ThunkPath {
        self.path
    }

    pub fn operands(&self) -> &[CallBuffer<'a>] {
        &self.operands
    }

    pub fn results(&self) -> &[CallBuffer<'a>] {
        &self.results
    }

    /// Operand `i`, checked to be of `dtype` (an error names it otherwise).
    pub fn operand(&self, i: usize, dtype: DType) -> Result<&CallBuffer<'a>, HandlerError> {
        typed(&self.operands, "operand", i, dtype)
    }

    /// Result `i`, checked to be of `dtype`.
    pub fn result(&self, i: usize, dtype: DType) -> Result<&CallBuffer<'a>, HandlerError> {
        typed(&self.results, "result", i, dtype)
    }

    pub fn attributes(&self) -> &Attributes {
        self.attributes
    }

    /// The attribute `name` decoded as `T`; missing or of another type is an error naming it.
    pub fn attr<T: FromAttr>(&self, name: &str) -> Result<T, HandlerError> {
        decode(self.attributes, name)
    }

    /// The attribute `name` decoded as `T`, or `None` when the call does not give it (a value
    /// of another type is still an error).
    pub fn attr_opt<T: FromAttr>(&self, name: &str) -> Result<Option<T>, HandlerError> {
        match self.attributes.get(name) {
            None => Ok(None),
            Some(_) => decode(self.attributes, name).map(Some),
        }
    }

    /// The xthunk stream the call is issued on.
    pub fn stream(&self) -> &dyn Stream {
        self.stream
    }

    /// Runs `work` on the host in the stream's order ([`Stream::enqueue_host`]; captured with
    /// the call into a command buffer's recording). Its error fails the execution naming the
    /// thunk and the target, like an error the handler returns.
    pub fn enqueue_host(
        &self,
        work: impl Fn() -> Result<(), HandlerError> + Send + Sync + 'static,
    ) -> Result<(), HandlerError> {
        let target = self.target.to_string();
        let path = self.path.clone();
        let wrapped: crate::backend::HostWork = std::sync::Arc::new(move || {
            work().map_err(|e| {
                let e: crate::Error = super::CustomCallError::Failed {
                    target: target.clone(),
                    source: Box::new(e),
                }
                .into();
                e.at_thunk(&path, "custom_call")
            })
        });
        self.stream
            .enqueue_host(wrapped)
            .map_err(HandlerError::Runtime)
    }

    /// The native stream (`CUstream`, `hipStream_t`) as an integer; `None` on the host.
    pub fn native_stream(&self) -> Option<usize> {
        self.stream.native_handle()
    }

    pub fn device(&self) -> &dyn Device {
        self.device
    }

    /// The device's backend: `host`, `cuda`, `rocm`.
    pub fn backend(&self) -> &'static str {
        self.device.backend_name()
    }
}

fn typed<'b, 'a>(
    list: &'b [CallBuffer<'a>],
    what: &str,
    i: usize,
    dtype: DType,
) -> Result<&'b CallBuffer<'a>, HandlerError> {
    let which = format!("{what} {i}");
    match list.get(i) {
        None => Err(HandlerError::Buffer {
            which,
            message: format!("the call has {} {what}s", list.len()),
        }),
        Some(b) if b.dtype != dtype => Err(HandlerError::Buffer {
            which,
            message: format!("is {}, the handler takes {dtype}", b.dtype),
        }),
        Some(b) => Ok(b),
    }
}

/// Decodes `name` of `attrs` as `T`.
pub(crate) fn decode<T: FromAttr>(attrs: &Attributes, name: &str) -> Result<T, HandlerError> {
    let Some(v) = attrs.get(name) else {
        return Err(HandlerError::Attribute {
            name: name.into(),
            message: format!("missing (the handler reads {})", T::TYPE),
        });
    };
    T::from_attr(v).ok_or_else(|| HandlerError::Attribute {
        name: name.into(),
        message: format!("is {}, the handler reads {}", v.type_name(), T::TYPE),
    })
}

/// A Rust type an attribute decodes to. Decoding is exact: an `i32` attribute is not an
/// `i64`, an `f32` is not an `f64`.
pub trait FromAttr: Sized {
    /// The attribute type's name, as [`AttrValue::type_name`] gives it.
    const TYPE: &'static str;
    fn from_attr(v: &AttrValue) -> Option<Self>;
}

macro_rules! from_attr {
    ($t:ty, $name:literal, $scalar:ident, $array:ident, $arr_name:literal) => {
        impl FromAttr for $t {
            const TYPE: &'static str = $name;
            fn from_attr(v: &AttrValue) -> Option<Self> {
                match v {
                    AttrValue::$scalar(x) => Some(x.clone()),
                    _ => None,
                }
            }
        }
        impl FromAttr for Vec<$t> {
            const TYPE: &'static str = $arr_name;
            fn from_attr(v: &AttrValue) -> Option<Self> {
                match v {
                    AttrValue::Array(AttrArray::$array(x)) => Some(x.clone()),
                    _ => None,
                }
            }
        }
    };
}

from_attr!(bool, "bool", Bool, Bool, "array<bool>");
from_attr!(i32, "i32", I32, I32, "array<i32>");
from_attr!(i64, "i64", I64, I64, "array<i64>");
from_attr!(f32, "f32", F32, F32, "array<f32>");
from_attr!(f64, "f64", F64, F64, "array<f64>");
from_attr!(String, "string", Str, Str, "array<string>");

impl FromAttr for Attributes {
    const TYPE: &'static str = "dict";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            AttrValue::Dict(d) => Some(d.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn decoding_is_typed_and_names_the_attribute() {
        let a = Attributes(vec![
            ("k".into(), AttrValue::I64(3)),
            (
                "xs".into(),
                AttrValue::Array(AttrArray::F32(vec![1.0, 2.0])),
            ),
        ]);
        assert_eq!(decode::<i64>(&a, "k").unwrap(), 3);
        assert_eq!(decode::<Vec<f32>>(&a, "xs").unwrap(), vec![1.0, 2.0]);
        let e = decode::<i32>(&a, "k").unwrap_err().to_string();
        assert_eq!(e, "attribute `k`: is i64, the handler reads i32");
        let e = decode::<f32>(&a, "scale").unwrap_err().to_string();
        assert!(e.contains("attribute `scale`: missing"), "{e}");
    }
}
