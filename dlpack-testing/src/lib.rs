//! Test support for the workspace (not published). The foreign-producer kit itself is public,
//! in `dlpack_core::testing` (the `testing` feature), and re-exported here, so every crate's
//! tests hand its importers well-formed and malformed tensors alike and count deleter calls.
//!
//! Beside it: [`StridedVec`] exports any layout over a `Vec` through dlpack-core's own export
//! path, for adapters' tests of layouts no array library produces; [`import_check`] holds the
//! import invariant that dlpack-core's property test and the fuzz target check on every foreign
//! tensor they draw; [`c_layout`] the checks of Rust bindings against a C header that
//! dlpack-core's `dlpack.h` test and dlpack-oneapi's Level Zero test share; [`harness`] the
//! test harness of the suites that run as plain binaries; [`cuda_stand_in`] the test-support
//! exports of the libcuda stand-in, for the suites that run on it.
#![allow(clippy::missing_errors_doc)] // test support (not published): its errors fail tests

pub use dlpack_core::testing::*;

pub mod c_layout;
pub mod cuda_stand_in;
pub mod harness;
mod strided;

pub use strided::StridedVec;

pub mod import_check {
    //! The import invariant that dlpack-core's property test (`tests/property.rs`) and the
    //! cargo-fuzz target (`fuzz/fuzz_targets/import.rs`) check on every foreign tensor they
    //! draw; the two differ only in how they draw an [`Input`] and in how they report a failure.
    //!
    //! [`check`] builds the tensor with [`Foreign`], imports it with
    //! `ManagedTensor::from_raw` or `from_raw_legacy`, and checks that:
    //! - a refused tensor's deleter ran exactly once (never, for a NULL deleter);
    //! - an accepted tensor whose fields describe memory inside the buffer (computed here in
    //!   `i128`, independently of dlpack-core) has a `byte_span()` inside the buffer, equal to
    //!   that reach for byte-sized (or padded sub-byte) dtypes; every element a typed view
    //!   yields lies inside the span, the view has `len()` elements and `to_vec` returns the
    //!   same values, bit for bit;
    //! - an accepted tensor without elements has an empty span and views reach nothing;
    //! - an accepted tensor's deleter runs exactly once on drop.

    use std::ops::Range;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dlpack_core::{DataType, Device, Element, Error, Flags, MAX_NDIM, ManagedTensor};

    use crate::{Array, Built, Data, Foreign, Pointers, row_major};

    /// The most elements a typed view is walked for.
    const WALK_LIMIT: usize = 1 << 12;

    /// How a `shape` or `strides` field of an [`Input`] is filled.
    #[derive(Clone, Debug)]
    pub enum ArrayChoice {
        /// Real values (padded with 1s by the fixture up to `ndim`).
        Values(Vec<i64>),
        /// NULL.
        Null,
        /// A real array 4 bytes off its alignment (filled with 1s).
        Misaligned,
        /// For strides: the compact row-major strides of the shape.
        RowMajor,
    }

    /// Every field of one foreign tensor.
    #[derive(Clone, Debug)]
    pub struct Input {
        /// A legacy `DLManagedTensor` rather than a `DLManagedTensorVersioned`.
        pub legacy: bool,
        /// The version written (major, minor); ignored for legacy tensors.
        pub version: (u32, u32),
        /// The raw flags; ignored for legacy tensors.
        pub flags: u64,
        /// `ndim`; `None`: the shape's length (2 for a misaligned shape, 0 for NULL).
        pub ndim: Option<i32>,
        /// The shape field.
        pub shape: ArrayChoice,
        /// The strides field.
        pub strides: ArrayChoice,
        /// The dtype.
        pub dtype: DataType,
        /// The device.
        pub device: Device,
        /// What the data pointer points to.
        pub data: Data,
        /// `byte_offset`.
        pub byte_offset: u64,
        /// The buffer's contents (zero-padded to whole 8-byte words by the fixture).
        pub buffer: Vec<u8>,
        /// A real deleter (`false`: NULL, and [`check`] frees the block itself).
        pub deleter: bool,
    }

