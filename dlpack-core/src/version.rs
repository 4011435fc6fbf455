//! [`Version`]: the DLPack ABI version (`DLPackVersion`).

use core::fmt;

/// A DLPack ABI version. The layout is the C struct's.
///
/// Versions order by `(major, minor)`:
///
/// ```
/// use dlpack_core::Version;
/// assert_eq!(Version::CURRENT.to_string(), "1.3");
/// assert!(Version::new(1, 0) < Version::CURRENT);
/// ```
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Version {
    /// Major version: a consumer must refuse a tensor whose major differs from its own.
    pub major: u32,
    /// Minor version: additions that keep the ABI.
    pub minor: u32,
}

impl Version {
    /// The version this crate implements: 1.3 (`DLPACK_MAJOR_VERSION`.`DLPACK_MINOR_VERSION`).
    pub const CURRENT: Version = Version::new(1, 3);

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        Version { major, minor }
    }

    /// Whether a tensor of this version may be read by this crate (same major version).
    pub const fn is_compatible(self) -> bool {
        self.major == Self::CURRENT.major
    }

    /// Whether a producer of this version may send NULL strides for a compact row-major tensor
    /// (allowed before 1.2).
    pub const fn allows_null_strides(self) -> bool {
        self.major < 1 || (self.major == 1 && self.minor < 2)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}
