//! The raw ABI: `#[repr(C)]` mirrors of every type in `dlpack.h` 1.3.
//!
//! Names follow the C header. The enum-like types ([`DLDeviceType`], [`DLDataTypeCode`]) and the
//! small value structs ([`DLDevice`], [`DLDataType`], [`DLPackVersion`]) are aliases of this
//! crate's value types, which have exactly the C layout, so no conversion is ever needed. The
//! C constant names (`kDLCUDA`, `kDLFloat`, ...) are provided too.
//!
//! Every layout is asserted at compile time below, and `tests/header_layout.rs` compiles the real
//! upstream header with the C compiler and compares sizes, offsets and values with these.
//!
//! Nothing here is safe to read from a foreign pointer without checks: use
//! [`crate::ManagedTensor`] to import.
#![allow(non_upper_case_globals)]

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};

/// `DLPACK_MAJOR_VERSION`: 1, the major of [`Version::CURRENT`](crate::Version::CURRENT).
pub const DLPACK_MAJOR_VERSION: u32 = crate::Version::CURRENT.major;
/// `DLPACK_MINOR_VERSION`: 3, the minor of [`Version::CURRENT`](crate::Version::CURRENT).
pub const DLPACK_MINOR_VERSION: u32 = crate::Version::CURRENT.minor;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLPackVersion`.
pub type DLPackVersion = crate::Version;
/// `DLDeviceType` (an `int32_t`-sized enum in C).
pub type DLDeviceType = crate::DeviceType;
/// `DLDevice`.
pub type DLDevice = crate::Device;
/// `DLDataTypeCode` (stored as `uint8_t` in [`DLDataType`]).
pub type DLDataTypeCode = crate::DataTypeCode;
/// `DLDataType`.
pub type DLDataType = crate::DataType;

macro_rules! c_consts {
    ($ty:ident { $($c:ident = $rust:ident),* $(,)? }) => {
        $(
            #[doc = concat!("`", stringify!($c), "`, the same as [`", stringify!($ty), "::", stringify!($rust), "`](crate::", stringify!($ty), "::", stringify!($rust), ").")]
            pub const $c: crate::$ty = crate::$ty::$rust;
        )*
    };
}

c_consts!(DeviceType {
    kDLCPU = CPU,
    kDLCUDA = CUDA,
    kDLCUDAHost = CUDA_HOST,
    kDLOpenCL = OPENCL,
    kDLVulkan = VULKAN,
    kDLMetal = METAL,
    kDLVPI = VPI,
    kDLROCM = ROCM,
    kDLROCMHost = ROCM_HOST,
    kDLExtDev = EXT_DEV,
    kDLCUDAManaged = CUDA_MANAGED,
    kDLOneAPI = ONEAPI,
    kDLWebGPU = WEBGPU,
    kDLHexagon = HEXAGON,
    kDLMAIA = MAIA,
    kDLTrn = TRN,
});

c_consts!(DataTypeCode {
    kDLInt = INT,
    kDLUInt = UINT,
    kDLFloat = FLOAT,
    kDLOpaqueHandle = OPAQUE_HANDLE,
    kDLBfloat = BFLOAT,
    kDLComplex = COMPLEX,
    kDLBool = BOOL,
    kDLFloat8_e3m4 = FLOAT8_E3M4,
    kDLFloat8_e4m3 = FLOAT8_E4M3,
    kDLFloat8_e4m3b11fnuz = FLOAT8_E4M3B11FNUZ,
    kDLFloat8_e4m3fn = FLOAT8_E4M3FN,
    kDLFloat8_e4m3fnuz = FLOAT8_E4M3FNUZ,
    kDLFloat8_e5m2 = FLOAT8_E5M2,
    kDLFloat8_e5m2fnuz = FLOAT8_E5M2FNUZ,
    kDLFloat8_e8m0fnu = FLOAT8_E8M0FNU,
    kDLFloat6_e2m3fn = FLOAT6_E2M3FN,
    kDLFloat6_e3m2fn = FLOAT6_E3M2FN,
    kDLFloat4_e2m1fn = FLOAT4_E2M1FN,
});

/// `DLTensor`: a plain, non-owning description of a tensor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// Start of the allocation (`data + byte_offset` is the first element). May be NULL for a
    /// tensor of size zero. Opaque on some devices.
    pub data: *mut c_void,
    /// Where the memory lives.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` sizes; may be NULL when `ndim == 0`.
    pub shape: *mut i64,
    /// `ndim` strides in elements (not bytes); NULL allowed for `ndim == 0`, and before
    /// DLPack 1.2 for compact row-major data.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy (pre-1.0) owning struct, without version or flags.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Frees the whole struct and what it owns; may be NULL.
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: the owning struct of DLPack 1.x.
///
/// Everything up to and including `flags` stays stable across versions, so `version` and
/// `deleter` can be read before the version is known to be compatible.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version the producer wrote.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Frees the whole struct and what it owns; may be NULL.
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// `SetError` callback of [`DLPackManagedTensorAllocator`]: `(error_ctx, kind, message)`.
pub type DLPackSetError = Option<
    unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char),
>;

