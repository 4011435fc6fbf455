//! The raw Level Zero ABI this crate binds: handle types, the few structs and constants it
//! uses, and the function signatures, under their C names.
//!
//! The binding follows the Level Zero API version of Debian bookworm's loader and headers
//! (`libze1` / `libze-dev` 1.8.12, whose `ze_api.h` declares `ZE_API_VERSION_CURRENT` = 1.4):
//! nothing newer than API 1.4 is bound. In particular `zeInitDrivers` (API 1.10) and
//! `zeDeviceGetRootDevice` (API 1.7) do not exist in that loader, so initialisation uses
//! [`ZE_API_VERSION_CURRENT`]'s `zeInit` and a sub-device's root device is found by walking
//! `zeDeviceGetSubDevices` from the root devices.
//!
//! Everything here is checked against the real header by the crate's `ze_header_layout` test,
//! which compiles C against `/usr/include/level_zero/ze_api.h`: the size, alignment and every
//! field offset of each struct, the value of each constant, and the full C type of each bound
//! function (`__builtin_types_compatible_p` on the prototype, pointer constness included).
//!
//! C enums are `#[repr(transparent)]` integer newtypes with constants, never Rust enums: a driver
//! may return a value this binding has not heard of, and an unknown value in a Rust enum would be
//! undefined behaviour.
//!
//! This file depends on nothing but `core` and `std`, so that the workspace's test driver
//! (`dlpack-oneapi-test-driver`) can include it and implement exactly these signatures.
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_void};

