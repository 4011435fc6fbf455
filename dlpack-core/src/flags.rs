//! [`Flags`]: the `flags` bit set of `DLManagedTensorVersioned`.

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};

/// The `flags` field of a versioned managed tensor, a `u64` in the ABI.
///
/// ```
/// use dlpack_core::Flags;
/// let f = Flags::READ_ONLY | Flags::IS_COPIED;
/// assert!(f.contains(Flags::READ_ONLY));
/// assert_eq!(f.to_string(), "READ_ONLY | IS_COPIED");
/// assert_eq!(Flags::empty().to_string(), "(none)");
/// let mut g = f;
/// g &= !Flags::READ_ONLY;
/// assert_eq!(g, Flags::IS_COPIED);
/// assert!((g & Flags::READ_ONLY).is_empty());
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u64);

impl Flags {
    /// The tensor's memory must not be written (`DLPACK_FLAG_BITMASK_READ_ONLY`).
    pub const READ_ONLY: Flags = Flags(1 << 0);
    /// The producer made a copy the consumer owns alone (`DLPACK_FLAG_BITMASK_IS_COPIED`).
    pub const IS_COPIED: Flags = Flags(1 << 1);
    /// Sub-byte elements (fp4, fp6) are padded to whole bytes rather than packed
    /// (`DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`).
    pub const IS_SUBBYTE_TYPE_PADDED: Flags = Flags(1 << 2);
    /// Every bit DLPack 1.3 defines.
    pub const ALL_KNOWN: Flags = Flags(0b111);

    /// No flag set.
    pub const fn empty() -> Self {
        Flags(0)
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits DLPack 1.3 does not define (zero for a well-formed tensor).
    pub const fn unknown_bits(self) -> u64 {
        self.0 & !Self::ALL_KNOWN.0
    }

    /// `self` with `other`'s bits set or cleared.
    #[must_use]
    pub const fn with(self, other: Flags, on: bool) -> Self {
        if on {
            Flags(self.0 | other.0)
        } else {
            Flags(self.0 & !other.0)
        }
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Flags {
    type Output = Flags;
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl BitAndAssign for Flags {
    fn bitand_assign(&mut self, rhs: Flags) {
        self.0 &= rhs.0;
    }
}

/// Every bit flipped, unknown ones included (`flags & !Flags::READ_ONLY` clears one flag).
impl Not for Flags {
    type Output = Flags;
    fn not(self) -> Flags {
        Flags(!self.0)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Flags::READ_ONLY, "READ_ONLY"),
            (Flags::IS_COPIED, "IS_COPIED"),
            (Flags::IS_SUBBYTE_TYPE_PADDED, "IS_SUBBYTE_TYPE_PADDED"),
        ];
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { " | " };
            first = false;
            f.write_str(s)
        };
        for (flag, name) in names {
            if self.contains(flag) {
                sep(f)?;
                f.write_str(name)?;
            }
        }
        if self.unknown_bits() != 0 {
            sep(f)?;
            write!(f, "{:#x}", self.unknown_bits())?;
        }
        if self.0 == 0 {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flags({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_match_the_header() {
        assert_eq!(Flags::READ_ONLY.0, 1);
        assert_eq!(Flags::IS_COPIED.0, 2);
        assert_eq!(Flags::IS_SUBBYTE_TYPE_PADDED.0, 4);
        assert_eq!(Flags(0x18 | 1).unknown_bits(), 0x18);
        assert_eq!(Flags(0x18 | 1).to_string(), "READ_ONLY | 0x18");
        assert_eq!(Flags::READ_ONLY.with(Flags::IS_COPIED, true).0, 3);
        assert_eq!(Flags(3).with(Flags::READ_ONLY, false), Flags::IS_COPIED);
    }
}