    /// What became of one [`Input`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Outcome {
        /// Refused (the deleter ran, if there was one).
        Refused,
        /// Accepted, but the fields do not describe memory inside the buffer (fake or NULL data,
        /// no elements, or a layout reaching outside it): nothing is read.
        AcceptedElsewhere,
        /// Accepted over the buffer.
        AcceptedInside {
            /// Whether a typed view was walked (the dtype is one of the walked element types:
            /// the scalars, and f16, bf16, complex and float8 with this crate's features; the
            /// data is aligned and valid for it and there are at most 4096 elements).
            walked: bool,
        },
    }

    /// Builds `input` as a foreign tensor, imports it and checks the invariant described in
    /// the [module documentation](self); the block is freed here when its deleter is NULL.
    ///
    /// # Errors
    /// A message saying which part of the invariant failed, for the caller to turn into a test
    /// failure or a panic. The first failure ends the check: the tensor is dropped and a block
    /// with a NULL deleter is still freed, but the later checks do not run.
    pub fn check(input: &Input) -> Result<Outcome, String> {
        let described = input.described_bytes();
        if input.legacy {
            let built = input.foreign().build_legacy();
            // SAFETY: the fixture owns a live block whose arrays hold `min(ndim, MAX_NDIM)`
            // readable i64s; its data pointer is either fake/NULL (then the tensor is only read
            // when accepted and `described` says it lies in the buffer, which it does not) or
            // inside the buffer. Ownership passes to the importer.
            let imported = unsafe { ManagedTensor::from_raw_legacy(built.ptr) };
            finish(built, imported, input.deleter, described)
        } else {
            let built = input.foreign().build();
            // SAFETY: as above, for the versioned block.
            let imported = unsafe { ManagedTensor::from_raw(built.ptr) };
            finish(built, imported, input.deleter, described)
        }
    }

    /// Judges the import of `built`, then frees the block if its deleter is NULL.
    fn finish<H>(
        built: Built<H>,
        imported: Result<ManagedTensor, Error>,
        deleter: bool,
        described: Option<Range<i128>>,
    ) -> Result<Outcome, String> {
        let deletes = built.counter();
        let expected = usize::from(deleter);
        let outcome = judge(imported, &deletes, expected, &built.pointers, described);
        if !deleter {
            // SAFETY: a block with a NULL deleter, which the importer never frees; the
            // importer's result, the only other user of the pointer, was dropped in `judge`.
            unsafe { built.free() };
        }
        outcome
    }

    /// Returns `Err(message)` from the enclosing function unless `cond` holds.
    macro_rules! ensure {
        ($cond:expr, $($message:tt)+) => {
            if !$cond {
                return Err(format!($($message)+));
            }
        };
    }

    /// Returns `Err` from the enclosing function unless the two values are equal.
    macro_rules! ensure_eq {
        ($left:expr, $right:expr, $what:literal) => {{
            let (left, right) = (&$left, &$right);
            ensure!(left == right, "{}: {left:?} != {right:?}", $what);
        }};
    }

    /// Checks one import's result: `deletes` counts the deleter's calls, `buffer` is where the
    /// fixture's buffer lies and `described` the bytes (relative to it) the fields describe.
    fn judge(
        imported: Result<ManagedTensor, Error>,
        deletes: &AtomicUsize,
        expected_deletes: usize,
        buffer: &Pointers,
        described: Option<Range<i128>>,
    ) -> Result<Outcome, String> {
        let t = match imported {
            Err(e) => {
                ensure!(!e.to_string().is_empty(), "a refusal with an empty message");
                let n = deletes.load(Ordering::SeqCst);
                ensure!(
                    n == expected_deletes,
                    "refused ({e}): the deleter ran {n} times, not {expected_deletes}"
                );
                return Ok(Outcome::Refused);
            }
            Ok(t) => t,
        };
        ensure_eq!(
            deletes.load(Ordering::SeqCst),
            0,
            "deleter calls before drop"
        );
        let span = t.byte_span();
        let (buf, buffer_len) = (buffer.buffer.addr(), buffer.buffer_len);
        let inside = described
            .as_ref()
            .is_some_and(|bytes| bytes.start >= 0 && bytes.end <= buffer_len as i128);
        let outcome = if inside {
            ensure!(
                buf <= span.start && span.end <= buf + buffer_len && !span.is_empty(),
                "span {span:x?} outside the buffer {buf:#x}+{buffer_len}"
            );
            // Packed sub-byte tensors span fewer bytes than the strided superset.
            if t.dtype().is_byte_sized() || t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED) {
                let bytes = described.unwrap_or(0..0);
                ensure_eq!(span.start as i128 - buf as i128, bytes.start, "span start");
                ensure_eq!(span.end as i128 - buf as i128, bytes.end, "span end");
            }
            let walked = walk::<u8>(&t, &span)?
                | walk::<i8>(&t, &span)?
                | walk::<bool>(&t, &span)?
                | walk::<i16>(&t, &span)?
                | walk::<u16>(&t, &span)?
                | walk::<i32>(&t, &span)?
                | walk::<u32>(&t, &span)?
                | walk::<f32>(&t, &span)?
                | walk::<i64>(&t, &span)?
                | walk::<u64>(&t, &span)?
                | walk::<f64>(&t, &span)?
                | walk_feature_types(&t, &span)?;
            judge_bool(&t, buffer)?;
            Outcome::AcceptedInside { walked }
        } else {
            if t.is_empty() {
                // No element: a view exists but reaches nothing.
                ensure!(span.is_empty(), "no elements but the span {span:x?}");
                if let Ok(view) = t.view::<u8>() {
                    ensure_eq!(
                        view.iter().count(),
                        0,
                        "elements a view of no elements yields"
                    );
                }
            }
            Outcome::AcceptedElsewhere
        };
        drop(t);
        ensure_eq!(
            deletes.load(Ordering::SeqCst),
            expected_deletes,
            "deleter calls after drop"
        );
        Ok(outcome)
    }

    /// For a `bool` tensor over the buffer, checks the view's verdict against the bytes, read
    /// here one index at a time: a view exists exactly when every reachable byte is 0 or 1, and
    /// a refusal names an index that reaches a bad byte, holding the byte it reports (the first
    /// bad index when no two indices share a byte). Overlapping and broadcast layouts, which
    /// the view checks once per element rather than once per index, are the point.
    fn judge_bool(t: &ManagedTensor, buffer: &Pointers) -> Result<(), String> {
        if t.dtype() != DataType::BOOL || !t.is_host_accessible() || t.len() > WALK_LIMIT {
            return Ok(());
        }
        // The first element's position in the buffer (the span lies inside it: checked above).
        let first = (t.data_ptr().addr() + t.byte_offset() as usize) - buffer.buffer.addr();
        let bytes: Vec<u8> = t
            .element_offsets()
            .map(|offset| {
                // SAFETY: every element of an accepted tensor lies in its span, which lies in
                // the fixture's live buffer; the pointer keeps the buffer's provenance.
                unsafe { *buffer.buffer.add(first.wrapping_add_signed(offset)) }
            })
            .collect();
        let first_bad = bytes.iter().position(|&b| b > 1);
        match (t.view::<bool>(), first_bad) {
            (Ok(_), None) => Ok(()),
            (Err(Error::InvalidValue { index, byte, .. }), Some(first_bad)) => {
                ensure!(
                    byte > 1 && bytes.get(index) == Some(&byte),
                    "bool view refused naming index {index} and byte {byte:#x}, but that index holds {:?}",
                    bytes.get(index)
                );
                let mut distinct = t.element_offsets().collect::<Vec<_>>();
                distinct.sort_unstable();
                distinct.dedup();
                let shared = t
                    .shape()
                    .iter()
                    .zip(t.strides())
                    .any(|(&d, &s)| s == 0 && d > 1)
                    || distinct.len() < bytes.len();
                ensure!(
                    shared || index == first_bad,
                    "bool view named index {index}, but the first bad one is {first_bad}"
                );
                Ok(())
            }
            (verdict, first_bad) => Err(format!(
                "bool view: {verdict:?}, but the first bad index by brute force is {first_bad:?}"
            )),
        }
    }

    /// Bit-exact equality (NaN payloads included), to compare `to_vec` with the view.
    trait Same: Copy {
        /// Whether the two values have the same bits.
        fn same(self, other: Self) -> bool;
    }

    macro_rules! same_by_eq {
        ($($t:ty),*) => { $(impl Same for $t { fn same(self, other: Self) -> bool { self == other } })* };
    }
    same_by_eq!(u8, i8, bool, i16, u16, i32, u32, i64, u64);

    /// Floats compare by their bits (`to_bits`), so that NaN payloads count.
    macro_rules! same_by_bits {
        ($($(#[$cfg:meta])* $t:ty),* $(,)?) => {
            $($(#[$cfg])* impl Same for $t {
                fn same(self, other: Self) -> bool {
                    self.to_bits() == other.to_bits()
                }
            })*
        };
    }
    same_by_bits!(
        f32,
        f64,
        #[cfg(feature = "half")]
        half::f16,
        #[cfg(feature = "half")]
        half::bf16,
        #[cfg(feature = "float8")]
        float8::F8E4M3,
        #[cfg(feature = "float8")]
        float8::F8E5M2,
    );

    #[cfg(feature = "num-complex")]
    impl<T: Same> Same for num_complex::Complex<T> {
        fn same(self, other: Self) -> bool {
            self.re.same(other.re) && self.im.same(other.im)
        }
    }

    /// [`walk`] for the element types of this crate's features (`half`, `num-complex`,
    /// `float8`; the workspace's `cargo test --all-features` turns them on).
    #[allow(unused_variables, unused_mut)] // with none of the features
    fn walk_feature_types(t: &ManagedTensor, span: &Range<usize>) -> Result<bool, String> {
        let mut walked = false;
        #[cfg(feature = "half")]
        {
            walked |= walk::<half::f16>(t, span)? | walk::<half::bf16>(t, span)?;
        }
        #[cfg(feature = "num-complex")]
        {
            walked |= walk::<num_complex::Complex<f32>>(t, span)?
                | walk::<num_complex::Complex<f64>>(t, span)?;
        }
        #[cfg(feature = "float8")]
        {
            walked |= walk::<float8::F8E4M3>(t, span)? | walk::<float8::F8E5M2>(t, span)?;
        }
        Ok(walked)
    }

    /// Walks a typed view when `T` is the tensor's dtype: every element must lie in `span`, the
    /// view must have `len()` elements and `to_vec` must return the same values. `Ok(true)`
    /// when it walked one.
    fn walk<T: Element + Same>(t: &ManagedTensor, span: &Range<usize>) -> Result<bool, String> {
        // Broadcast (stride-0) axes let a few bytes hold billions of elements: walk those only
        // up to WALK_LIMIT elements, enough to reach every byte of a small buffer many times.
        if t.dtype() != T::DTYPE || !t.is_host_accessible() || t.len() > WALK_LIMIT {
            return Ok(false);
        }
        let Ok(view) = t.view::<T>() else {
            // Misaligned data, or (for bool) a byte that is not 0 or 1: `to_vec` refuses too.
            ensure!(t.to_vec::<T>().is_err(), "view refused but to_vec accepted");
            return Ok(false);
        };
        let mut count = 0usize;
        for element in view.iter() {
            let start = std::ptr::from_ref(element).addr();
            ensure!(
                span.start <= start && start + size_of::<T>() <= span.end,
                "element at {start:#x} outside the span {span:x?}"
            );
            count += 1;
        }
        ensure_eq!(count, t.len(), "elements the view yields");
        let copied = t
            .to_vec::<T>()
            .map_err(|e| format!("to_vec refused after a successful view: {e}"))?;
        ensure!(
            copied.len() == t.len() && copied.iter().zip(view.iter()).all(|(a, b)| a.same(*b)),
            "to_vec differs from the view"
        );
        Ok(true)
    }

    impl Input {
        /// The shape values as given (before the fixture pads them).
        fn shape_values(&self) -> Vec<i64> {
            match &self.shape {
                ArrayChoice::Values(v) => v.clone(),
                _ => Vec::new(),
            }
        }

        /// The fixture's array for `choice`.
        fn to_array(&self, choice: &ArrayChoice) -> Array {
            match choice {
                ArrayChoice::Values(v) => Array::Values(v.clone()),
                ArrayChoice::Null => Array::Null,
                ArrayChoice::Misaligned => Array::Misaligned(Vec::new()),
                ArrayChoice::RowMajor => Array::Values(row_major(&self.shape_values())),
            }
        }

        /// The `ndim` the header carries.
        fn header_ndim(&self) -> i32 {
            match (self.ndim, &self.shape) {
                (Some(n), _) => n,
                (None, ArrayChoice::Misaligned) => 2,
                (None, ArrayChoice::Values(v)) => v.len() as i32,
                (None, _) => 0,
            }
        }

        /// The fixture that builds this tensor.
        fn foreign(&self) -> Foreign {
            // The buffer is the input's; U8 keeps the fixture's default buffer small (a wild
            // dtype times a large shape would ask for gigabytes).
            let mut f = Foreign::new(DataType::U8, &self.shape_values())
                .dtype(self.dtype)
                .bytes(&self.buffer)
                .version(self.version.0, self.version.1)
                .flags(self.flags)
                .shape(self.to_array(&self.shape))
                .strides(self.to_array(&self.strides))
                .device(self.device)
                .data(self.data)
                .byte_offset(self.byte_offset)
                .ndim(self.header_ndim());
            if !self.deleter {
                f = f.no_deleter();
            }
            f
        }

        /// The array the importer reads for `choice` (the fixture pads real arrays with 1s and
        /// fills misaligned ones with 1s), or `None` for NULL.
        fn read(&self, choice: &ArrayChoice, ndim: usize) -> Option<Vec<i64>> {
            let mut values = match choice {
                ArrayChoice::Values(v) => v.clone(),
                ArrayChoice::RowMajor => row_major(&self.shape_values()),
                ArrayChoice::Misaligned => Vec::new(),
                ArrayChoice::Null => return None,
            };
            values.resize(values.len().max(ndim), 1);
            values.truncate(ndim);
            Some(values)
        }

        /// The byte range (relative to the buffer's start) that the fields describe, computed
        /// independently of dlpack-core in i128: `Some` only when the data pointer is the
        /// buffer, the tensor has elements and the layout can be read. It is the strided reach
        /// with `ceil(bits * lanes / 8)`-byte elements, a superset of the packed sub-byte
        /// layout.
        fn described_bytes(&self) -> Option<Range<i128>> {
            let Data::Buffer { offset } = self.data else {
                return None;
            };
            let ndim = usize::try_from(self.header_ndim())
                .ok()
                .filter(|&n| n <= MAX_NDIM)?;
            let shape = self.read(&self.shape, ndim)?;
            let strides = self
                .read(&self.strides, ndim)
                .unwrap_or_else(|| row_major(&shape));
            if shape.iter().any(|&d| d <= 0) {
                return None;
            }
            let (mut lo, mut hi) = (0i128, 0i128);
            for (&d, &s) in shape.iter().zip(&strides) {
                // Each term is below 2^126 in magnitude; the sums of up to MAX_NDIM may not fit.
                let term = i128::from(d - 1) * i128::from(s);
                if term < 0 {
                    lo = lo.checked_add(term)?;
                } else {
                    hi = hi.checked_add(term)?;
                }
            }
            let elem = (i128::from(self.dtype.bits) * i128::from(self.dtype.lanes) + 7) / 8;
            let base = offset as i128 + i128::from(self.byte_offset);
            let start = lo.checked_mul(elem)?.checked_add(base)?;
            let end = hi.checked_add(1)?.checked_mul(elem)?.checked_add(base)?;
            Some(start..end)
        }
    }
}