macro_rules! handles {
    ($($(#[$doc:meta])* $handle:ident => $opaque:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// The opaque struct a handle points to; never dereferenced.
        #[repr(C)]
        #[derive(Debug)]
        pub struct $opaque {
            _private: [u8; 0],
        }
        $(#[$doc])*
        pub type $handle = *mut $opaque;
    )*};
}

handles! {
    /// `ze_driver_handle_t`: a driver instance.
    ze_driver_handle_t => _ze_driver_handle_t;
    /// `ze_device_handle_t`: a device or sub-device.
    ze_device_handle_t => _ze_device_handle_t;
    /// `ze_context_handle_t`: a context, the scope of USM allocations.
    ze_context_handle_t => _ze_context_handle_t;
    /// `ze_command_list_handle_t`: a command list (this crate creates immediate ones only).
    ze_command_list_handle_t => _ze_command_list_handle_t;
    /// `ze_event_pool_handle_t`: a pool of events.
    ze_event_pool_handle_t => _ze_event_pool_handle_t;
    /// `ze_event_handle_t`: an event, signalled by a device or the host.
    ze_event_handle_t => _ze_event_handle_t;
}

macro_rules! c_enum {
    (
        $(#[$doc:meta])*
        $ty:ident {
            $($(#[$vdoc:meta])* $name:ident = $value:expr,)*
        }
    ) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub struct $ty(pub u32);

        $(
            $(#[$vdoc])*
            pub const $name: $ty = $ty($value);
        )*

        impl $ty {
            /// Every value this binding names, as `(C name, value)`, in header order.
            pub const ALL: &'static [(&'static str, $ty)] = &[$((stringify!($name), $name)),*];

            /// The C name of this value, or `None` for a value this binding does not name.
            pub fn name(self) -> Option<&'static str> {
                Self::ALL.iter().find(|(_, v)| *v == self).map(|(n, _)| *n)
            }
        }
    };
}

c_enum! {
    /// `ze_result_t`: what every Level Zero function returns. All API 1.4 values are named.
    ze_result_t {
        /// Success.
        ZE_RESULT_SUCCESS = 0,
        /// Synchronisation primitive not signalled.
        ZE_RESULT_NOT_READY = 1,
        /// Device hung, reset, removed, or driver update occurred.
        ZE_RESULT_ERROR_DEVICE_LOST = 0x7000_0001,
        /// Insufficient host memory to satisfy call.
        ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY = 0x7000_0002,
        /// Insufficient device memory to satisfy call.
        ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY = 0x7000_0003,
        /// Error occurred when building module.
        ZE_RESULT_ERROR_MODULE_BUILD_FAILURE = 0x7000_0004,
        /// Error occurred when linking modules.
        ZE_RESULT_ERROR_MODULE_LINK_FAILURE = 0x7000_0005,
        /// Device requires a reset.
        ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET = 0x7000_0006,
        /// Device currently in low power state.
        ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE = 0x7000_0007,
        /// Device is not represented by a fabric vertex.
        ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX = 0x7ff0_0001,
        /// Fabric vertex does not represent a device.
        ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE = 0x7ff0_0002,
        /// Fabric vertex represents a remote device or sub-device.
        ZE_RESULT_EXP_ERROR_REMOTE_DEVICE = 0x7ff0_0003,
        /// Access denied due to permission level.
        ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS = 0x7001_0000,
        /// Resource already in use and simultaneous access not allowed, or resource was removed.
        ZE_RESULT_ERROR_NOT_AVAILABLE = 0x7001_0001,
        /// External required dependency is unavailable or missing.
        ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE = 0x7002_0000,
        /// Data may have been dropped.
        ZE_RESULT_WARNING_DROPPED_DATA = 0x7002_0001,
        /// Driver is not initialized: `zeInit` was not called or found no driver.
        ZE_RESULT_ERROR_UNINITIALIZED = 0x7800_0001,
        /// Generic error code for unsupported versions.
        ZE_RESULT_ERROR_UNSUPPORTED_VERSION = 0x7800_0002,
        /// Generic error code for unsupported features.
        ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = 0x7800_0003,
        /// Generic error code for invalid arguments.
        ZE_RESULT_ERROR_INVALID_ARGUMENT = 0x7800_0004,
        /// Handle argument is not valid.
        ZE_RESULT_ERROR_INVALID_NULL_HANDLE = 0x7800_0005,
        /// Object pointed to by handle still in-use by device.
        ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE = 0x7800_0006,
        /// Pointer argument may not be nullptr.
        ZE_RESULT_ERROR_INVALID_NULL_POINTER = 0x7800_0007,
        /// Size argument is invalid (e.g., must not be zero).
        ZE_RESULT_ERROR_INVALID_SIZE = 0x7800_0008,
        /// Size argument is not supported by the device (e.g., too large).
        ZE_RESULT_ERROR_UNSUPPORTED_SIZE = 0x7800_0009,
        /// Alignment argument is not supported by the device.
        ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT = 0x7800_000a,
        /// Synchronization object in invalid state.
        ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT = 0x7800_000b,
        /// Enumerator argument is not valid.
        ZE_RESULT_ERROR_INVALID_ENUMERATION = 0x7800_000c,
        /// Enumerator argument is not supported by the device.
        ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION = 0x7800_000d,
        /// Image format is not supported by the device.
        ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT = 0x7800_000e,
        /// Native binary is not supported by the device.
        ZE_RESULT_ERROR_INVALID_NATIVE_BINARY = 0x7800_000f,
        /// Global variable is not found in the module.
        ZE_RESULT_ERROR_INVALID_GLOBAL_NAME = 0x7800_0010,
        /// Kernel name is not found in the module.
        ZE_RESULT_ERROR_INVALID_KERNEL_NAME = 0x7800_0011,
        /// Function name is not found in the module.
        ZE_RESULT_ERROR_INVALID_FUNCTION_NAME = 0x7800_0012,
        /// Group size dimension is not valid for the kernel or device.
        ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION = 0x7800_0013,
        /// Global width dimension is not valid for the kernel or device.
        ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION = 0x7800_0014,
        /// Kernel argument index is not valid for kernel.
        ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX = 0x7800_0015,
        /// Kernel argument size does not match kernel.
        ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE = 0x7800_0016,
        /// Value of kernel attribute is not valid for the kernel or device.
        ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE = 0x7800_0017,
        /// Module with imports needs to be linked before kernels can be created from it.
        ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED = 0x7800_0018,
        /// Command list type does not match command queue type.
        ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE = 0x7800_0019,
        /// Copy operations do not support overlapping regions of memory.
        ZE_RESULT_ERROR_OVERLAPPING_REGIONS = 0x7800_001a,
        /// Action is required to complete the desired operation.
        ZE_RESULT_WARNING_ACTION_REQUIRED = 0x7800_001b,
        /// Unknown or internal error.
        ZE_RESULT_ERROR_UNKNOWN = 0x7fff_fffe,
    }
}

c_enum! {
    /// `ze_api_version_t`: `(major << 16) | minor`.
    ze_api_version_t {
        /// API version 1.0.
        ZE_API_VERSION_1_0 = 0x0001_0000,
        /// API version 1.4.
        ZE_API_VERSION_1_4 = 0x0001_0004,
        /// The version this binding follows: Debian bookworm's `ze_api.h` (loader 1.8.12).
        ZE_API_VERSION_CURRENT = 0x0001_0004,
    }
}

impl ze_api_version_t {
    /// The major version.
    pub const fn major(self) -> u32 {
        self.0 >> 16
    }

    /// The minor version.
    pub const fn minor(self) -> u32 {
        self.0 & 0xffff
    }
}

c_enum! {
    /// `ze_structure_type_t`: the `stype` tag at the start of every descriptor and property
    /// struct. Only the tags of the structs bound here are named.
    ze_structure_type_t {
        /// [`ze_device_properties_t`].
        ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3,
        /// [`ze_context_desc_t`].
        ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xd,
        /// [`ze_command_queue_desc_t`].
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xe,
        /// [`ze_event_pool_desc_t`].
        ZE_STRUCTURE_TYPE_EVENT_POOL_DESC = 0x10,
        /// [`ze_event_desc_t`].
        ZE_STRUCTURE_TYPE_EVENT_DESC = 0x11,
        /// [`ze_device_mem_alloc_desc_t`].
        ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15,
        /// [`ze_host_mem_alloc_desc_t`].
        ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC = 0x16,
        /// [`ze_memory_allocation_properties_t`].
        ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES = 0x17,
    }
}

c_enum! {
    /// `ze_device_type_t`.
    ze_device_type_t {
        /// A GPU.
        ZE_DEVICE_TYPE_GPU = 1,
        /// A CPU.
        ZE_DEVICE_TYPE_CPU = 2,
        /// An FPGA.
        ZE_DEVICE_TYPE_FPGA = 3,
        /// A memory copy accelerator.
        ZE_DEVICE_TYPE_MCA = 4,
        /// A vision processing unit.
        ZE_DEVICE_TYPE_VPU = 5,
    }
}

c_enum! {
    /// `ze_memory_type_t`: what `zeMemGetAllocProperties` reports about a pointer.
    ze_memory_type_t {
        /// The pointer was not allocated in the context asked about.
        ZE_MEMORY_TYPE_UNKNOWN = 0,
        /// Host USM: host memory the devices of the context can access.
        ZE_MEMORY_TYPE_HOST = 1,
        /// Device USM: memory of one device, not readable by the host.
        ZE_MEMORY_TYPE_DEVICE = 2,
        /// Shared USM: migrates between the host and a device.
        ZE_MEMORY_TYPE_SHARED = 3,
    }
}

c_enum! {
    /// `ze_command_queue_mode_t`.
    ze_command_queue_mode_t {
        /// Implementation-defined.
        ZE_COMMAND_QUEUE_MODE_DEFAULT = 0,
        /// Appends return when the command is done.
        ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS = 1,
        /// Appends return at once; completion is signalled by events.
        ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS = 2,
    }
}

c_enum! {
    /// `ze_command_queue_priority_t`.
    ze_command_queue_priority_t {
        /// Normal priority.
        ZE_COMMAND_QUEUE_PRIORITY_NORMAL = 0,
    }
}

/// `ze_init_flags_t` (bits of `ze_init_flag_t`); `0` initialises every driver type.
pub type ze_init_flags_t = u32;
/// `ze_device_property_flags_t` (bits of `ze_device_property_flag_t`).
pub type ze_device_property_flags_t = u32;
/// `ze_context_flags_t`; no flag is defined for use.
pub type ze_context_flags_t = u32;
/// `ze_device_mem_alloc_flags_t`.
pub type ze_device_mem_alloc_flags_t = u32;
/// `ze_host_mem_alloc_flags_t`.
pub type ze_host_mem_alloc_flags_t = u32;
/// `ze_command_queue_flags_t`.
pub type ze_command_queue_flags_t = u32;
/// `ze_event_pool_flags_t` (bits of `ze_event_pool_flag_t`).
pub type ze_event_pool_flags_t = u32;
/// `ze_event_scope_flags_t` (bits of `ze_event_scope_flag_t`).
pub type ze_event_scope_flags_t = u32;

/// `ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE`: the device is a sub-device of a root device.
pub const ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE: ze_device_property_flags_t = 1 << 1;
/// `ZE_EVENT_POOL_FLAG_HOST_VISIBLE`: the host can query and wait on the pool's events.
pub const ZE_EVENT_POOL_FLAG_HOST_VISIBLE: ze_event_pool_flags_t = 1 << 0;
/// `ZE_EVENT_SCOPE_FLAG_HOST`: memory writes before the signal are visible to the host.
pub const ZE_EVENT_SCOPE_FLAG_HOST: ze_event_scope_flags_t = 1 << 2;
/// `ZE_MAX_DEVICE_UUID_SIZE`.
pub const ZE_MAX_DEVICE_UUID_SIZE: usize = 16;
/// `ZE_MAX_DEVICE_NAME`.
pub const ZE_MAX_DEVICE_NAME: usize = 256;

/// `ze_device_uuid_t`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ze_device_uuid_t {
    /// Opaque bytes.
    pub id: [u8; ZE_MAX_DEVICE_UUID_SIZE],
}

/// `ze_device_properties_t`, filled by `zeDeviceGetProperties`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_device_properties_t {
    /// [`ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *mut c_void,
    /// Device type.
    pub r#type: ze_device_type_t,
    /// PCI vendor id.
    pub vendorId: u32,
    /// PCI device id.
    pub deviceId: u32,
    /// `ZE_DEVICE_PROPERTY_FLAG_*` bits.
    pub flags: ze_device_property_flags_t,
    /// Sub-device id; valid with [`ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE`].
    pub subdeviceId: u32,
    /// Clock rate in MHz.
    pub coreClockRate: u32,
    /// Largest single allocation, in bytes.
    pub maxMemAllocSize: u64,
    /// Hardware contexts.
    pub maxHardwareContexts: u32,
    /// Highest command queue priority.
    pub maxCommandQueuePriority: u32,
    /// Threads per EU.
    pub numThreadsPerEU: u32,
    /// SIMD width of an EU.
    pub physicalEUSimdWidth: u32,
    /// EUs per subslice.
    pub numEUsPerSubslice: u32,
    /// Subslices per slice.
    pub numSubslicesPerSlice: u32,
    /// Slices.
    pub numSlices: u32,
    /// Timer resolution.
    pub timerResolution: u64,
    /// Valid bits of global timestamps.
    pub timestampValidBits: u32,
    /// Valid bits of kernel timestamps.
    pub kernelTimestampValidBits: u32,
    /// The device's universal unique id.
    pub uuid: ze_device_uuid_t,
    /// NUL-terminated device name.
    pub name: [c_char; ZE_MAX_DEVICE_NAME],
}

