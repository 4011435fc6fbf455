//! The derive's output resolves every name by absolute path through the facade it is given: it
//! compiles with no prelude, the facade renamed, and items in scope named like everything the
//! generated code uses (types, traits, variants, primitive types and its own locals).
#![no_implicit_prelude]
#![allow(dead_code, non_camel_case_types, non_upper_case_globals)]

extern crate dlpack_core as tensors;

use tensors::DLPack;

// Anything the generated code names without a path would pick these up and fail to compile.
struct Option;
struct Some;
struct None;
struct Result;
struct Ok;
struct Err;
struct Vec;
struct Box;
struct Default;
struct Copy;
struct TryFrom;
struct Iterator;
struct Buffer;
struct Dims;
struct Export;
struct ExportDesc;
struct ManagedTensor;
struct CheckedTensor;
struct Error;
struct Device;
struct Flags;
struct Element;
struct usize;
struct i64;
struct u64;
mod core {}
mod dlpack_core {}
mod __dlpack {}

// Locals of the generated code, as constants a pattern could match against.
const shape: u8 = 0;
const strides: u8 = 0;
const desc: u8 = 0;
const data: u8 = 0;
const device: u8 = 0;
const tensor: u8 = 0;
const trusted: u8 = 0;
const ndim: u8 = 0;
const sizes: u8 = 0;
const row_major: u8 = 0;
const elements: u8 = 0;
const size: u8 = 0;
const found: u8 = 0;
const expected: u8 = 0;
const value: u8 = 0;
const slot: u8 = 0;

#[derive(DLPack)]
#[dlpack(crate = "tensors")]
struct Everything<T: tensors::Element, const N: ::core::primitive::usize> {
    #[dlpack(data)]
    values: ::std::vec::Vec<T>,
    #[dlpack(shape)]
    extent: [::core::primitive::usize; N],
    #[dlpack(strides)]
    step: [::core::primitive::isize; N],
    #[dlpack(byte_offset)]
    skip: ::core::primitive::u64,
    #[dlpack(device)]
    place: tensors::Device,
    label: ::std::string::String,
}

#[derive(DLPack)]
#[dlpack(crate = "::tensors", read_only, device = tensors::Device::CPU)]
struct Tuple(
    #[dlpack(data)] ::std::boxed::Box<[::core::primitive::f32]>,
    #[dlpack(shape)] ::std::vec::Vec<::core::primitive::i64>,
);

#[test]
fn a_struct_derived_without_prelude_and_with_a_renamed_facade_round_trips()
-> ::core::result::Result<(), tensors::Error> {
    let everything = Everything {
        values: ::std::vec![1.0f32, 2.0, 3.0, 4.0],
        extent: [2, 2],
        step: [2, 1],
        skip: 0,
        place: tensors::Device::CPU,
        label: ::std::string::String::new(),
    };
    let address = everything.values.as_ptr();
    let exported = tensors::ManagedTensor::export(everything)?;
    let back =
        <Everything<::core::primitive::f32, 2> as ::core::convert::TryFrom<_>>::try_from(exported)?;
    ::std::assert_eq!(back.values.as_ptr(), address);

    let tuple = Tuple(::std::vec![5.0f32, 6.0].into_boxed_slice(), ::std::vec![2]);
    let exported = tensors::ManagedTensor::export(tuple)?;
    ::std::assert!(exported.is_read_only());
    let copied =
        <Everything<::core::primitive::f32, 1> as ::core::convert::TryFrom<_>>::try_from(exported)?;
    ::std::assert_eq!(copied.values, [5.0, 6.0]);
    ::std::assert_eq!(copied.step, [1]);
    ::core::result::Result::Ok(())
}
