//! The driver, its devices and contexts: the loader's view, adopting another runtime's context,
//! device numbering tables, buffers keeping their context alive, and the driver's refusal to
//! destroy a context that still has allocations.

use dlpack_core::{DataType, Device, DeviceHooks, Error, ManagedTensor, MemoryKind};
use dlpack_oneapi::{Context, DeviceNumbering, UsmBuffer, UsmKind, sys};

use crate::Fixture;
use crate::common::LiveObjects;
use crate::driver_wide;
use crate::helpers::{context, f32s, foreign, root, with_foreign};

pub(crate) fn the_loader_lists_one_driver_with_two_root_devices_and_their_sub_devices(
    fx: &Fixture,
) {
    assert_eq!(fx.driver.api_version().unwrap(), (1, 4));
    let devices = fx.driver.devices().unwrap();
    assert_eq!(devices.len(), 2);
    for (i, d) in devices.iter().enumerate() {
        let p = d.properties().unwrap();
        assert_eq!(
            p.name,
            format!("dlpack-oneapi test driver device {i} (host memory)")
        );
        assert_eq!(p.device_type, sys::ZE_DEVICE_TYPE_GPU);
        assert_eq!(p.sub_device_id, None);
        let subs = d.sub_devices().unwrap();
        assert_eq!(subs.len(), 2);
        for (s, sub) in subs.iter().enumerate() {
            let sp = sub.properties().unwrap();
            assert_eq!(sp.sub_device_id, Some(s as u32));
            assert_ne!(sp.uuid, p.uuid);
        }
    }
    assert_ne!(devices[0], devices[1]);
}

pub(crate) fn an_adopted_context_resolves_its_makers_memory_and_is_left_to_its_maker(fx: &Fixture) {
    // Another runtime (SYCL, say) made a context and allocated device USM in it with raw calls.
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let contexts = fx.support.live().contexts;
    let desc = sys::ze_context_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let device_desc = sys::ze_device_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
        ordinal: 0,
    };
    let devices = fx.driver.devices().unwrap();
    let mut handle = core::ptr::null_mut();
    let mut foreign = core::ptr::null_mut();
    // SAFETY: raw calls with valid descriptors, live handles and out-pointers; both objects are
    // released below.
    unsafe {
        assert_eq!(
            (api.zeContextCreate)(fx.driver.raw(), &desc, &mut handle),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeMemAllocDevice)(handle, &device_desc, 64, 64, devices[1].raw(), &mut foreign),
            sys::ZE_RESULT_SUCCESS
        );
    }
    let driver = ze
        .driver(fx.driver.raw())
        .expect("the driver is found by its handle");
    // SAFETY: `handle` is a context of `driver`, destroyed below after everything made from
    // the adopted context is gone.
    let adopted =
        unsafe { Context::from_raw(&driver, handle, DeviceNumbering::driver_order()) }.unwrap();
    assert_eq!(adopted.raw(), handle);

    // Its maker's memory resolves in it, to the device it was allocated on.
    let allocation = adopted.allocation_of(foreign.addr() + 8).unwrap().unwrap();
    assert_eq!(allocation.kind, UsmKind::Device);
    assert_eq!(allocation.range, foreign.addr()..foreign.addr() + 64);
    let info = adopted
        .hooks()
        .resolve(Device::oneapi(1), foreign.addr())
        .unwrap();
    assert_eq!(
        (info.device, info.kind),
        (Device::oneapi(1), MemoryKind::Device)
    );
    // A context of our own does not know it (except with driver-wide lookups, as Intel's).
    let ours = context(fx).allocation_of(foreign.addr()).unwrap();
    assert_eq!(ours.is_some(), driver_wide(), "{ours:?}");

    // What the adopted context allocates and copies lives in the maker's context.
    let buffer =
        UsmBuffer::from_slice(&adopted, &root(&adopted, 0), UsmKind::Device, &f32s(3)).unwrap();
    let mut kind = sys::ze_memory_allocation_properties_t {
        stype: sys::ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
        pNext: core::ptr::null_mut(),
        r#type: sys::ZE_MEMORY_TYPE_UNKNOWN,
        id: 0,
        pageSize: 0,
    };
    let mut owner = core::ptr::null_mut();
    // SAFETY: live context, a pointer compared only, valid out-pointers.
    let r = unsafe {
        (api.zeMemGetAllocProperties)(handle, buffer.as_ptr().cast(), &mut kind, &mut owner)
    };
    assert_eq!(
        (r, kind.r#type),
        (sys::ZE_RESULT_SUCCESS, sys::ZE_MEMORY_TYPE_DEVICE)
    );
    assert_eq!(buffer.to_vec().unwrap(), f32s(3));
    drop(buffer);

    // Dropping the last user leaves the context to its maker, who destroys it.
    drop(adopted);
    assert_eq!(fx.support.live().contexts, contexts + 1);
    // SAFETY: the maker releases its objects; nothing of ours uses them any more.
    unsafe {
        assert_eq!((api.zeMemFree)(handle, foreign), sys::ZE_RESULT_SUCCESS);
        assert_eq!((api.zeContextDestroy)(handle), sys::ZE_RESULT_SUCCESS);
    }
}

