//! Copies between device memory and the host: strided tensors in row-major order, host data
//! into device memory, and memory of another context.

use dlpack_core::{DataType, Device, DeviceHooks, Error, ManagedTensor};
use dlpack_oneapi::{UsmBuffer, UsmKind};

use crate::Fixture;
use crate::driver_wide;
use crate::helpers::{context, f32s, foreign, root, with_foreign};

pub(crate) fn strided_device_tensors_are_copied_to_the_host_in_row_major_order(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(12)).unwrap();
    // A 3x2 view: rows 4 elements apart, every other column, from element 1.
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(1),
        DataType::F32,
        &[3, 2],
        &[4, 2],
        4,
    );
    with_foreign(raw, |mut t| {
        t.verify_device(&hooks).unwrap();
        assert!(
            t.view::<f32>().is_err(),
            "device memory is not viewed in place"
        );
        assert_eq!(
            t.to_host_vec::<f32>(&hooks).unwrap(),
            [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
        );
    });
    // The same data, transposed, into new device memory.
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(1),
        DataType::F32,
        &[2, 2],
        &[1, 4],
        0,
    );
    with_foreign(raw, |mut t| {
        t.verify_device(&hooks).unwrap();
        let copy =
            UsmBuffer::<f32>::from_tensor(&ctx, &root(&ctx, 0), UsmKind::Device, &t).unwrap();
        assert_eq!(copy.to_vec().unwrap(), [0.0, 4.0, 1.0, 5.0]);
        assert_eq!(copy.dlpack_device(), Device::oneapi(0));
    });
}

pub(crate) fn host_data_is_copied_into_device_memory(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let mut buffer = UsmBuffer::<u16>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 4).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [0; 4]);
    buffer.copy_from_host(&[9, 8, 7, 6]).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [9, 8, 7, 6]);
    assert_eq!(
        buffer.copy_from_host(&[1, 2]),
        Err(Error::ShapeMismatch {
            found: vec![2],
            expected: vec![4]
        })
    );
    // Through the hook, into the middle of the allocation.
    // SAFETY: bytes 2..6 of a live 8-byte device allocation that nothing else accesses.
    unsafe {
        hooks
            .copy_from_host(Device::oneapi(0), &[1, 0, 2, 0], buffer.as_ptr().addr() + 2)
            .unwrap()
    };
    assert_eq!(buffer.to_vec().unwrap(), [9, 1, 2, 6]);
    // A CPU tensor (any producer) into device memory.
    let cpu = ManagedTensor::export(vec![5u16, 4, 3]).unwrap();
    let copy = UsmBuffer::<u16>::from_tensor(&ctx, &root(&ctx, 1), UsmKind::Device, &cpu).unwrap();
    assert_eq!(copy.to_vec().unwrap(), [5, 4, 3]);
}

pub(crate) fn copies_from_memory_of_another_context_are_refused(fx: &Fixture) {
    let producer = context(fx);
    let consumer = context(fx);
    let buffer =
        UsmBuffer::from_slice(&producer, &root(&producer, 0), UsmKind::Device, &[1u8; 8]).unwrap();
    let mut out = [0u8; 8];
    // SAFETY: the source is a live 8-byte allocation nobody writes meanwhile.
    let r = unsafe {
        consumer
            .hooks()
            .copy_to_host(Device::oneapi(0), buffer.as_ptr().addr(), &mut out)
    };
    if driver_wide() {
        // Intel's reading: the consumer's context resolves and copies it.
        assert_eq!((r, out), (Ok(()), [1; 8]));
        return;
    }
    assert_eq!(
        r,
        Err(Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address: buffer.as_ptr().addr()
        })
    );
    assert_eq!(out, [0; 8], "nothing was copied");
}