/// `ze_context_desc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_context_desc_t {
    /// [`ZE_STRUCTURE_TYPE_CONTEXT_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// Context flags; 0.
    pub flags: ze_context_flags_t,
}

/// `ze_device_mem_alloc_desc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_device_mem_alloc_desc_t {
    /// [`ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// Allocation flags; 0.
    pub flags: ze_device_mem_alloc_flags_t,
    /// Memory ordinal of the device; 0.
    pub ordinal: u32,
}

/// `ze_host_mem_alloc_desc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_host_mem_alloc_desc_t {
    /// [`ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// Allocation flags; 0.
    pub flags: ze_host_mem_alloc_flags_t,
}

/// `ze_memory_allocation_properties_t`, filled by `zeMemGetAllocProperties`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_memory_allocation_properties_t {
    /// [`ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *mut c_void,
    /// The kind of memory; [`ZE_MEMORY_TYPE_UNKNOWN`] for a pointer the context did not
    /// allocate.
    pub r#type: ze_memory_type_t,
    /// An identifier of the allocation.
    pub id: u64,
    /// Page size of the allocation.
    pub pageSize: u64,
}

/// `ze_command_queue_desc_t`, also the descriptor of an immediate command list.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_command_queue_desc_t {
    /// [`ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// Command queue group ordinal.
    pub ordinal: u32,
    /// Queue index within the group.
    pub index: u32,
    /// Queue flags.
    pub flags: ze_command_queue_flags_t,
    /// Synchronous or asynchronous appends.
    pub mode: ze_command_queue_mode_t,
    /// Priority.
    pub priority: ze_command_queue_priority_t,
}

