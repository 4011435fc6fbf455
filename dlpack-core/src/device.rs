//! Where a tensor's memory lives: [`DeviceType`] and [`Device`], the kind of memory a device
//! runtime reports ([`MemoryKind`]), and the stream a consumer asks a producer to order its work
//! on ([`StreamRequest`]).

use core::fmt;

/// A DLPack device type (`DLDeviceType`), an `i32` in the ABI.
///
/// This is an integer newtype rather than a Rust `enum` on purpose: a foreign producer may send a
/// value this crate does not know (new device types arrive with DLPack minor versions), and an
/// unknown value in a Rust `enum` would be undefined behaviour. Use the associated constants to
/// name the known values and [`DeviceType::is_known`] to test for them.
///
/// ```
/// use dlpack_core::DeviceType;
/// assert_eq!(DeviceType::CUDA.0, 2);
/// assert_eq!(DeviceType::ONEAPI.to_string(), "oneapi");
/// assert_eq!(DeviceType(99).to_string(), "device_type(99)");
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct DeviceType(pub i32);

macro_rules! device_types {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $c:literal, $display:literal; )*) => {
        impl DeviceType {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nC name: `", $c, "` (", stringify!($value), ").")]
                pub const $name: DeviceType = DeviceType($value);
            )*

            /// Every device type defined by DLPack 1.3, in header order.
            pub const ALL: &'static [DeviceType] = &[$(DeviceType::$name),*];

            /// The name used by the C header (`kDLCUDA`), or `None` for an unknown value.
            pub const fn c_name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($c),)*
                    _ => None,
                }
            }

            /// The short lower-case name used by [`Display`](fmt::Display) (`cuda`), or `None`
            /// for an unknown value.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($display),)*
                    _ => None,
                }
            }
        }
    };
}

device_types! {
    /// CPU memory.
    CPU = 1, "kDLCPU", "cpu";
    /// CUDA device memory.
    CUDA = 2, "kDLCUDA", "cuda";
    /// Pinned (page-locked) host memory allocated through CUDA (`cudaMallocHost`).
    CUDA_HOST = 3, "kDLCUDAHost", "cuda_host";
    /// OpenCL device memory (`cl_mem`).
    OPENCL = 4, "kDLOpenCL", "opencl";
    /// Vulkan buffer.
    VULKAN = 7, "kDLVulkan", "vulkan";
    /// Metal buffer (Apple GPUs).
    METAL = 8, "kDLMetal", "metal";
    /// Verilog simulator buffer.
    VPI = 9, "kDLVPI", "vpi";
    /// ROCm device memory (AMD GPUs).
    ROCM = 10, "kDLROCM", "rocm";
    /// Pinned host memory allocated through ROCm (`hipMallocHost`).
    ROCM_HOST = 11, "kDLROCMHost", "rocm_host";
    /// Reserved for extension devices.
    EXT_DEV = 12, "kDLExtDev", "ext_dev";
    /// CUDA managed (unified) memory, accessible from host and device.
    CUDA_MANAGED = 13, "kDLCUDAManaged", "cuda_managed";
    /// oneAPI unified shared memory on a non-partitioned device.
    ONEAPI = 14, "kDLOneAPI", "oneapi";
    /// WebGPU buffer.
    WEBGPU = 15, "kDLWebGPU", "webgpu";
    /// Qualcomm Hexagon DSP.
    HEXAGON = 16, "kDLHexagon", "hexagon";
    /// Microsoft MAIA device.
    MAIA = 17, "kDLMAIA", "maia";
    /// AWS Trainium.
    TRN = 18, "kDLTrn", "trn";
}

impl DeviceType {
    /// Whether DLPack 1.3 defines this value.
    pub const fn is_known(self) -> bool {
        self.c_name().is_some()
    }

    /// Whether memory of this device type can be read by the host CPU without a copy:
    /// CPU memory, CUDA and ROCm pinned host memory, and CUDA managed memory.
    ///
    /// Other memory (oneAPI USM included) may also be host-accessible; only a device hook can
    /// tell, see [`crate::DeviceHooks`].
    pub const fn is_host_accessible(self) -> bool {
        matches!(
            self,
            Self::CPU | Self::CUDA_HOST | Self::ROCM_HOST | Self::CUDA_MANAGED
        )
    }

