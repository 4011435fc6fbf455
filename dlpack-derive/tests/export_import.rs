//! What a derived struct does at run time: it exports without a copy, comes back without a copy,
//! copies from other producers' tensors, and refuses what does not fit, with dlpack-core's
//! typed errors. Runs under Miri too.
// The generated where clauses name each bound once (`cargo clippy --all-targets` checks this
// nursery lint here, where a shape and strides share a type).
#![deny(clippy::type_repetition_in_bounds)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::{
    Buffer, CheckedTensor, DLPack, DataType, Device, DeviceType, Element, Error, ManagedTensor,
};
use dlpack_testing::DropCounter;

/// A plain row-major matrix.
#[derive(DLPack, Debug, PartialEq)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    dims: [usize; 2],
}

/// Every role: strides, a byte offset, a device field, and a field without a role.
#[derive(DLPack, Debug)]
struct Strided {
    #[dlpack(data)]
    values: Box<[i32]>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<isize>,
    #[dlpack(byte_offset)]
    offset: usize,
    #[dlpack(device)]
    device: Device,
    name: String,
}

/// A generic tensor, the shape of many users' types.
#[derive(DLPack, Debug)]
struct Tensor<T: Element> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

/// A tensor whose number of dimensions is part of its type.
#[derive(DLPack, Debug)]
struct Fixed<T: Element, const N: usize> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: [u32; N],
}

/// Shape and strides of one generic type.
#[derive(DLPack, Debug)]
struct SameDims<T: Element, S> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: S,
    #[dlpack(strides)]
    strides: S,
}

/// A tuple struct: the attributes say which field is which.
#[derive(DLPack, Debug)]
struct Pair(#[dlpack(data)] Arc<[u8]>, #[dlpack(shape)] [usize; 1]);

/// Read-only by the container attribute.
#[derive(DLPack, Debug)]
#[dlpack(read_only)]
struct Frozen {
    #[dlpack(data)]
    data: Vec<f64>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

/// A field without `Default` is fine when the struct only exports.
#[derive(DLPack, Debug)]
#[dlpack(export_only)]
struct Counted {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
    _counter: DropCounter,
}

fn counted(data: Vec<f32>) -> (Counted, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let shape = [data.len()];
    let value = Counted {
        data,
        shape,
        _counter: DropCounter::new(&drops),
    };
    (value, drops)
}

#[test]
fn export_moves_the_struct_into_the_tensor_without_copying_the_data() -> Result<(), Error> {
    let m = Matrix {
        values: (0..6).map(|i| i as f32).collect(),
        dims: [2, 3],
    };
    let address = m.values.as_ptr();
    let tensor = ManagedTensor::export(m)?;
    assert_eq!(tensor.dtype(), DataType::F32);
    assert_eq!(tensor.device(), Device::CPU);
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[3, 1][..])
    );
    assert!(!tensor.is_read_only());
    let view = tensor.view::<f32>()?;
    assert_eq!(view.as_ptr(), address);
    assert_eq!(view.get(&[1, 2]), Some(&5.0));
    Ok(())
}

#[test]
fn a_tensor_exported_from_the_struct_imports_back_as_the_same_struct_without_a_copy()
-> Result<(), Error> {
    let m = Matrix {
        values: vec![1.0, 2.0, 3.0, 4.0],
        dims: [2, 2],
    };
    let address = m.values.as_ptr();
    // Through C and back, as a consumer would return it.
    let raw = ManagedTensor::export(m)?.into_raw()?;
    // SAFETY: `raw` was just exported and is owned by us.
    let tensor = unsafe { ManagedTensor::from_raw(raw)? };
    let back = Matrix::try_from(tensor)?;
    assert_eq!(back.values.as_ptr(), address);
    assert_eq!(back.dims, [2, 2]);
    assert_eq!(back.values, [1.0, 2.0, 3.0, 4.0]);
    Ok(())
}