/// `DLPackManagedTensorAllocator`: allocate a tensor like `prototype` (only dtype, ndim, shape
/// and device are read) in the producer's library. Returns 0, or -1 after calling `set_error`.
pub type DLPackManagedTensorAllocator = Option<
    unsafe extern "C" fn(
        prototype: *mut DLTensor,
        out: *mut *mut DLManagedTensorVersioned,
        error_ctx: *mut c_void,
        set_error: DLPackSetError,
    ) -> c_int,
>;

/// `DLPackManagedTensorFromPyObjectNoSync`: export a Python object of the producer's type,
/// without stream synchronisation. Returns 0, or -1 with a Python exception set.
pub type DLPackManagedTensorFromPyObjectNoSync = Option<
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int,
>;

/// `DLPackDLTensorFromPyObjectNoSync`: describe a Python object in a caller-provided
/// [`DLTensor`], valid only until control returns to Python. Returns 0, or -1 with a Python
/// exception set.
pub type DLPackDLTensorFromPyObjectNoSync =
    Option<unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> c_int>;

/// `DLPackCurrentWorkStream`: the producer's current stream for a device (NULL for CPU).
/// Returns 0, or -1 with a Python exception set.
pub type DLPackCurrentWorkStream = Option<
    unsafe extern "C" fn(
        device_type: DLDeviceType,
        device_id: i32,
        out_current_stream: *mut *mut c_void,
    ) -> c_int,
>;

/// `DLPackManagedTensorToPyObjectNoSync`: wrap an owned tensor (ownership is taken) in a Python
/// object of the producer's type. Returns 0, or -1 with a Python exception set.
pub type DLPackManagedTensorToPyObjectNoSync = Option<
    unsafe extern "C" fn(
        tensor: *mut DLManagedTensorVersioned,
        out_py_object: *mut *mut c_void,
    ) -> c_int,
>;

/// `DLPackExchangeAPIHeader`: the version-stable head of [`DLPackExchangeAPI`].
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// The API's DLPack version; check the major before using the table.
    pub version: DLPackVersion,
    /// An older table in the chain, or NULL.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// `DLPackExchangeAPI`: the table a Python type exposes as `__dlpack_c_exchange_api__` (a
/// capsule named `"dlpack_exchange_api"`). It must live as long as the process.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// Version and chain.
    pub header: DLPackExchangeAPIHeader,
    /// Never NULL.
    pub managed_tensor_allocator: DLPackManagedTensorAllocator,
    /// Never NULL.
    pub managed_tensor_from_py_object_no_sync: DLPackManagedTensorFromPyObjectNoSync,
    /// Never NULL.
    pub managed_tensor_to_py_object_no_sync: DLPackManagedTensorToPyObjectNoSync,
    /// May be NULL.
    pub dltensor_from_py_object_no_sync: DLPackDLTensorFromPyObjectNoSync,
    /// Never NULL.
    pub current_work_stream: DLPackCurrentWorkStream,
}

/// The capsule name of a legacy tensor, `"dltensor"`.
pub const CAPSULE_LEGACY: &core::ffi::CStr = c"dltensor";
/// The capsule name of a versioned tensor, `"dltensor_versioned"`.
pub const CAPSULE_VERSIONED: &core::ffi::CStr = c"dltensor_versioned";
/// The name a consumer gives a legacy capsule it took, `"used_dltensor"`.
pub const CAPSULE_LEGACY_USED: &core::ffi::CStr = c"used_dltensor";
/// The name a consumer gives a versioned capsule it took, `"used_dltensor_versioned"`.
pub const CAPSULE_VERSIONED_USED: &core::ffi::CStr = c"used_dltensor_versioned";
/// The capsule name of the C exchange API table, `"dlpack_exchange_api"`.
pub const CAPSULE_EXCHANGE_API: &core::ffi::CStr = c"dlpack_exchange_api";

// Layout facts of dlpack.h on 64-bit targets (and the pointer-size-independent ones everywhere).
const _: () = {
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(offset_of!(DLPackVersion, major) == 0);
    assert!(offset_of!(DLPackVersion, minor) == 4);
    assert!(size_of::<DLDeviceType>() == 4);
    assert!(size_of::<DLDevice>() == 8);
    assert!(offset_of!(DLDevice, device_type) == 0);
    assert!(offset_of!(DLDevice, device_id) == 4);
    assert!(size_of::<DLDataTypeCode>() == 1);
    assert!(size_of::<DLDataType>() == 4);
    assert!(offset_of!(DLDataType, code) == 0);
    assert!(offset_of!(DLDataType, bits) == 1);
    assert!(offset_of!(DLDataType, lanes) == 2);
};

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, data) == 0);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, dl_tensor) == 0);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, version) == 0);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLPackExchangeAPIHeader>() == 16);
    assert!(offset_of!(DLPackExchangeAPIHeader, prev_api) == 8);
    assert!(size_of::<DLPackExchangeAPI>() == 56);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_allocator) == 16);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync) == 32);
    assert!(offset_of!(DLPackExchangeAPI, dltensor_from_py_object_no_sync) == 40);
    assert!(offset_of!(DLPackExchangeAPI, current_work_stream) == 48);
    // Nullable function pointers are one pointer wide.
    assert!(size_of::<DLPackCurrentWorkStream>() == 8);
};