/// `ze_event_pool_desc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_event_pool_desc_t {
    /// [`ZE_STRUCTURE_TYPE_EVENT_POOL_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// `ZE_EVENT_POOL_FLAG_*` bits.
    pub flags: ze_event_pool_flags_t,
    /// Number of events in the pool.
    pub count: u32,
}

/// `ze_event_desc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ze_event_desc_t {
    /// [`ZE_STRUCTURE_TYPE_EVENT_DESC`].
    pub stype: ze_structure_type_t,
    /// Extension chain; NULL.
    pub pNext: *const c_void,
    /// Index of the event in its pool.
    pub index: u32,
    /// Cache flush scope on signal (`ZE_EVENT_SCOPE_FLAG_*`).
    pub signal: ze_event_scope_flags_t,
    /// Cache invalidation scope on wait (`ZE_EVENT_SCOPE_FLAG_*`).
    pub wait: ze_event_scope_flags_t,
}

/// The C type of one bound function, as text for the header test: its name, parameter types
/// and return type, spelled as Rust types (`*mut ze_device_handle_t`).
#[derive(Clone, Copy, Debug)]
pub struct FunctionSignature {
    /// The exported symbol.
    pub name: &'static str,
    /// Parameter types in order.
    pub params: &'static [&'static str],
    /// The return type.
    pub ret: &'static str,
}