#[test]
fn a_vec_tensor_of_another_producer_is_copied_into_a_new_buffer() -> Result<(), Error> {
    let source = vec![1.5f32, 2.5, 3.5];
    let address = source.as_ptr();
    let tensor = ManagedTensor::export(source)?;
    let t = Tensor::<f32>::try_from(tensor)?;
    assert_ne!(t.data.as_ptr(), address);
    assert_eq!(t.data, [1.5, 2.5, 3.5]);
    assert_eq!(t.shape, [3]);
    Ok(())
}

#[test]
fn a_strided_tensor_is_copied_in_row_major_order() -> Result<(), Error> {
    // [[0, 1, 2], [3, 4, 5]] stored column-major: 0 3 1 4 2 5, one element after a skipped one.
    let transposed = Strided {
        values: vec![-1, 0, 3, 1, 4, 2, 5].into_boxed_slice(),
        shape: vec![2, 3],
        strides: vec![1, 2],
        offset: 4,
        device: Device::CPU,
        name: "transposed".into(),
    };
    let first = transposed.values[1..].as_ptr();
    let tensor = ManagedTensor::export(transposed)?;
    assert_eq!(tensor.strides(), &[1, 2]);
    // The offset is folded into the data pointer, as NumPy and PyTorch export.
    assert_eq!(
        (tensor.byte_offset(), tensor.data_ptr().cast_const()),
        (0, first.cast())
    );
    let m = Tensor::<i32>::try_from(tensor)?;
    assert_eq!(m.data, [0, 1, 2, 3, 4, 5]);
    assert_eq!(m.shape, [2, 3]);
    Ok(())
}

#[test]
fn a_copy_gets_row_major_strides_offset_zero_and_defaults_for_fields_without_a_role()
-> Result<(), Error> {
    let source = Tensor {
        data: (0..6).collect::<Vec<i32>>(),
        shape: vec![3, 2],
    };
    let s = Strided::try_from(ManagedTensor::export(source)?)?;
    assert_eq!(&*s.values, &[0, 1, 2, 3, 4, 5]);
    assert_eq!(s.shape, [3, 2]);
    assert_eq!(s.strides, [2, 1]);
    assert_eq!(s.offset, 0);
    assert_eq!(s.device, Device::CPU);
    assert_eq!(s.name, "");
    Ok(())
}

#[test]
fn a_tensor_of_another_element_type_is_refused_with_data_type_mismatch() -> Result<(), Error> {
    let tensor = ManagedTensor::export(vec![1i64, 2, 3])?;
    let error = Matrix::try_from(tensor).unwrap_err();
    assert_eq!(
        error,
        Error::DataTypeMismatch {
            found: DataType::I64,
            expected: DataType::F32
        }
    );
    Ok(())
}

#[test]
fn a_tensor_with_another_number_of_dimensions_is_refused_by_a_fixed_size_shape() -> Result<(), Error>
{
    let tensor = ManagedTensor::export(vec![1.0f32; 4])?;
    let error = Matrix::try_from(tensor).unwrap_err();
    assert_eq!(
        error,
        Error::NdimMismatch {
            found: 1,
            expected: 2
        }
    );
    let tensor = ManagedTensor::export(vec![1u8; 4])?;
    let error = Fixed::<u8, 3>::try_from(tensor).unwrap_err();
    assert_eq!(
        error,
        Error::NdimMismatch {
            found: 1,
            expected: 3
        }
    );
    Ok(())
}

/// Host memory that claims to be CUDA device memory: a stand-in for a device crate's buffer.
struct FakeCuda(Vec<f32>);

// SAFETY: not entirely: the memory is host memory, claimed as `cuda:0`. Nothing in these tests
// reads or writes it through a tensor (host views and copies refuse CUDA memory before touching
// it, and no device runtime is involved), so the false claim is never acted upon; everything
// else holds as for the Vec inside.
unsafe impl Buffer for FakeCuda {
    type Elem = f32;
    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.0.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn device(&self) -> Device {
        Device::cuda(0)
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        Err(Error::NotHostAccessible {
            device: tensor.device(),
        })
    }
}

