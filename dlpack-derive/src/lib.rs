//! `#[derive(DLPack)]` for your own tensor structs: one line gives a struct that holds a buffer
//! and a shape a zero-copy DLPack export and an import back, through dlpack-core.
//!
//! Use it through dlpack-core's `derive` feature (`dlpack_core::DLPack`). Mark the field that
//! holds the elements `#[dlpack(data)]` and the one that holds the sizes `#[dlpack(shape)]`:
//!
//! ```
//! use dlpack_core::{DLPack, Error, ManagedTensor};
//!
//! #[derive(DLPack)]
//! struct Image {
//!     #[dlpack(data)]
//!     pixels: Vec<u8>,
//!     #[dlpack(shape)]
//!     size: [usize; 2],
//!     title: String, // no role: left out of the tensor, `Default` on a copying import
//! }
//!
//! let image = Image { pixels: vec![0, 1, 2, 3, 4, 5], size: [2, 3], title: "tiny".into() };
//! let address = image.pixels.as_ptr();
//!
//! // Export: the struct moves into the managed tensor; the pixels are not copied.
//! let tensor = ManagedTensor::export(image)?;
//! assert_eq!((tensor.shape(), tensor.dtype().to_string()), (&[2, 3][..], "uint8".into()));
//! assert_eq!(tensor.view::<u8>()?.as_ptr(), address);
//!
//! // Import: a tensor exported from an `Image` gives the very same `Image` back ...
//! let image = Image::try_from(tensor)?;
//! assert_eq!((image.pixels.as_ptr(), image.title.as_str()), (address, "tiny"));
//!
//! // ... and any other producer's tensor of `u8` with two dimensions is copied into a new one.
//! let other = ManagedTensor::export(vec![7u8; 4])?; // one dimension
//! assert_eq!(
//!     Image::try_from(other).err(),
//!     Some(Error::NdimMismatch { found: 1, expected: 2 })
//! );
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Attributes
//!
//! On fields (each role on exactly one field; `data` and `shape` are required):
//!
//! | attribute | the field holds | types |
//! |---|---|---|
//! | `#[dlpack(data)]` | the elements; the dtype is the element type's | any `dlpack_core::Buffer`: `Vec<T>`, `Box<[T]>`, `Arc<[T]>` (read-only) for `T: Element`, device crates' buffers |
//! | `#[dlpack(shape)]` | the sizes | any `dlpack_core::Dims`: `Vec`, `Box<[_]>` or `[_; N]` of `usize`, `isize`, `i64`, `u64`, `i32`, `u32` |
//! | `#[dlpack(strides)]` | the strides, in elements (row-major when absent) | any `dlpack_core::Dims` |
//! | `#[dlpack(byte_offset)]` | bytes from the buffer's start to the first element (0 when absent) | an integer type `u64` converts from (`u64`, `usize`, `u32`, ...) |
//! | `#[dlpack(device)]` | the device the tensor names | `dlpack_core::Device` |
//!
//! On the struct:
//!
//! | attribute | effect |
//! |---|---|
//! | `#[dlpack(crate = "path")]` | the path to dlpack-core, for a renamed dependency or a facade crate (default `::dlpack_core`) |
//! | `#[dlpack(device = EXPR)]` | a constant device (a const expression of type `Device`) for every tensor of the type |
//! | `#[dlpack(read_only)]` | the tensors are marked read-only: consumers must not write them |
//! | `#[dlpack(export_only)]` | no import is generated, so fields without a role need not be `Default` |
//!
//! Keys combine in one attribute or spread over several: `#[dlpack(crate = "dl", read_only)]`.
//! Each key is given once; an empty `#[dlpack()]`, a `#[dlpack]` or `#[dlpack = ...]` without
//! the parenthesised list, and an unknown key are errors. Fields without a role are left alone by
//! the export. Tuple structs work the same, with the attributes on their fields.
//!
//! ```
//! use dlpack_core::{DLPack, Device, Element, ManagedTensor};
//!
//! /// Any element type, `N` dimensions, any strides, a view into the middle of its buffer.
//! #[derive(DLPack)]
//! #[dlpack(read_only)]
//! struct Strided<T: Element, const N: usize> {
//!     #[dlpack(data)]
//!     data: Box<[T]>,
//!     #[dlpack(shape)]
//!     shape: [usize; N],
//!     #[dlpack(strides)]
//!     strides: [isize; N],
//!     #[dlpack(byte_offset)]
//!     offset: usize,
//!     #[dlpack(device)]
//!     device: Device,
//! }
//!
//! // The transpose of [[0, 1, 2], [3, 4, 5]], skipping the buffer's first element.
//! let t = Strided {
//!     data: vec![-1i32, 0, 3, 1, 4, 2, 5].into(),
//!     shape: [3, 2],
//!     strides: [2, 1],
//!     offset: 4,
//!     device: Device::CPU,
//! };
//! let tensor = ManagedTensor::export(t)?;
//! assert!(tensor.is_read_only());
//! assert_eq!(tensor.view::<i32>()?.get(&[2, 0]), Some(&2));
//!
//! // A struct of the same type comes back as it was; another type gets a row-major copy.
//! let copy = Strided::<i32, 2>::try_from(ManagedTensor::export(vec![1i32, 2])?);
//! assert!(copy.is_err()); // one dimension, not two
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # What is generated
//!
//! - `unsafe impl dlpack_core::Export`: `ManagedTensor::export(value)` moves the struct into the
//!   managed tensor's one heap block (no copy of the data) and describes it as a layout over
//!   the buffer field. The description names the buffer's allocation, so a shape,
//!   strides or byte offset that reach outside the buffer make the export fail with
//!   `Error::SpanOutsideAllocation`, whatever values the fields hold: the impl is sound for
//!   every value of every field, which is why the derive may write it for safe code (and why it
//!   works in `#![forbid(unsafe_code)]` crates). Fields that disagree with each other are
//!   refused with typed errors first (`Export::check`, see Devices below).
//!   `ManagedTensor::into_vec` takes the buffer's
//!   `Vec` when the tensor is all of it, row-major from its first element (not for `read_only`).
//! - `impl TryFrom<dlpack_core::ManagedTensor>` (unless `export_only`), with
//!   `Error = dlpack_core::Error`:
//!   1. a tensor exported from this very type gives the struct back without a copy
//!      (`ManagedTensor::reclaim`), all fields as they were;
//!   2. otherwise the tensor's dtype must be the buffer's element type
//!      (`Error::DataTypeMismatch`), its shape must fit the shape field's type
//!      (`Error::NdimMismatch` for an array of another length, `Error::DimOutOfRange` for a
//!      size the type cannot hold), and the buffer type copies the elements in row-major order
//!      (`Buffer::copy_from_tensor`: host buffers refuse memory the host cannot read with
//!      `Error::NotHostAccessible`; device buffers decide which devices they copy from). The
//!      strides field gets the row-major strides, the byte offset 0, the device field the
//!      device of the new buffer (with the tensor's ordinal when the device types match), and
//!      every field without a role `Default::default()`.
//!
//!   On an error the tensor is dropped, so its deleter runs exactly once. Like serde's
//!   `Deserialize`, the import builds the struct from its fields directly, without calling any
//!   constructor of yours: derive it only where every combination of those values is valid.
//!
//! # Devices
//!
//! A buffer knows its device (`Buffer::device`: CPU for `Vec`, the GPU for a dlpack-cuda buffer).
//! A `#[dlpack(device)]` field or a `#[dlpack(device = ...)]` constant can only refine it: it
//! must name the buffer's device type, and then supplies the ordinal (a SYCL device index, say,
//! where the buffer type cannot know how the consumer numbers devices). One naming another
//! device type would describe memory as something it is not, so the export refuses it with
//! `Error::DeviceMismatch` (from the generated `Export::check`, which runs before the struct
//! moves). A strides field whose length differs from the shape's is refused the same way, with
//! `Error::NdimMismatch`.
//!
//! # Mistakes are compile errors
//!
//! Every mistake in the attributes is reported in one compile, each on its own span. A field
//! type that does not fit its role is reported on the field by dlpack-core's messages:
//!
//! ```compile_fail,E0277
//! use dlpack_core::DLPack;
//!
//! #[derive(DLPack)]
//! struct Text {
//!     #[dlpack(data)]
//!     text: String, // error: `String` is not a DLPack buffer
//!     #[dlpack(shape)]
//!     shape: [usize; 1],
//! }
//! ```
//!
//! ```compile_fail,E0277
//! use dlpack_core::DLPack;
//!
//! #[derive(DLPack)]
//! struct Matrix {
//!     #[dlpack(data)]
//!     values: Vec<f32>,
//!     #[dlpack(shape)]
//!     shape: (usize, usize), // error: `(usize, usize)` cannot hold DLPack dimensions
//! }
//! ```
//!
//! ```compile_fail
//! use dlpack_core::DLPack;
//!
//! #[derive(DLPack)]
//! #[dlpack(readonly)] // error: unknown dlpack attribute `readonly`; did you mean `read_only`?
//! struct Matrix {
//!     #[dlpack(data)]
//!     re: Vec<f32>,
//!     #[dlpack(data)] // error: a second #[dlpack(data)] field
//!     im: Vec<f32>,
//!     // error (on `Matrix`): missing #[dlpack(shape)]
//! }
//! ```
//!
//! ```compile_fail
//! use dlpack_core::DLPack;
//!
//! #[derive(DLPack)] // error: works on structs only
//! enum Tensor {
//!     F32(Vec<f32>),
//!     I64(Vec<i64>),
//! }
//! ```
//!
//! ```compile_fail,E0277
//! use dlpack_core::DLPack;
//!
//! struct Handle(u32);
//!
//! #[derive(DLPack)] // add #[dlpack(export_only)] to export only
//! struct Matrix {
//!     #[dlpack(data)]
//!     values: Vec<f32>,
//!     #[dlpack(shape)]
//!     shape: Vec<usize>,
//!     handle: Handle, // error: `Handle: Default` is not satisfied (the import needs it)
//! }
//! ```
//!
//! A packed struct is refused: the generated code takes references to the fields, which a
//! `#[repr(packed)]` struct may leave unaligned (`#[repr(C)]` and `#[repr(align(N))]` work):
//!
//! ```compile_fail
//! use dlpack_core::DLPack;
//!
//! #[derive(DLPack)]
//! #[repr(C, packed)] // error: cannot be used on a `#[repr(packed)]` struct
//! struct Matrix {
//!     #[dlpack(data)]
//!     values: Vec<f32>,
//!     #[dlpack(shape)]
//!     shape: [usize; 2],
//! }
//! ```
//!
//! The UI tests (`tests/ui/`) show rustc's full output for each mistake.
//!
//! # Generic structs and hygiene
//!
//! Type and const parameters work (`struct Tensor<T: Element>`, `[usize; N]`). The impls
//! require of each role field's type what its role needs (`B: Buffer`, `S: Dims`, ...) and of
//! the struct `Send + 'static`, so a parameter needs no bounds of its own. Lifetime parameters
//! are refused: a managed tensor may outlive any borrow. Parameter names starting with `__`
//! are refused too: they are reserved for the generated code's own names.
//!
//! The output is one `const _: () = { ... };` that names everything by absolute path, through
//! the facade path, and compiles under `#![no_implicit_prelude]` next to items named like
//! anything it uses (`tests/hygiene.rs`).

