//! Borrowed tensor views and their translation into `th_tensor` arrays.

use crate::error::{Error, Result, Status};
use crate::ffi::cstring;
use crate::sys;
use std::ffi::{c_void, CString};

/// Element type of a tensor (`th_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
#[non_exhaustive]
pub enum DType {
    UInt8 = sys::TH_DTYPE_UINT8,
    Int8 = sys::TH_DTYPE_INT8,
    Int16 = sys::TH_DTYPE_INT16,
    Int32 = sys::TH_DTYPE_INT32,
    Int64 = sys::TH_DTYPE_INT64,
    Float16 = sys::TH_DTYPE_FLOAT16,
    BFloat16 = sys::TH_DTYPE_BFLOAT16,
    Float32 = sys::TH_DTYPE_FLOAT32,
    Float64 = sys::TH_DTYPE_FLOAT64,
    Bool = sys::TH_DTYPE_BOOL,
    Float8E4M3 = sys::TH_DTYPE_FLOAT8_E4M3,
    Float8E5M2 = sys::TH_DTYPE_FLOAT8_E5M2,
    UInt16 = sys::TH_DTYPE_UINT16,
    UInt32 = sys::TH_DTYPE_UINT32,
    UInt64 = sys::TH_DTYPE_UINT64,
}

impl DType {
    const ALL: [DType; 15] = [
        DType::UInt8,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
        DType::Bool,
        DType::Float8E4M3,
        DType::Float8E5M2,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
    ];

    /// The dtype with this `th_dtype` number (the `dtype_id` of describe JSON).
    pub fn from_id(id: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as i32 == id)
    }

    /// Bytes per element, as the library computes it.
    pub fn size(self) -> usize {
        // SAFETY: pure function of its argument.
        unsafe { sys::th_dtype_size(self as i32) }
    }
}

/// A named tensor in host memory to publish: the library serves `data` to
/// other processes for as long as the resulting replica lives.
#[derive(Debug, Clone)]
pub struct Tensor<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub data: &'a [u8],
}

/// A named tensor in host memory to fetch into.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub data: &'a mut [u8],
}

impl<'a> Tensor<'a> {
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[i64], data: &'a [u8]) -> Self {
        Tensor { name: name.into(), dtype, shape: shape.to_vec(), data }
    }

    /// A flat `uint8` tensor over `data`.
    pub fn bytes(name: impl Into<String>, data: &'a [u8]) -> Self {
        Tensor::new(name, DType::UInt8, &[data.len() as i64], data)
    }
}

impl<'a> TensorMut<'a> {
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[i64], data: &'a mut [u8]) -> Self {
        TensorMut { name: name.into(), dtype, shape: shape.to_vec(), data }
    }

    /// A flat `uint8` tensor over `data`.
    pub fn bytes(name: impl Into<String>, data: &'a mut [u8]) -> Self {
        let len = data.len() as i64;
        TensorMut::new(name, DType::UInt8, &[len], data)
    }
}

/// A `th_tensor` array plus the C strings its `name` fields point into; the
/// strings must outlive the call, so they travel together.
pub(crate) struct RawTensors {
    _names: Vec<CString>,
    raw: Vec<sys::th_tensor>,
}

impl RawTensors {
    fn build<'t>(items: impl Iterator<Item = (&'t str, DType, &'t [i64], *mut c_void, usize)>) -> Result<Self> {
        let mut names = Vec::new();
        let mut raw = Vec::new();
        for (name, dtype, shape, data, len) in items {
            if shape.len() > sys::TH_MAX_DIMS {
                return Err(Error::new(
                    Status::InvalidArg,
                    format!("tensor '{name}' has ndim {} > {}", shape.len(), sys::TH_MAX_DIMS),
                ));
            }
            let cname = cstring("tensor name", name)?;
            let mut dims = [0i64; sys::TH_MAX_DIMS];
            dims[..shape.len()].copy_from_slice(shape);
            raw.push(sys::th_tensor {
                // The CString's heap buffer does not move when `names` grows.
                name: cname.as_ptr(),
                dtype: dtype as i32,
                ndim: shape.len() as u32,
                shape: dims,
                data,
                nbytes: len as u64,
                mem_kind: sys::TH_MEM_HOST,
                device: 0,
            });
            names.push(cname);
        }
        Ok(RawTensors { _names: names, raw })
    }

    pub(crate) fn of(tensors: &[Tensor<'_>]) -> Result<Self> {
        // The library only reads published memory; `*mut` is the C field type.
        RawTensors::build(
            tensors
                .iter()
                .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.data.as_ptr() as *mut c_void, t.data.len())),
        )
    }

    pub(crate) fn of_mut(tensors: &mut [TensorMut<'_>]) -> Result<Self> {
        RawTensors::build(
            tensors
                .iter_mut()
                .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.data.as_mut_ptr().cast(), t.data.len())),
        )
    }

    pub(crate) fn as_ptr(&self) -> *const sys::th_tensor {
        self.raw.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }
}