/// A struct holding a (fake) device buffer derives the same way.
#[derive(DLPack)]
struct OnDevice {
    #[dlpack(data)]
    data: FakeCuda,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[test]
fn a_tensor_on_a_device_the_host_cannot_read_is_refused_by_a_host_buffer() -> Result<(), Error> {
    let tensor = ManagedTensor::export(OnDevice {
        data: FakeCuda(vec![1.0; 3]),
        shape: [3],
    })?;
    assert_eq!(tensor.device(), Device::cuda(0));
    let error = Tensor::<f32>::try_from(tensor).unwrap_err();
    assert_eq!(
        error,
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    Ok(())
}

#[test]
fn a_device_buffer_decides_which_tensors_it_copies_from() -> Result<(), Error> {
    let tensor = ManagedTensor::export(vec![1.0f32; 3])?;
    let error = OnDevice::try_from(tensor).err();
    assert_eq!(
        error,
        Some(Error::NotHostAccessible {
            device: Device::CPU
        })
    );
    Ok(())
}

#[test]
fn a_shape_that_does_not_fit_the_buffer_is_refused_at_export() {
    let too_big = Matrix {
        values: vec![0.0; 6],
        dims: [3, 3],
    };
    let error = ManagedTensor::export(too_big).unwrap_err().error;
    assert!(
        matches!(error, Error::SpanOutsideAllocation { .. }),
        "{error:?}"
    );
}

#[test]
fn strides_or_a_byte_offset_reaching_past_the_buffer_are_refused_at_export() {
    let strided = |strides: Vec<isize>, offset: usize| Strided {
        values: vec![0; 6].into_boxed_slice(),
        shape: vec![2, 3],
        strides,
        offset,
        device: Device::CPU,
        name: String::new(),
    };
    for (strides, offset) in [(vec![3, 2], 0), (vec![-3, 1], 0), (vec![3, 1], 4)] {
        let error = ManagedTensor::export(strided(strides.clone(), offset))
            .unwrap_err()
            .error;
        assert!(
            matches!(error, Error::SpanOutsideAllocation { .. }),
            "strides {strides:?}, offset {offset}: {error:?}"
        );
    }
    let huge_offset = ManagedTensor::export(strided(vec![3, 1], usize::MAX))
        .unwrap_err()
        .error;
    assert!(
        matches!(
            huge_offset,
            Error::SpanOutsideAllocation { .. } | Error::Overflow { .. }
        ),
        "{huge_offset:?}"
    );
}

#[test]
fn strides_of_another_length_than_the_shape_are_refused_at_export() {
    let value = Strided {
        values: vec![0; 6].into_boxed_slice(),
        shape: vec![2, 3],
        strides: vec![1],
        offset: 0,
        device: Device::CPU,
        name: String::new(),
    };
    let error = ManagedTensor::export(value).unwrap_err().error;
    assert!(
        matches!(
            error,
            Error::NdimMismatch {
                found: 1,
                expected: 2
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_generic_struct_works_for_every_element_type() -> Result<(), Error> {
    fn round_trip<T: Element + PartialEq + core::fmt::Debug>(values: Vec<T>) -> Result<(), Error> {
        let t = Tensor {
            shape: vec![values.len()],
            data: values.clone(),
        };
        let address = t.data.as_ptr();
        let tensor = ManagedTensor::export(t)?;
        assert_eq!(tensor.dtype(), T::DTYPE);
        let back = Tensor::<T>::try_from(tensor)?;
        assert_eq!(back.data.as_ptr(), address);
        assert_eq!(back.data, values);
        Ok(())
    }
    round_trip(vec![true, false])?;
    round_trip(vec![1u8, 2])?;
    round_trip(vec![-1i16, 2])?;
    round_trip(vec![1u64 << 40])?;
    round_trip(vec![0.5f64, -0.5])
}

#[test]
fn a_struct_of_another_element_type_is_not_reclaimed_but_refused() -> Result<(), Error> {
    let tensor = ManagedTensor::export(Tensor {
        data: vec![1u32, 2],
        shape: vec![2],
    })?;
    let error = Tensor::<i32>::try_from(tensor).unwrap_err();
    assert_eq!(
        error,
        Error::DataTypeMismatch {
            found: DataType::U32,
            expected: DataType::I32
        }
    );
    Ok(())
}

#[test]
fn a_const_generic_shape_exports_and_imports() -> Result<(), Error> {
    let cube = Fixed {
        data: (0..8).collect::<Vec<i64>>(),
        shape: [2, 2, 2],
    };
    let address = cube.data.as_ptr();
    let tensor = ManagedTensor::export(cube)?;
    assert_eq!(tensor.shape(), &[2, 2, 2]);
    assert_eq!(tensor.strides(), &[4, 2, 1]);
    let back = Fixed::<i64, 3>::try_from(tensor)?;
    assert_eq!(back.data.as_ptr(), address);

    // Another instantiation is another type: the copy path, with the ndim checked.
    let flat = ManagedTensor::export(Fixed {
        data: (0..8).collect::<Vec<i64>>(),
        shape: [8],
    })?;
    let error = Fixed::<i64, 3>::try_from(flat).unwrap_err();
    assert_eq!(
        error,
        Error::NdimMismatch {
            found: 1,
            expected: 3
        }
    );
    let cube = ManagedTensor::export(Tensor {
        data: (0..8).collect::<Vec<i64>>(),
        shape: vec![2, 1, 4],
    })?;
    let copied = Fixed::<i64, 3>::try_from(cube)?;
    assert_ne!(copied.data.as_ptr(), address);
    assert_eq!((copied.shape, copied.data), ([2, 1, 4], (0..8).collect()));
    Ok(())
}

#[test]
fn negative_strides_are_copied_in_row_major_order() -> Result<(), Error> {
    // Rows stored bottom-up: the first row starts 3 elements (12 bytes) in, the second at 0.
    let tensor = ManagedTensor::export(Strided {
        values: vec![0, 1, 2, 3, 4, 5].into_boxed_slice(),
        shape: vec![2, 3],
        strides: vec![-3, 1],
        offset: 12,
        device: Device::CPU,
        name: String::new(),
    })?;
    let m = Tensor::<i32>::try_from(tensor)?;
    assert_eq!(m.data, [3, 4, 5, 0, 1, 2]);
    assert_eq!(m.shape, [2, 3]);
    Ok(())
}

#[test]
fn a_tuple_struct_with_attributes_round_trips() -> Result<(), Error> {
    let shared: Arc<[u8]> = Arc::from(&[1u8, 2, 3][..]);
    let address = shared.as_ptr();
    let tensor = ManagedTensor::export(Pair(shared, [3]))?;
    assert!(
        tensor.is_read_only(),
        "an Arc'd buffer is shared, so read-only"
    );
    let Pair(back, shape) = Pair::try_from(tensor)?;
    assert_eq!((back.as_ptr(), shape), (address, [3]));
    Ok(())
}

#[test]
fn the_read_only_attribute_makes_the_tensor_read_only() -> Result<(), Error> {
    let mut tensor = ManagedTensor::export(Frozen {
        data: vec![1.0, 2.0],
        shape: [2],
    })?;
    assert!(tensor.is_read_only());
    assert_eq!(tensor.view_mut::<f64>().unwrap_err(), Error::ReadOnly);
    assert_eq!(tensor.view::<f64>()?.to_vec().unwrap(), [1.0, 2.0]);
    // Nor does it hand its Vec to a consumer that would own (and may write) it.
    let tensor = tensor.into_vec::<f64>().unwrap_err();
    assert!(Frozen::try_from(tensor).is_ok());
    Ok(())
}

#[test]
fn into_vec_takes_the_buffer_of_a_struct_whose_tensor_is_the_whole_buffer() -> Result<(), Error> {
    let m = Matrix {
        values: vec![1.0; 6],
        dims: [3, 2],
    };
    let address = m.values.as_ptr();
    let v: Vec<f32> = ManagedTensor::export(m)?
        .into_vec()
        .expect("the whole Vec, row-major");
    assert_eq!(v.as_ptr(), address);
    assert_eq!(v.len(), 6);

    let row_major = Strided {
        values: vec![0, 1, 2, 3].into_boxed_slice(),
        shape: vec![2, 2],
        strides: vec![2, 1],
        offset: 0,
        device: Device::CPU,
        name: String::new(),
    };
    let address = row_major.values.as_ptr();
    let v: Vec<i32> = ManagedTensor::export(row_major)?
        .into_vec()
        .expect("row-major from the first element");
    assert_eq!((v.as_ptr(), v), (address, vec![0, 1, 2, 3]));
    Ok(())
}

#[test]
fn into_vec_leaves_a_struct_whose_tensor_is_part_of_its_buffer() -> Result<(), Error> {
    let part = Matrix {
        values: vec![1.0; 6],
        dims: [2, 2],
    };
    let tensor = ManagedTensor::export(part)?;
    let tensor = tensor.into_vec::<f32>().unwrap_err();
    assert_eq!(tensor.view::<f32>()?.to_vec().unwrap(), [1.0; 4]);

    let offset = Strided {
        values: vec![9, 0, 1, 2, 3].into_boxed_slice(),
        shape: vec![2, 2],
        strides: vec![2, 1],
        offset: 4,
        device: Device::CPU,
        name: String::new(),
    };
    let tensor = ManagedTensor::export(offset)?
        .into_vec::<i32>()
        .unwrap_err();
    assert_eq!(tensor.view::<i32>()?.to_vec().unwrap(), [0, 1, 2, 3]);
    let back = Strided::try_from(tensor)?;
    assert_eq!(
        &*back.values,
        &[9, 0, 1, 2, 3],
        "still all there, reclaimed"
    );

    // A boxed buffer declined after its sizes or strides were looked at: deciding must not
    // touch the elements (a `&mut` to a `Box<[T]>`'s slice would invalidate the tensor's data
    // pointer, which Miri checks below by reading through it).
    for (values, strides) in [
        (vec![0, 1, 2, 3, 4], vec![2, 1]), // a part of the buffer
        (vec![0, 1, 2, 3], vec![1, 2]),    // the whole buffer, transposed
    ] {
        let declined = Strided {
            values: values.into_boxed_slice(),
            shape: vec![2, 2],
            strides,
            offset: 0,
            device: Device::CPU,
            name: String::new(),
        };
        let transposed = declined.strides[0] == 1;
        let tensor = ManagedTensor::export(declined)?
            .into_vec::<i32>()
            .unwrap_err();
        let expected = if transposed {
            [0, 2, 1, 3]
        } else {
            [0, 1, 2, 3]
        };
        assert_eq!(tensor.view::<i32>()?.to_vec().unwrap(), expected);
    }
    Ok(())
}

#[test]
fn a_refused_import_deletes_the_tensor_exactly_once() -> Result<(), Error> {
    let (value, drops) = counted(vec![1.0, 2.0]);
    let tensor = ManagedTensor::export(value)?;
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    let error = Tensor::<u8>::try_from(tensor).unwrap_err();
    assert!(matches!(error, Error::DataTypeMismatch { .. }));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn a_copying_import_deletes_the_source_tensor_exactly_once() -> Result<(), Error> {
    let (value, drops) = counted(vec![1.0, 2.0]);
    let copy = Tensor::<f32>::try_from(ManagedTensor::export(value)?)?;
    assert_eq!(copy.data, [1.0, 2.0]);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn reclaiming_gives_the_struct_back_without_dropping_it() -> Result<(), Error> {
    let (value, drops) = counted(vec![1.0]);
    let back = ManagedTensor::export(value)?
        .reclaim::<Counted>()
        .expect("exported from a Counted");
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    Ok(())
}

/// Host memory claimed as pinned (`cuda_host`) memory: the host may read it either way.
struct Pinned(Vec<f32>);

// SAFETY: not entirely: ordinary host memory stands in for pinned memory, which the host reads
// and writes the same way; nothing here hands it to a CUDA runtime. The rest holds as for the
// Vec inside.
unsafe impl Buffer for Pinned {
    type Elem = f32;
    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.0.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn device(&self) -> Device {
        Device::new(DeviceType::CUDA_HOST, 0)
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        tensor.to_vec().map(Pinned)
    }
}

/// The device field can name the ordinal; the device type is the buffer's.
#[derive(DLPack)]
struct PinnedTensor {
    #[dlpack(data)]
    data: Pinned,
    #[dlpack(shape)]
    shape: [usize; 1],
    #[dlpack(device)]
    device: Device,
}

/// A constant device for every tensor of the type.
#[derive(DLPack)]
#[dlpack(device = Device::new(DeviceType::CUDA_HOST, 2))]
struct PinnedOnTwo {
    #[dlpack(data)]
    data: Pinned,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[test]
fn a_device_field_of_the_buffers_device_type_names_the_exported_device() -> Result<(), Error> {
    let on_one = Device::new(DeviceType::CUDA_HOST, 1);
    let tensor = ManagedTensor::export(PinnedTensor {
        data: Pinned(vec![1.0, 2.0]),
        shape: [2],
        device: on_one,
    })?;
    assert_eq!(tensor.device(), on_one);
    let tensor = ManagedTensor::export(PinnedOnTwo {
        data: Pinned(vec![1.0, 2.0]),
        shape: [2],
    })?;
    assert_eq!(tensor.device(), Device::new(DeviceType::CUDA_HOST, 2));
    // A copy keeps the tensor's ordinal when the device type matches the new buffer's.
    let copied = PinnedTensor::try_from(tensor)?;
    assert_eq!(copied.device, Device::new(DeviceType::CUDA_HOST, 2));
    assert_eq!(copied.data.0, [1.0, 2.0]);
    Ok(())
}

#[test]
fn a_device_field_naming_another_device_type_than_the_buffers_is_refused_at_export() {
    let lie = PinnedTensor {
        data: Pinned(vec![1.0, 2.0]),
        shape: [2],
        device: Device::cuda(0),
    };
    let error = ManagedTensor::export(lie).unwrap_err().error;
    assert!(matches!(error, Error::DeviceMismatch { .. }), "{error:?}");
}

#[test]
fn a_copy_into_a_struct_with_a_device_field_records_where_the_copy_lives() -> Result<(), Error> {
    let tensor = ManagedTensor::export(vec![3.0f32])?;
    let copied = PinnedTensor::try_from(tensor)?;
    assert_eq!(copied.device, Device::new(DeviceType::CUDA_HOST, 0));
    Ok(())
}

#[test]
fn a_legacy_tensor_imports_too() -> Result<(), Error> {
    let m = Matrix {
        values: vec![1.0, 2.0],
        dims: [1, 2],
    };
    let address = m.values.as_ptr();
    let raw = ManagedTensor::export_legacy(m)?.into_raw_legacy()?;
    // SAFETY: `raw` was just exported and is owned by us.
    let tensor = unsafe { ManagedTensor::from_raw_legacy(raw)? };
    let back = Matrix::try_from(tensor)?;
    assert_eq!(back.values.as_ptr(), address);
    Ok(())
}

#[test]
fn an_empty_tensor_round_trips() -> Result<(), Error> {
    let empty = Tensor::<f32> {
        data: Vec::new(),
        shape: vec![0, 4],
    };
    let tensor = ManagedTensor::export(empty)?;
    assert_eq!(tensor.len(), 0);
    let copied = Matrix::try_from(tensor)?;
    assert_eq!(
        copied,
        Matrix {
            values: vec![],
            dims: [0, 4]
        }
    );
    Ok(())
}

#[test]
fn a_shape_and_strides_of_one_generic_type_round_trip() -> Result<(), Error> {
    let transposed = SameDims {
        data: vec![0u8, 1, 2, 3, 4, 5],
        shape: [3usize, 2],
        strides: [1usize, 3],
    };
    let tensor = ManagedTensor::export(transposed)?;
    assert_eq!(tensor.view::<u8>()?.to_vec().unwrap(), [0, 3, 1, 4, 2, 5]);
    let back = SameDims::<u8, [usize; 2]>::try_from(tensor)?;
    assert_eq!((back.shape, back.strides), ([3, 2], [1, 3]));
    Ok(())
}
