//! `#[derive(DLPack)]` on user structs that stress the macro (generics, where
//! clauses, const generics with defaults, shadowed prelude names, raw identifiers, fields named
//! like generated locals, Drop impls, macro-generated structs, user buffer types) and the round
//! trip of each (export, then `TryFrom<ManagedTensor>`: same pointer, shape and strides).
#![allow(dead_code, non_camel_case_types)]

use std::sync::Arc;

use dlpack_core::{Buffer, CheckedTensor, DLPack, Device, Element, Error, ManagedTensor};

/// A module shadowing everything a careless expansion would name by a relative path.
mod shadowed {
    #![allow(unused)]
    use dlpack_core::DLPack;

    struct Result;
    struct Option;
    struct Box;
    struct Vec;
    struct String;
    struct Send;
    struct Sync;
    struct Sized;
    struct From;
    struct Into;
    struct Any;
    mod core {}
    mod std {}
    mod alloc {}

    #[derive(DLPack, Debug)]
    pub(crate) struct Shadowed<T: ::dlpack_core::Element> {
        #[dlpack(data)]
        pub(crate) data: ::std::vec::Vec<T>,
        #[dlpack(shape)]
        pub(crate) shape: [usize; 2],
        #[dlpack(strides)]
        pub(crate) strides: ::std::boxed::Box<[i32]>,
        #[dlpack(byte_offset)]
        pub(crate) offset: u16,
        pub(crate) note: ::std::string::String,
    }
}

/// Generic over the buffer itself, with a where clause, a const generic with a default and a
/// type parameter used only by a field without a role.
#[derive(DLPack)]
struct Generic<B, M, const N: usize = 2>
where
    B: Buffer,
    B::Elem: Copy,
    M: Default + Send + 'static,
{
    #[dlpack(data)]
    data: B,
    #[dlpack(shape)]
    shape: [u64; N],
    meta: M,
}

/// Fields named like the generated locals, and raw identifiers.
#[derive(DLPack, Debug, Clone, PartialEq, Default)]
struct Locals {
    #[dlpack(data)]
    __data: Vec<f32>,
    #[dlpack(shape)]
    __shape: Vec<usize>,
    #[dlpack(strides)]
    __strides: Vec<isize>,
    #[dlpack(device)]
    __device: Device,
    __tensor: u8,
    __desc: u8,
    __slot: u8,
    r#type: u8,
    r#struct: String,
}

/// A struct with its own Drop impl.
#[derive(DLPack)]
struct Dropping {
    #[dlpack(data)]
    data: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 1],
    log: Option<Arc<std::sync::Mutex<Vec<&'static str>>>>,
}

impl Drop for Dropping {
    fn drop(&mut self) {
        if let Some(log) = &self.log {
            log.lock().unwrap().push("dropped");
        }
    }
}

/// A struct made by a declarative macro.
macro_rules! tensor_type {
    ($name:ident, $t:ty) => {
        #[derive(DLPack, Debug)]
        struct $name {
            #[dlpack(data)]
            values: Vec<$t>,
            #[dlpack(shape)]
            dims: Vec<i64>,
        }
    };
}
tensor_type!(MacroMade, i16);

/// A user buffer type: a boxed slice with a header, giving up its Vec.
struct MyBuffer<T> {
    header: u32,
    elements: Vec<T>,
}

// SAFETY: the Vec's heap buffer holds `len` initialised elements and does not move with the
// struct; only its owner touches it.
unsafe impl<T: Element> Buffer for MyBuffer<T> {
    type Elem = T;
    const GIVES_VEC: bool = true;
    fn as_mut_ptr(&mut self) -> *mut T {
        self.elements.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.elements.len()
    }
    fn give_vec(&mut self) -> Option<Vec<T>> {
        Some(std::mem::take(&mut self.elements))
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        Ok(MyBuffer {
            header: 0xC0FFEE,
            elements: tensor.to_vec()?,
        })
    }
}

#[derive(DLPack)]
struct WithMyBuffer {
    #[dlpack(data)]
    data: MyBuffer<f64>,
    #[dlpack(shape)]
    shape: [i32; 2],
}