/// Calls `$callback!` with the list of every bound function, in one place, so that the function
/// pointer types, the loader's symbol table ([`crate::Api`] in the library) and the header test
/// all come from the same declarations.
macro_rules! ze_functions {
    ($callback:ident) => {
        $callback! {
            /// Initialises the drivers (`zeInit`). Must come first; idempotent.
            fn zeInit(flags: ze_init_flags_t) -> ze_result_t;
            /// Lists the driver instances (`zeDriverGet`).
            fn zeDriverGet(pCount: *mut u32, phDrivers: *mut ze_driver_handle_t) -> ze_result_t;
            /// The API version a driver supports (`zeDriverGetApiVersion`).
            fn zeDriverGetApiVersion(
                hDriver: ze_driver_handle_t,
                version: *mut ze_api_version_t,
            ) -> ze_result_t;
            /// Lists a driver's root devices, in a stable order (`zeDeviceGet`).
            fn zeDeviceGet(
                hDriver: ze_driver_handle_t,
                pCount: *mut u32,
                phDevices: *mut ze_device_handle_t,
            ) -> ze_result_t;
            /// Lists a device's sub-devices (`zeDeviceGetSubDevices`).
            fn zeDeviceGetSubDevices(
                hDevice: ze_device_handle_t,
                pCount: *mut u32,
                phSubdevices: *mut ze_device_handle_t,
            ) -> ze_result_t;
            /// A device's properties (`zeDeviceGetProperties`).
            fn zeDeviceGetProperties(
                hDevice: ze_device_handle_t,
                pDeviceProperties: *mut ze_device_properties_t,
            ) -> ze_result_t;
            /// Creates a context over all devices of a driver (`zeContextCreate`).
            fn zeContextCreate(
                hDriver: ze_driver_handle_t,
                desc: *const ze_context_desc_t,
                phContext: *mut ze_context_handle_t,
            ) -> ze_result_t;
            /// Destroys a context (`zeContextDestroy`).
            fn zeContextDestroy(hContext: ze_context_handle_t) -> ze_result_t;
            /// Allocates device USM (`zeMemAllocDevice`).
            fn zeMemAllocDevice(
                hContext: ze_context_handle_t,
                device_desc: *const ze_device_mem_alloc_desc_t,
                size: usize,
                alignment: usize,
                hDevice: ze_device_handle_t,
                pptr: *mut *mut c_void,
            ) -> ze_result_t;
            /// Allocates shared USM (`zeMemAllocShared`).
            fn zeMemAllocShared(
                hContext: ze_context_handle_t,
                device_desc: *const ze_device_mem_alloc_desc_t,
                host_desc: *const ze_host_mem_alloc_desc_t,
                size: usize,
                alignment: usize,
                hDevice: ze_device_handle_t,
                pptr: *mut *mut c_void,
            ) -> ze_result_t;
            /// Allocates host USM (`zeMemAllocHost`).
            fn zeMemAllocHost(
                hContext: ze_context_handle_t,
                host_desc: *const ze_host_mem_alloc_desc_t,
                size: usize,
                alignment: usize,
                pptr: *mut *mut c_void,
            ) -> ze_result_t;
            /// Frees USM (`zeMemFree`).
            fn zeMemFree(hContext: ze_context_handle_t, ptr: *mut c_void) -> ze_result_t;
            /// What a context knows about a pointer: memory type and owning device
            /// (`zeMemGetAllocProperties`).
            fn zeMemGetAllocProperties(
                hContext: ze_context_handle_t,
                ptr: *const c_void,
                pMemAllocProperties: *mut ze_memory_allocation_properties_t,
                phDevice: *mut ze_device_handle_t,
            ) -> ze_result_t;
            /// The base and size of the allocation a pointer lies in (`zeMemGetAddressRange`).
            fn zeMemGetAddressRange(
                hContext: ze_context_handle_t,
                ptr: *const c_void,
                pBase: *mut *mut c_void,
                pSize: *mut usize,
            ) -> ze_result_t;
            /// Creates an immediate command list (`zeCommandListCreateImmediate`).
            fn zeCommandListCreateImmediate(
                hContext: ze_context_handle_t,
                hDevice: ze_device_handle_t,
                altdesc: *const ze_command_queue_desc_t,
                phCommandList: *mut ze_command_list_handle_t,
            ) -> ze_result_t;
            /// Destroys a command list (`zeCommandListDestroy`).
            fn zeCommandListDestroy(hCommandList: ze_command_list_handle_t) -> ze_result_t;
            /// Appends a memory copy (`zeCommandListAppendMemoryCopy`).
            fn zeCommandListAppendMemoryCopy(
                hCommandList: ze_command_list_handle_t,
                dstptr: *mut c_void,
                srcptr: *const c_void,
                size: usize,
                hSignalEvent: ze_event_handle_t,
                numWaitEvents: u32,
                phWaitEvents: *mut ze_event_handle_t,
            ) -> ze_result_t;
            /// Appends an execution and memory barrier (`zeCommandListAppendBarrier`).
            fn zeCommandListAppendBarrier(
                hCommandList: ze_command_list_handle_t,
                hSignalEvent: ze_event_handle_t,
                numWaitEvents: u32,
                phWaitEvents: *mut ze_event_handle_t,
            ) -> ze_result_t;
            /// Creates an event pool (`zeEventPoolCreate`).
            fn zeEventPoolCreate(
                hContext: ze_context_handle_t,
                desc: *const ze_event_pool_desc_t,
                numDevices: u32,
                phDevices: *mut ze_device_handle_t,
                phEventPool: *mut ze_event_pool_handle_t,
            ) -> ze_result_t;
            /// Destroys an event pool (`zeEventPoolDestroy`).
            fn zeEventPoolDestroy(hEventPool: ze_event_pool_handle_t) -> ze_result_t;
            /// Creates an event in a pool (`zeEventCreate`).
            fn zeEventCreate(
                hEventPool: ze_event_pool_handle_t,
                desc: *const ze_event_desc_t,
                phEvent: *mut ze_event_handle_t,
            ) -> ze_result_t;
            /// Destroys an event (`zeEventDestroy`).
            fn zeEventDestroy(hEvent: ze_event_handle_t) -> ze_result_t;
            /// Blocks the host until an event is signalled or `timeout` ns pass
            /// (`zeEventHostSynchronize`).
            fn zeEventHostSynchronize(hEvent: ze_event_handle_t, timeout: u64) -> ze_result_t;
            /// Whether an event is signalled (`zeEventQueryStatus`).
            fn zeEventQueryStatus(hEvent: ze_event_handle_t) -> ze_result_t;
            /// Resets an event to not signalled, from the host (`zeEventHostReset`).
            fn zeEventHostReset(hEvent: ze_event_handle_t) -> ze_result_t;
        }
    };
}

