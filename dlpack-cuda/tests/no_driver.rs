//! The real driver-loading path. On a machine without libcuda (this crate's CI) every entry
//! point must return the documented error value, never panic; with a driver they must work or
//! fail with a CUDA driver error (a machine with libcuda but no GPU).

use dlpack_core::{Buffer, Error, ManagedTensor};
use dlpack_cuda::{CudaBuffer, CudaHooks, ManagedBuffer, PinnedBuffer, load_driver, open_device};

/// Every entry point that loads the driver, by name.
fn entry_points() -> Vec<(&'static str, Result<(), Error>)> {
    let host = ManagedTensor::export(vec![1.0f32, 2.0]).expect("a host tensor");
    vec![
        ("load_driver", load_driver()),
        ("open_device", open_device(0).map(drop)),
        (
            "CudaHooks::on_default_streams",
            CudaHooks::on_default_streams().map(drop),
        ),
        (
            "CudaBuffer::copy_from_tensor",
            CudaBuffer::<f32>::copy_from_tensor(&host).map(drop),
        ),
        (
            "PinnedBuffer::copy_from_tensor",
            PinnedBuffer::<f32>::copy_from_tensor(&host).map(drop),
        ),
        (
            "ManagedBuffer::copy_from_tensor",
            ManagedBuffer::<f32>::copy_from_tensor(&host).map(drop),
        ),
    ]
}

#[test]
#[cfg_attr(miri, ignore = "opens libcuda with dlopen, which Miri cannot run")]
fn without_libcuda_every_entry_point_returns_the_documented_error() {
    // SAFETY: only tries to open libcuda (running the NVIDIA driver's initialisers if it is
    // there, which any process may) and closes it again.
    let present = unsafe { dlpack_cuda::cudarc::driver::sys::is_culib_present() };
    println!("libcuda present: {present}");
    for (name, result) in entry_points() {
        match result {
            Err(Error::Runtime { runtime, message }) => {
                assert_eq!(runtime, "CUDA driver", "{name}");
                if !present {
                    assert!(
                        message.starts_with("libcuda could not be loaded (searched ")
                            && message.contains("libcuda.so.1")
                            && message.contains("expected an NVIDIA driver"),
                        "{name}: {message}"
                    );
                }
            }
            Err(other) => {
                panic!("{name}: expected Error::Runtime from the CUDA driver, got {other:?}")
            }
            Ok(()) => assert!(present, "{name} succeeded without libcuda"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "opens libcuda with dlopen, which Miri cannot run")]
fn the_loading_outcome_is_the_same_every_time() {
    let first = load_driver();
    for _ in 0..3 {
        assert_eq!(load_driver(), first);
    }
}