    /// Whether a data pointer on this device type is an address, to which a byte offset can be
    /// added: the CPU, CUDA (device, host and managed memory), ROCm (device and host) and oneAPI
    /// USM. Elsewhere (OpenCL, Vulkan, Metal, ...) it is a handle, and only `byte_offset` can
    /// move into it.
    ///
    /// ```
    /// use dlpack_core::DeviceType;
    ///
    /// assert!(DeviceType::CUDA.has_address_pointers());
    /// assert!(!DeviceType::VULKAN.has_address_pointers());
    /// ```
    pub const fn has_address_pointers(self) -> bool {
        matches!(
            self,
            Self::CPU
                | Self::CUDA
                | Self::CUDA_HOST
                | Self::CUDA_MANAGED
                | Self::ROCM
                | Self::ROCM_HOST
                | Self::ONEAPI
        )
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "device_type({})", self.0),
        }
    }
}

/// A device: its type and its index among devices of that type (`DLDevice`).
///
/// The layout is the C struct's, so this type is used directly in [`crate::ffi::DLTensor`].
///
/// ```
/// use dlpack_core::{Device, DeviceType};
/// assert_eq!(Device::cuda(1).to_string(), "cuda:1");
/// assert_eq!(Device::CPU, Device::new(DeviceType::CPU, 0));
/// // Ordered by device type, then index (a map key, a sorted list of devices).
/// assert!(Device::cuda(0) < Device::cuda(1) && Device::CPU < Device::cuda(0));
/// ```
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Device {
    /// The device type.
    pub device_type: DeviceType,
    /// The device index. DLPack says it is 0 for CPU, pinned and managed memory.
    pub device_id: i32,
}

impl Device {
    /// The host CPU, `(kDLCPU, 0)`.
    pub const CPU: Device = Device::new(DeviceType::CPU, 0);

    /// A device of the given type and index.
    pub const fn new(device_type: DeviceType, device_id: i32) -> Self {
        Device {
            device_type,
            device_id,
        }
    }

    /// CUDA device `id` (device memory).
    pub const fn cuda(id: i32) -> Self {
        Device::new(DeviceType::CUDA, id)
    }

    /// oneAPI device `id` (its position in SYCL's device list, see `dlpack-oneapi`).
    pub const fn oneapi(id: i32) -> Self {
        Device::new(DeviceType::ONEAPI, id)
    }
}

impl Default for Device {
    fn default() -> Self {
        Device::CPU
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.device_type, self.device_id)
    }
}

/// What kind of memory a pointer refers to, as the device runtime reports it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MemoryKind {
    /// Ordinary (pageable) host memory the runtime knows nothing special about.
    Host,
    /// Page-locked host memory allocated through the runtime (CUDA pinned, Level Zero host USM).
    HostPinned,
    /// Device memory: the host cannot read it directly.
    Device,
    /// Memory that migrates between host and device (CUDA managed, Level Zero shared USM).
    Managed,
}

impl MemoryKind {
    /// Whether the host can read and write this memory in place.
    pub const fn is_host_accessible(self) -> bool {
        !matches!(self, MemoryKind::Device)
    }

    /// Whether a tensor claiming `device_type` may describe memory of this kind:
    /// `kDLCUDA`/`kDLROCM` device or managed memory, `kDLCUDAHost`/`kDLROCMHost` pinned host
    /// memory, `kDLCUDAManaged` managed memory, `kDLOneAPI` any USM kind (device, host, shared),
    /// `kDLCPU` host memory of any kind. Other device types: device memory.
    pub const fn fits(self, device_type: DeviceType) -> bool {
        use MemoryKind::*;
        match device_type {
            DeviceType::CPU => matches!(self, Host | HostPinned | Managed),
            DeviceType::CUDA | DeviceType::ROCM => matches!(self, Device | Managed),
            DeviceType::CUDA_HOST | DeviceType::ROCM_HOST => matches!(self, HostPinned),
            DeviceType::CUDA_MANAGED => matches!(self, Managed),
            DeviceType::ONEAPI => matches!(self, Device | HostPinned | Managed),
            _ => matches!(self, Device),
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryKind::Host => "pageable host memory",
            MemoryKind::HostPinned => "pinned host memory",
            MemoryKind::Device => "device memory",
            MemoryKind::Managed => "managed (shared) memory",
        })
    }
}

