//! Pointer -> device: which device and allocation an address belongs to, and the claims that are
//! refused (another device, another context, host memory, a span past the allocation).

use dlpack_core::{DataType, Device, DeviceHooks, Error, ManagedTensor, MemoryKind};
use dlpack_oneapi::{UsmBuffer, UsmKind};

use crate::Fixture;
use crate::driver_wide;
use crate::helpers::{context, f32s, foreign, root, with_foreign};

pub(crate) fn pointers_resolve_to_their_owning_device_on_two_devices(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let on0 = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 16).unwrap();
    let on1 = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 1), UsmKind::Device, 16).unwrap();
    for (buffer, id) in [(&on0, 0), (&on1, 1)] {
        let start = buffer.as_ptr().addr();
        for offset in [0, 4, 63] {
            let info = hooks.resolve(Device::oneapi(id), start + offset).unwrap();
            assert_eq!(info.device, Device::oneapi(id));
            assert_eq!(info.kind, MemoryKind::Device);
            assert_eq!(info.allocation, Some(start..start + 64));
        }
        let allocation = ctx.allocation_of(start + 8).unwrap().unwrap();
        assert_eq!(allocation.kind, UsmKind::Device);
        assert_eq!(allocation.device.as_ref(), Some(&root(&ctx, id as usize)));
    }
    // One past the end belongs to no allocation (the driver allocates exactly 64 bytes, aligned
    // to 256, so the next byte is not USM).
    let past = on0.as_ptr().addr() + 64;
    assert_eq!(
        hooks.resolve(Device::oneapi(0), past),
        Err(Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address: past
        })
    );
}

pub(crate) fn a_tensor_claiming_the_wrong_device_is_refused(fx: &Fixture) {
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(4)).unwrap();
    for (claimed, expected) in [
        (
            Device::oneapi(0),
            Error::DeviceMismatch {
                claimed: Device::oneapi(0),
                actual: Device::oneapi(1),
            },
        ),
        (
            Device::oneapi(7),
            Error::DeviceMismatch {
                claimed: Device::oneapi(7),
                actual: Device::oneapi(1),
            },
        ),
    ] {
        let raw = foreign(
            buffer.as_ptr().cast(),
            claimed,
            DataType::F32,
            &[4],
            &[1],
            0,
        );
        with_foreign(raw, |mut t| {
            assert_eq!(t.verify_device(&ctx.hooks()), Err(expected.clone()));
        });
    }
    // Copies need no verified claim, so they check it too: device 1's memory claimed as device
    // 0's is not copied by device 0's command list (it would reach it only with peer access).
    let hooks = ctx.hooks();
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(0),
        DataType::F32,
        &[4],
        &[1],
        0,
    );
    let mismatch = Error::DeviceMismatch {
        claimed: Device::oneapi(0),
        actual: Device::oneapi(1),
    };
    with_foreign(raw, |t| {
        assert_eq!(t.to_host_vec::<f32>(&hooks), Err(mismatch.clone()));
        let span = t.byte_span();
        // SAFETY: the span is live USM that nothing else uses during the call; the hook
        // refuses before copying anything.
        let written = unsafe { hooks.copy_from_host(Device::oneapi(0), &[0u8; 16], span.start) };
        assert_eq!(written, Err(mismatch.clone()));
    });
    assert_eq!(buffer.to_vec().unwrap(), f32s(4), "nothing was written");
}

pub(crate) fn sub_device_memory_exports_and_resolves_as_its_root_device(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let sub = root(&ctx, 1).sub_devices().unwrap()[1].clone();
    assert_eq!(ctx.root_device(&sub).unwrap(), root(&ctx, 1));
    assert_eq!(ctx.dlpack_device(&sub).unwrap(), Device::oneapi(1));
    for kind in [UsmKind::Device, UsmKind::Shared] {
        let buffer = UsmBuffer::from_slice(&ctx, &sub, kind, &[1u8, 2, 3]).unwrap();
        assert_eq!(buffer.dlpack_device(), Device::oneapi(1));
        // The driver reports the sub-device as the owner; the hook maps it to its root.
        let allocation = ctx.allocation_of(buffer.as_ptr().addr()).unwrap().unwrap();
        assert_eq!(allocation.device.as_ref(), Some(&sub));
        let mut tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(tensor.device(), Device::oneapi(1));
        let info = tensor.verify_device(&hooks).unwrap().unwrap();
        assert_eq!(info.device, Device::oneapi(1));
        assert_eq!(tensor.to_host_vec::<u8>(&hooks).unwrap(), [1, 2, 3]);
    }
}

pub(crate) fn a_pointer_from_another_context_is_refused_as_unknown(fx: &Fixture) {
    let producer = context(fx);
    let consumer = context(fx);
    let buffer =
        UsmBuffer::from_slice(&producer, &root(&producer, 0), UsmKind::Device, &f32s(4)).unwrap();
    let address = buffer.as_ptr().addr();
    if driver_wide() {
        // Intel's reading: every context of the driver knows the allocation, and the import
        // checks out in the consumer's context, values included.
        assert!(consumer.allocation_of(address).unwrap().is_some());
        let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
        // SAFETY: a live tensor we own.
        let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        let hooks = consumer.hooks();
        tensor.verify_device(&hooks).unwrap();
        assert_eq!(tensor.to_host_vec::<f32>(&hooks).unwrap(), f32s(4));
        return;
    }
    assert_eq!(consumer.allocation_of(address).unwrap(), None);
    let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
    // SAFETY: a live tensor we own.
    let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let err = tensor.verify_device(&consumer.hooks()).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address
        }
    );
    assert!(err.to_string().contains("or in another context"), "{err}");
    // The producer's context knows it.
    assert!(tensor.verify_device(&producer.hooks()).is_ok());
}

pub(crate) fn host_memory_claimed_as_oneapi_is_refused_as_unknown(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(4);
    let raw = foreign(
        data.as_ptr().cast(),
        Device::oneapi(0),
        DataType::F32,
        &[4],
        &[1],
        0,
    );
    with_foreign(raw, |mut t| {
        assert_eq!(
            t.verify_device(&ctx.hooks()),
            Err(Error::UnknownPointer {
                claimed: Device::oneapi(0),
                address: data.as_ptr().addr()
            })
        );
        assert!(t.view::<f32>().is_err());
    });
}

pub(crate) fn a_tensor_reaching_past_its_allocation_is_refused(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Shared, &f32s(8)).unwrap();
    let start = buffer.as_ptr().addr();
    let p = buffer.as_ptr().cast();
    let d = Device::oneapi(0);
    // Inside: every other element, from element 1.
    with_foreign(foreign(p, d, DataType::F32, &[4], &[2], 4), |mut t| {
        t.verify_device(&hooks).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 3.0, 5.0, 7.0]);
    });
    // 16 elements over an 8-element allocation; and 8 elements from element 1.
    for (shape, offset, end) in [(16, 0, start + 64), (8, 4, start + 36)] {
        with_foreign(
            foreign(p, d, DataType::F32, &[shape], &[1], offset),
            |mut t| {
                assert_eq!(
                    t.verify_device(&hooks),
                    Err(Error::SpanOutsideAllocation {
                        start: start + offset as usize,
                        end,
                        alloc_start: start,
                        alloc_end: start + 32
                    })
                );
            },
        );
    }
}