/// Each host buffer type in a tuple struct.
#[derive(DLPack)]
struct InArc(#[dlpack(data)] Arc<[u32]>, #[dlpack(shape)] [usize; 2]);
#[derive(DLPack)]
struct InBox(#[dlpack(data)] Box<[u32]>, #[dlpack(shape)] [usize; 2]);
#[derive(DLPack)]
struct InVec(#[dlpack(data)] Vec<u32>, #[dlpack(shape)] [usize; 2]);

/// A 0-d tensor type.
#[derive(DLPack, Debug)]
struct Scalar {
    #[dlpack(data)]
    value: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 0],
}

/// A signed byte offset.
#[derive(DLPack, Debug)]
struct SignedOffset {
    #[dlpack(data)]
    data: Vec<i32>,
    #[dlpack(shape)]
    shape: [usize; 1],
    #[dlpack(byte_offset)]
    offset: i64,
}

/// A constant device naming a device type the buffer is not on.
#[derive(DLPack, Debug)]
#[dlpack(device = Device::cuda(0))]
struct ClaimsCuda {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

fn layout(t: &ManagedTensor) -> (Vec<i64>, Vec<i64>, *const core::ffi::c_void) {
    (
        t.shape().to_vec(),
        t.strides().to_vec(),
        t.data_ptr().cast_const(),
    )
}

#[test]
fn a_struct_in_a_module_shadowing_the_prelude_round_trips() -> Result<(), Error> {
    // Column-major 2 x 3 starting at element 1 of the buffer.
    let s = shadowed::Shadowed {
        data: vec![-1i32, 0, 3, 1, 4, 2, 5],
        shape: [2, 3],
        strides: vec![1, 2].into_boxed_slice(),
        offset: 4,
        note: "n".into(),
    };
    let address = s.data.as_ptr();
    let tensor = ManagedTensor::export(s)?;
    assert_eq!(layout(&tensor).0, [2, 3]);
    assert_eq!(layout(&tensor).1, [1, 2]);
    // The offset is folded into the data pointer, as NumPy and PyTorch export.
    assert_eq!(tensor.byte_offset(), 0);
    assert_eq!(tensor.data_ptr().addr(), address.addr() + 4);
    assert_eq!(tensor.to_vec::<i32>()?, [0, 1, 2, 3, 4, 5]);
    let back = shadowed::Shadowed::<i32>::try_from(tensor)?;
    assert_eq!(
        (back.data.as_ptr(), back.offset, back.note.as_str()),
        (address, 4, "n")
    );
    assert_eq!(&*back.strides, &[1, 2]);
    Ok(())
}

#[test]
fn a_struct_generic_over_its_buffer_round_trips_with_every_host_buffer() -> Result<(), Error> {
    let g: Generic<Vec<u8>, String> = Generic {
        data: vec![1, 2, 3, 4, 5, 6],
        shape: [3, 2],
        meta: "m".into(),
    };
    let address = g.data.as_ptr();
    let tensor = ManagedTensor::export(g)?;
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 2][..], &[2, 1][..])
    );
    let back = Generic::<Vec<u8>, String>::try_from(tensor)?;
    assert_eq!((back.data.as_ptr(), back.meta.as_str()), (address, "m"));

    let g: Generic<Arc<[u8]>, (), 1> = Generic {
        data: Arc::from(vec![9u8, 8]),
        shape: [2],
        meta: (),
    };
    let tensor = ManagedTensor::export(g)?;
    assert!(tensor.is_read_only());
    // Another type: a copy into an Arc, then into a Box of another rank: NdimMismatch.
    let copy = Generic::<Arc<[u8]>, (), 1>::try_from(ManagedTensor::export(vec![1u8, 2, 3])?)?;
    assert_eq!(&*copy.data, &[1, 2, 3]);
    let err = Generic::<Box<[u8]>, ()>::try_from(tensor).err();
    assert_eq!(
        err,
        Some(Error::NdimMismatch {
            found: 1,
            expected: 2
        })
    );
    Ok(())
}