pub(crate) fn adopting_needs_a_driver_of_the_loader_and_a_context_handle(fx: &Fixture) {
    let ze = fx.driver.level_zero();
    let bogus = core::ptr::without_provenance_mut(0x1000);
    let err = ze.driver(bogus).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not a driver of this Level Zero loader"),
        "{err}"
    );
    // SAFETY: a NULL handle is refused before any use.
    let err = unsafe {
        Context::from_raw(
            &fx.driver,
            core::ptr::null_mut(),
            DeviceNumbering::driver_order(),
        )
    }
    .unwrap_err();
    assert_eq!(err, Error::NullPointer { what: "context" });
}

pub(crate) fn a_numbering_table_renumbers_exports_and_claims(fx: &Fixture) {
    let devices = fx.driver.devices().unwrap();
    let table = DeviceNumbering::table([(devices[0].clone(), 3), (devices[1].clone(), 5)]);
    let ctx = Context::with_numbering(&fx.driver, table).unwrap();
    let hooks = ctx.hooks();
    assert_eq!(ctx.dlpack_device(&devices[1]).unwrap(), Device::oneapi(5));
    assert_eq!(ctx.ze_device(Device::oneapi(3)).unwrap(), devices[0]);
    let buffer = UsmBuffer::from_slice(&ctx, &devices[1], UsmKind::Device, &[1i32, 2]).unwrap();
    let address = buffer.as_ptr();
    let mut tensor = ManagedTensor::export(buffer).unwrap();
    assert_eq!(tensor.device(), Device::oneapi(5));
    assert_eq!(
        tensor.verify_device(&hooks).unwrap().unwrap().device,
        Device::oneapi(5)
    );
    // A claim in the default numbering is now wrong.
    let raw = foreign(
        address.cast(),
        Device::oneapi(1),
        DataType::I32,
        &[2],
        &[1],
        0,
    );
    with_foreign(raw, |mut t| {
        assert_eq!(
            t.verify_device(&hooks),
            Err(Error::DeviceMismatch {
                claimed: Device::oneapi(1),
                actual: Device::oneapi(5)
            })
        );
    });
    let err = ctx.ze_device(Device::oneapi(1)).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "no Level Zero device of this context is numbered oneapi:1; its devices are [oneapi:3, oneapi:5]"
        ),
        "{err}"
    );
    // A device left out of the table has no number.
    let partial = Context::with_numbering(
        &fx.driver,
        DeviceNumbering::table([(devices[1].clone(), 0)]),
    )
    .unwrap();
    assert!(UsmBuffer::<u8>::zeroed(&partial, &devices[0], UsmKind::Host, 1).is_err());
    // Sub-devices cannot be numbered.
    let sub = devices[0].sub_devices().unwrap()[0].clone();
    let err = Context::with_numbering(&fx.driver, DeviceNumbering::table([(sub, 0)])).unwrap_err();
    assert!(err.to_string().contains("which is a sub-device"), "{err}");
}

pub(crate) fn buffers_keep_their_context_alive(fx: &Fixture) {
    let contexts = fx.support.live().contexts;
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &[4u64, 5]).unwrap();
    drop(ctx);
    assert_eq!(fx.support.live().contexts, contexts + 1);
    assert_eq!(buffer.to_vec().unwrap(), [4, 5]);
    drop(buffer);
    assert_eq!(
        fx.support.live().contexts,
        contexts,
        "the last user destroys the context"
    );
}

pub(crate) fn the_test_driver_refuses_to_destroy_a_context_that_still_has_allocations(
    fx: &Fixture,
) {
    // What makes the leak check after every case meaningful.
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let desc = sys::ze_context_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let host = sys::ze_host_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let mut ctx = core::ptr::null_mut();
    let mut ptr = core::ptr::null_mut();
    // SAFETY: raw calls with valid descriptors and out-pointers; the context and allocation
    // are released below.
    unsafe {
        assert_eq!(
            (api.zeContextCreate)(fx.driver.raw(), &desc, &mut ctx),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeMemAllocHost)(ctx, &host, 8, 0, &mut ptr),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeContextDestroy)(ctx),
            sys::ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
        );
        assert_eq!((api.zeMemFree)(ctx, ptr), sys::ZE_RESULT_SUCCESS);
        assert_eq!((api.zeContextDestroy)(ctx), sys::ZE_RESULT_SUCCESS);
    }
    let _: LiveObjects = fx.support.live();
}
