//! Producers that count how often they are dropped, and helpers shared by the test files.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use candle_core::{Storage, Tensor};
use dlpack_core::__private::{describe_buffer, give_vec_of_buffer};
use dlpack_core::{DataType, Device, Element, Export, ExportDesc, Flags};

/// A drop counter.
#[derive(Clone, Default)]
pub struct Drops(Arc<AtomicUsize>);

impl Drops {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A `Vec` producer with a shape and strides, that counts its drops and hands its `Vec` over
/// only when `gives` is set (a producer that does not, like a foreign one, is copied).
pub struct Counted<T> {
    pub data: Vec<T>,
    pub shape: Vec<i64>,
    pub strides: Option<Vec<i64>>,
    pub gives: bool,
    pub drops: Drops,
}

impl<T: Element> Counted<T> {
    /// A 1-d producer over all of `data` that gives its `Vec` up.
    pub fn new(data: Vec<T>, drops: &Drops) -> Self {
        Counted {
            shape: vec![data.len() as i64],
            data,
            strides: None,
            gives: true,
            drops: drops.clone(),
        }
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        self.drops.0.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: `describe_buffer` describes memory inside `data` only (export checks the layout against
// the buffer), `ndim` is the length of `shape`, which never changes, and `give_vec` gives the
// whole Vec only when asked for a compact row-major tensor (dlpack-core checks that first).
unsafe impl<T: Element> Export for Counted<T> {
    // The elements live in the Vec's heap buffer, never inline.
    const GIVES_VEC: bool = true;
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        describe_buffer(
            &mut self.data,
            &self.shape,
            self.strides.as_ref(),
            0,
            shape,
            strides,
        )
    }
    fn give_vec(&mut self, slot: &mut dyn std::any::Any) {
        if self.gives {
            give_vec_of_buffer(&mut self.data, slot)
        }
    }
}

/// Host bytes described with any dtype and device (for dtypes no Rust type stands for, and
/// devices the host cannot read).
pub struct Raw {
    pub bytes: Vec<u8>,
    pub shape: Vec<i64>,
    pub dtype: DataType,
    pub device: Device,
    pub drops: Drops,
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.drops.0.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: the tests make `bytes` hold exactly prod(shape) elements of `dtype`, row-major; the
// description names the Vec as its allocation, which export checks the layout against.
unsafe impl Export for Raw {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        let mut step = 1;
        for (s, &d) in strides.iter_mut().zip(&self.shape).rev() {
            *s = step;
            step *= d.max(1);
        }
        let start = self.bytes.as_ptr().addr();
        ExportDesc {
            data: self.bytes.as_mut_ptr().cast(),
            byte_offset: 0,
            dtype: self.dtype,
            device: self.device,
            flags: Flags::empty(),
            allocation: Some(start..start + self.bytes.len()),
        }
    }
}

/// The address of the first element of a candle CPU tensor's storage `Vec`.
pub fn storage_address(t: &Tensor) -> usize {
    let (storage, _) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        panic!("not a CPU tensor")
    };
    use candle_core::CpuStorage as C;
    match cpu {
        C::U8(v) | C::F6E2M3(v) | C::F6E3M2(v) | C::F4(v) | C::F8E8M0(v) => v.as_ptr().addr(),
        C::U32(v) => v.as_ptr().addr(),
        C::I16(v) => v.as_ptr().addr(),
        C::I32(v) => v.as_ptr().addr(),
        C::I64(v) => v.as_ptr().addr(),
        C::BF16(v) => v.as_ptr().addr(),
        C::F16(v) => v.as_ptr().addr(),
        C::F32(v) => v.as_ptr().addr(),
        C::F64(v) => v.as_ptr().addr(),
        C::F8E4M3(v) => v.as_ptr().addr(),
    }
}

/// Lends `t` to DLPack without a copy: `into_dlpack` of a clone.
///
/// The tests that call it keep `into_dlpack`'s promise: none writes to a tensor's storage while
/// a lent export of it (or what is reclaimed from one) lives. Tests that write meanwhile export
/// with `to_dlpack`.
pub fn lend(t: &Tensor) -> Result<dlpack_core::ManagedTensor, dlpack_candle::CandleError> {
    // SAFETY: as above, the calling tests never write to the storage while the export lives.
    Ok(unsafe { dlpack_candle::into_dlpack(t.clone()) }?)
}

/// Runs `f` on another thread and waits up to a minute for it: a deadlock becomes a test
/// failure instead of a hung test run.
pub fn finishes<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not finish within a minute (deadlock?)"))
}