#[test]
fn fields_named_like_generated_locals_round_trip() -> Result<(), Error> {
    let l = Locals {
        __data: vec![1.0, 2.0, 3.0, 4.0],
        __shape: vec![2, 2],
        __strides: vec![1, 2],
        __device: Device::CPU,
        __tensor: 1,
        __desc: 2,
        __slot: 3,
        r#type: 4,
        r#struct: "s".into(),
    };
    let copy = l.clone();
    let tensor = ManagedTensor::export(l)?;
    assert_eq!(tensor.strides(), &[1, 2]);
    assert_eq!(tensor.to_vec::<f32>()?, [1.0, 3.0, 2.0, 4.0]);
    let back = Locals::try_from(tensor)?;
    assert_eq!(back, copy);
    // A copy gets row-major strides and defaults.
    let copied = Locals::try_from(ManagedTensor::export(vec![5.0f32, 6.0])?)?;
    assert_eq!(copied.__strides, [1]);
    assert_eq!((copied.__tensor, copied.r#type), (0, 0));
    Ok(())
}

#[test]
fn a_struct_with_a_drop_impl_is_dropped_exactly_once() -> Result<(), Error> {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let d = Dropping {
        data: vec![1, 2],
        shape: [2],
        log: Some(log.clone()),
    };
    let tensor = ManagedTensor::export(d)?;
    assert!(log.lock().unwrap().is_empty());
    // Reclaimed: no drop yet; then dropped once.
    let back = Dropping::try_from(tensor)?;
    assert!(log.lock().unwrap().is_empty());
    drop(back);
    assert_eq!(*log.lock().unwrap(), ["dropped"]);
    // into_vec takes the Vec out of a struct that implements Drop: it is dropped once.
    let d = Dropping {
        data: vec![1, 2],
        shape: [2],
        log: Some(log.clone()),
    };
    let v = ManagedTensor::export(d)?.into_vec::<u8>().unwrap();
    assert_eq!(v, [1, 2]);
    assert_eq!(log.lock().unwrap().len(), 2);
    Ok(())
}

#[test]
fn a_macro_made_struct_round_trips() -> Result<(), Error> {
    let m = MacroMade {
        values: vec![1, 2, 3, 4, 5, 6],
        dims: vec![3, 2],
    };
    let address = m.values.as_ptr();
    let back = MacroMade::try_from(ManagedTensor::export(m)?)?;
    assert_eq!(back.values.as_ptr(), address);
    Ok(())
}

#[test]
fn a_user_buffer_round_trips_and_gives_its_vec() -> Result<(), Error> {
    let made = || WithMyBuffer {
        data: MyBuffer {
            header: 7,
            elements: vec![1.0, 2.0, 3.0, 4.0],
        },
        shape: [2, 2],
    };
    let w = made();
    let address = w.data.elements.as_ptr();
    let tensor = ManagedTensor::export(w)?;
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 2][..], &[2, 1][..])
    );
    assert_eq!(tensor.data_ptr().cast_const().cast::<f64>(), address);
    let back = WithMyBuffer::try_from(tensor)?;
    assert_eq!(
        (back.data.header, back.data.elements.as_ptr()),
        (7, address)
    );
    let copy = WithMyBuffer::try_from(ManagedTensor::export(vec![1.0f64; 4])?);
    assert_eq!(
        copy.err(),
        Some(Error::NdimMismatch {
            found: 1,
            expected: 2
        })
    );
    let w = made();
    let address = w.data.elements.as_ptr();
    let v = ManagedTensor::export(w)?.into_vec::<f64>().unwrap();
    assert_eq!(v.as_ptr(), address);
    Ok(())
}

#[test]
fn every_host_buffer_keeps_its_pointer_through_export_and_reclaim() -> Result<(), Error> {
    let arc: Arc<[u32]> = Arc::from(vec![1u32, 2, 3, 4]);
    let p = arc.as_ptr();
    let back = InArc::try_from(ManagedTensor::export(InArc(arc, [2, 2]))?)?;
    assert_eq!(back.0.as_ptr(), p);
    // An Arc buffer is read-only, so into_vec must not take it.
    assert!(
        ManagedTensor::export(InArc(back.0, [2, 2]))?
            .into_vec::<u32>()
            .is_err()
    );

    let b: Box<[u32]> = vec![1u32, 2, 3, 4].into_boxed_slice();
    let p = b.as_ptr();
    let back = InBox::try_from(ManagedTensor::export(InBox(b, [2, 2]))?)?;
    assert_eq!(back.0.as_ptr(), p);
    let v = ManagedTensor::export(InBox(back.0, [2, 2]))?
        .into_vec::<u32>()
        .unwrap();
    assert_eq!(v.as_ptr(), p);

    let v = vec![1u32, 2, 3, 4];
    let p = v.as_ptr();
    let t = ManagedTensor::export(InVec(v, [2, 2]))?;
    // Imported into another struct type with the same buffer type: a copy, not the same memory.
    let other = InBox::try_from(t)?;
    assert_ne!(other.0.as_ptr(), p);
    assert_eq!(&*other.0, &[1, 2, 3, 4]);
    Ok(())
}

#[test]
fn a_0_d_struct_round_trips() -> Result<(), Error> {
    let s = Scalar {
        value: vec![2.5],
        shape: [],
    };
    let p = s.value.as_ptr();
    let t = ManagedTensor::export(s)?;
    assert_eq!(t.ndim(), 0);
    assert_eq!(t.to_vec::<f32>()?, [2.5]);
    let back = Scalar::try_from(t)?;
    assert_eq!(back.value.as_ptr(), p);
    // A 0-d struct with an empty buffer describes one element that is not there: refused.
    let err = ManagedTensor::export(Scalar {
        value: vec![],
        shape: [],
    })
    .err()
    .map(Error::from);
    assert!(
        matches!(err, Some(Error::SpanOutsideAllocation { .. })),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn a_negative_byte_offset_is_refused_at_export() {
    let err = ManagedTensor::export(SignedOffset {
        data: vec![1, 2],
        shape: [1],
        offset: -4,
    })
    .err()
    .map(Error::from);
    assert!(
        matches!(
            err,
            Some(Error::SpanOutsideAllocation { .. } | Error::Overflow { .. })
        ),
        "{err:?}"
    );
}

#[test]
fn a_constant_device_of_another_type_is_refused_with_device_mismatch() {
    let err = ManagedTensor::export(ClaimsCuda {
        data: vec![1.0],
        shape: [1],
    })
    .err()
    .map(Error::from);
    assert!(matches!(err, Some(Error::DeviceMismatch { .. })), "{err:?}");
}