mod ast;
mod attr;
mod check;
mod expand;

/// Derives `dlpack_core::Export` and `TryFrom<dlpack_core::ManagedTensor>` for a struct with a
/// buffer field and a shape field.
///
/// ```
/// use dlpack_core::{DLPack, ManagedTensor};
///
/// #[derive(DLPack)]
/// struct Matrix {
///     #[dlpack(data)]
///     values: Vec<f64>,
///     #[dlpack(shape)]
///     dims: [usize; 2],
/// }
///
/// let tensor = ManagedTensor::export(Matrix { values: vec![1.0; 6], dims: [3, 2] })?;
/// assert_eq!(tensor.strides(), &[2, 1]);
/// let back = Matrix::try_from(tensor)?;
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// Field attributes: `#[dlpack(data)]` (a `Buffer`: `Vec<T>`, `Box<[T]>`, `Arc<[T]>`, a device
/// buffer), `#[dlpack(shape)]` (a `Dims`: `Vec<usize>`, `[usize; N]`, `Vec<i64>`, ...), and
/// optionally `#[dlpack(strides)]`, `#[dlpack(byte_offset)]`, `#[dlpack(device)]`. Struct
/// attributes: `#[dlpack(crate = "path")]`, `#[dlpack(device = EXPR)]`, `#[dlpack(read_only)]`,
/// `#[dlpack(export_only)]`. The dlpack-derive crate documentation describes each, what the
/// generated impls check, and the compile errors for wrong uses.
#[proc_macro_derive(DLPack, attributes(dlpack))]
pub fn derive_dlpack(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