/// The consumer's `stream` argument, interpreted by
/// [`parse_stream`](crate::protocol::parse_stream) for the device the consumer will read the
/// data on.
///
/// A producer hands a request other than [`NoSync`](Self::NoSync) to
/// [`DeviceHooks::make_ready`](crate::DeviceHooks::make_ready), which makes its pending work on
/// the tensor visible on that stream (event record, then stream wait) without blocking the host,
/// unless [`ExportArgs::decide`](crate::protocol::ExportArgs::decide) says the host must wait
/// ([`SyncAction::Host`](crate::protocol::SyncAction::Host): an export to the CPU, or pinned or
/// managed memory asked for with `stream=None`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum StreamRequest {
    /// `-1` on CUDA and ROCm, `None` on oneAPI: the producer must not synchronise; the consumer
    /// orders the work itself.
    NoSync,
    /// `None` on CUDA and ROCm, `0` on ROCm: the device's default stream (on CUDA the legacy
    /// default stream, the same as [`LegacyDefault`](Self::LegacyDefault)). On the CPU and other
    /// devices without streams (where only `None` is accepted) it stands for the host's program
    /// order: the data must be complete when `__dlpack__` returns.
    Default,
    /// CUDA `1`: the legacy default stream.
    LegacyDefault,
    /// CUDA `2`: the per-thread default stream.
    PerThreadDefault,
    /// A handle the consumer owns: a `cudaStream_t` (CUDA, `> 2`), a `hipStream_t` (ROCm, `> 2`)
    /// or, on oneAPI, a SYCL queue or Level Zero handle the glue layer passes as an integer
    /// (`> 0`).
    Handle(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_type_has_a_name_and_display() {
        assert_eq!(DeviceType::ALL.len(), 16);
        for &t in DeviceType::ALL {
            assert!(t.is_known());
            assert!(t.c_name().unwrap().starts_with("kDL"));
            assert_eq!(t.to_string(), t.name().unwrap());
        }
        assert!(!DeviceType(5).is_known());
        assert!(!DeviceType(6).is_known());
        assert!(!DeviceType(-1).is_known());
    }

    #[test]
    fn device_display_reads_like_pytorch() {
        assert_eq!(Device::CPU.to_string(), "cpu:0");
        assert_eq!(Device::cuda(1).to_string(), "cuda:1");
        assert_eq!(
            Device::new(DeviceType::CUDA_MANAGED, 0).to_string(),
            "cuda_managed:0"
        );
        assert_eq!(
            Device::new(DeviceType(42), 3).to_string(),
            "device_type(42):3"
        );
    }

    #[test]
    fn memory_kinds_fit_the_device_types_that_can_describe_them() {
        assert!(MemoryKind::Device.fits(DeviceType::CUDA));
        assert!(MemoryKind::Managed.fits(DeviceType::CUDA));
        assert!(!MemoryKind::HostPinned.fits(DeviceType::CUDA));
        assert!(!MemoryKind::Host.fits(DeviceType::CUDA));
        assert!(MemoryKind::HostPinned.fits(DeviceType::CUDA_HOST));
        assert!(!MemoryKind::Device.fits(DeviceType::CUDA_HOST));
        assert!(MemoryKind::Managed.fits(DeviceType::CUDA_MANAGED));
        assert!(!MemoryKind::Device.fits(DeviceType::CUDA_MANAGED));
        assert!(MemoryKind::HostPinned.fits(DeviceType::ONEAPI));
        assert!(!MemoryKind::Host.fits(DeviceType::ONEAPI));
        assert!(!MemoryKind::Device.fits(DeviceType::CPU));
    }
}