macro_rules! declare_function_types {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;
    )*) => {
        /// The type of each bound function, named after it (`pfn::zeMemFree`).
        pub mod pfn {
            use super::*;
            $(
                $(#[$doc])*
                pub type $name = unsafe extern "C" fn($($arg: $ty),*) -> $ret;
            )*
        }

        /// Every bound function's C type, for the header test.
        pub const FUNCTIONS: &[FunctionSignature] = &[$(
            FunctionSignature {
                name: stringify!($name),
                params: &[$(stringify!($ty)),*],
                ret: stringify!($ret),
            }
        ),*];
    };
}

ze_functions!(declare_function_types);

/// `ze_result_t` as text for messages: `ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)`.
pub fn describe_result(result: ze_result_t) -> String {
    match result.name() {
        Some(name) => format!("{name} ({:#x})", result.0),
        None => format!("unknown result {:#x}", result.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_described_by_name_and_code() {
        assert_eq!(
            describe_result(ZE_RESULT_ERROR_UNINITIALIZED),
            "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)"
        );
        assert_eq!(
            describe_result(ze_result_t(0x1234)),
            "unknown result 0x1234"
        );
    }

    #[test]
    fn the_binding_follows_api_1_4() {
        assert_eq!(
            (
                ZE_API_VERSION_CURRENT.major(),
                ZE_API_VERSION_CURRENT.minor()
            ),
            (1, 4)
        );
    }

    #[test]
    fn every_function_is_listed_once() {
        let mut names: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
        let before = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), before);
        assert!(names.contains(&"zeMemGetAllocProperties"));
    }
}
