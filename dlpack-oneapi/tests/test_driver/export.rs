//! Export and import: USM buffers as DLPack tensors, views of host-readable USM, reclaiming an
//! export, a derived struct with a USM field, empty buffers.

use dlpack_core::{DLPack, Device, Error, Flags, ManagedTensor, MemoryKind};
use dlpack_oneapi::{UsmBuffer, UsmKind};

use crate::Fixture;
use crate::helpers::{context, f32s, root};

pub(crate) fn device_usm_exports_as_oneapi_with_its_root_device_number(fx: &Fixture) {
    let ctx = context(fx);
    for i in 0..2 {
        let data = f32s(5);
        let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, i), UsmKind::Device, &data).unwrap();
        let address = buffer.as_ptr();
        assert_eq!(buffer.dlpack_device(), Device::oneapi(i as i32));
        assert_eq!(
            buffer.as_slice(),
            None,
            "device USM is not host-readable in place"
        );
        let tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(tensor.device(), Device::oneapi(i as i32));
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[5i64][..], &[1i64][..])
        );
        assert_eq!(tensor.data_ptr().cast_const().cast(), address);
        assert!(!tensor.is_host_accessible());
        assert_eq!(tensor.to_host_vec::<f32>(&ctx.hooks()).unwrap(), data);
        let live = fx.support.live();
        drop(tensor);
        assert_eq!(
            fx.support.live().allocations,
            live.allocations - 1,
            "deleting the tensor frees the USM"
        );
    }
}

pub(crate) fn shared_and_host_usm_import_as_views_of_the_same_memory(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    for (kind, memory, device) in [
        (UsmKind::Shared, MemoryKind::Managed, 1),
        (UsmKind::Host, MemoryKind::HostPinned, 0),
    ] {
        let data = f32s(6);
        let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, device), kind, &data).unwrap();
        assert_eq!(buffer.as_slice(), Some(&data[..]));
        let address = buffer.as_ptr();
        let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
        // SAFETY: a live tensor we own.
        let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        assert!(
            tensor.view::<f32>().is_err(),
            "{kind}: unverified oneAPI memory is not viewed"
        );
        let info = tensor.verify_device(&hooks).unwrap().unwrap();
        assert_eq!(info.kind, memory, "{kind}");
        assert_eq!(info.device, Device::oneapi(device as i32), "{kind}");
        let view = tensor.view::<f32>().unwrap();
        assert_eq!(view.as_ptr(), address, "{kind}: zero copy");
        assert_eq!(view.to_vec().unwrap(), data, "{kind}");
    }
}

pub(crate) fn an_exported_usm_buffer_is_reclaimed_without_a_copy(fx: &Fixture) {
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &f32s(3)).unwrap();
    let address = buffer.as_ptr();
    let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
    // SAFETY: a live tensor we own.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back: UsmBuffer<f32> = tensor.reclaim().unwrap();
    assert_eq!(back.as_ptr(), address);
    assert_eq!(back.to_vec().unwrap(), f32s(3));
    // A tensor that is not a UsmBuffer cannot be turned into one without a context.
    let cpu = ManagedTensor::export(vec![1.0f32]).unwrap();
    let err = <UsmBuffer<f32> as dlpack_core::Buffer>::copy_from_tensor(&cpu).unwrap_err();
    assert!(
        err.to_string().contains("UsmBuffer::from_tensor(&context"),
        "{err}"
    );
}

/// A user's struct with a USM data field: one derive makes it a DLPack producer and consumer.
#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    data: UsmBuffer<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

pub(crate) fn a_struct_with_a_usm_field_exports_any_layout_inside_it(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let data = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(6)).unwrap();
    let mut tensor = ManagedTensor::export(Matrix {
        data,
        shape: [2, 3],
    })
    .unwrap();
    assert_eq!(tensor.device(), Device::oneapi(1));
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2i64, 3][..], &[3i64, 1][..])
    );
    assert_eq!(tensor.flags(), Flags::empty());
    tensor.verify_device(&hooks).unwrap();
    assert_eq!(tensor.to_host_vec::<f32>(&hooks).unwrap(), f32s(6));
    let address = tensor.data_ptr();
    let matrix = Matrix::try_from(tensor).unwrap(); // its own export: reclaimed, no copy
    assert_eq!(matrix.shape, [2, 3]);
    assert_eq!(
        matrix.data.as_ptr().cast::<core::ffi::c_void>(),
        address.cast_const()
    );
    // A shape that does not fit the buffer is refused by the export, and the buffer freed.
    let data = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(6)).unwrap();
    let err = ManagedTensor::export(Matrix {
        data,
        shape: [3, 3],
    })
    .unwrap_err()
    .error;
    assert!(matches!(err, Error::SpanOutsideAllocation { .. }), "{err}");
}

pub(crate) fn empty_buffers_export_without_allocating(fx: &Fixture) {
    let ctx = context(fx);
    let live = fx.support.live();
    for kind in [UsmKind::Device, UsmKind::Shared, UsmKind::Host] {
        let buffer = UsmBuffer::<f64>::from_slice(&ctx, &root(&ctx, 0), kind, &[]).unwrap();
        assert!(buffer.is_empty());
        assert_eq!(fx.support.live().allocations, live.allocations, "{kind}");
        let mut tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(
            (tensor.shape(), tensor.device()),
            (&[0i64][..], Device::oneapi(0))
        );
        assert_eq!(tensor.verify_device(&ctx.hooks()), Ok(None));
        assert_eq!(
            tensor.to_host_vec::<f64>(&ctx.hooks()).unwrap(),
            Vec::<f64>::new()
        );
    }
}
