//! **Test support only**: a stand-in for the NVIDIA driver library (`libcuda.so`) that cudarc's
//! dynamic loading opens like the real one, with host memory standing in for device memory. It
//! is not a device backend and never touches a GPU. It exists so that `dlpack-cuda`'s GPU suite
//! runs, on machines without a GPU, through the code that is otherwise only reached on one:
//! cudarc's loader and safe API, this crate's `CudaDriver`, the real `cuPointerGetAttributes`
//! calling convention, stream-ordered copies and the event handshake.
//!
//! The library's soname is `libcuda.so` (see `build.rs`). A test opens it by its path before the
//! first driver call; cudarc's later `dlopen("libcuda.so")` then finds it already loaded.
//!
//! # What it models, and how faithfully
//!
//! - `DLPACK_CUDA_TEST_DRIVER_DEVICES` devices (default 2, at most 8), each with a primary
//!   context (retained and released with a count) that threads make current. Every call before
//!   `cuInit(0)` fails with `CUDA_ERROR_NOT_INITIALIZED`; allocations, streams and events need a
//!   current context (`CUDA_ERROR_INVALID_CONTEXT`), as on a real driver. The release that
//!   destroys a context while allocations, streams or events of it are alive is refused (the
//!   real driver destroys them with it).
//! - **Device memory the host cannot read.** `cuMemAlloc`/`cuMemAllocAsync` hand out addresses
//!   inside an address range reserved with no access rights, so a host dereference of a device
//!   pointer crashes, as it would on a discrete GPU. The bytes live elsewhere and are only
//!   reached through copies. New memory is filled with `0xA5`, never zeros; device addresses
//!   are never reused, and allocations are 512 bytes apart, so a read past the end or after a
//!   free hits no allocation and is refused. (Freed pinned and managed memory goes back to the
//!   host allocator, which may hand the address out again.)
//! - **Frees in stream order.** `cuMemFreeAsync` frees the bytes when its stream reaches it; a
//!   copy or memset of another stream that reaches them later is refused, the use after free a
//!   real driver would let corrupt reused memory. `cuMemFree` and `cuMemFreeHost` free at once.
//! - Pinned (`cuMemHostAlloc`) and managed (`cuMemAllocManaged`) memory are host memory that the
//!   host reads in place; `cuPointerGetAttributes` reports each kind, its device and its range,
//!   and for a pointer it did not allocate memory type 0 and device ordinal -2, as the real
//!   driver does. With `DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT=1` it answers
//!   `CUDA_ERROR_INVALID_CONTEXT` on a thread without a current context, as some drivers do.
//!   With `DLPACK_CUDA_TEST_DRIVER_HOST_RANGES=0` it answers `CUDA_ERROR_INVALID_VALUE` to a
//!   query that asks pinned memory for its range, which the driver API documents only for
//!   device allocations.
//! - **Streams are asynchronous.** Each stream runs its work in order on a thread of its own, so
//!   a missing synchronisation shows up as wrong data or a failed check rather than passing by
//!   luck. An event's recording is a stream position; `cuStreamWaitEvent` makes a stream wait
//!   for the recording that was the event's latest when it was called, across streams and
//!   devices; `cuLaunchHostFunc` runs a host function in stream order. Copies from pageable
//!   host memory are staged when issued and copies to pageable host memory return when done, as
//!   the driver documents; copies to or from pinned and managed memory happen in stream order.
//! - Every copy and memset must lie inside one live allocation (`CUDA_ERROR_INVALID_VALUE`
//!   otherwise); handles are checked against the live objects (`CUDA_ERROR_INVALID_HANDLE`); a
//!   second free of the same memory is refused, and so is an event recorded on another device's
//!   stream.
//! - Default streams: each device has one legacy default stream (handle 0 or 1), and each thread
//!   a per-thread default stream (handle 2) per device. The legacy stream synchronises as the
//!   driver documents: work queued on it waits for the work queued before on every blocking
//!   stream of its device (per-thread default streams, streams created with flags 0, and those
//!   destroyed with work still queued), and work queued on a blocking stream waits for the
//!   legacy stream's earlier work; non-blocking streams are independent of it. The ordering and
//!   the work are queued together, under the driver's lock, and only for a call that is not
//!   refused. So a host wait on the legacy stream while a blocking
//!   stream is held up waits here too, as on a GPU. (`cuStreamSynchronize` waits for the work
//!   queued on its stream.)
//! - **Kernels, for dlpack-candle's CUDA suite only.** `cuModuleLoadData` reads the `.entry`
//!   names of the PTX it is given and `cuModuleGetFunction` finds only those; the few
//!   candle-kernels kernels that suite reaches run on the host in stream order, inside the
//!   allocations their pointers point into (see `kernels.rs`). cuBLAS and cuRAND handles exist
//!   so that candle can open a device; they compute nothing. That suite preloads this library
//!   (`LD_PRELOAD`) over link stubs that abort on any other function.
//! - Not modelled: the range a memory pool may report for its allocations (see dlpack-cuda's
//!   limits), other kernels, and more than what the functions below do.
//!
//! Every refused call is counted and printed on stderr with its reason. Three extra exports
//! serve the tests: [`dlpack_cuda_test_driver_live`] counts live objects and refusals (leak and
//! double-free checks), [`dlpack_cuda_test_driver_calls`] counts event records, stream waits and
//! context synchronisations (a handshake happened, no device-wide synchronisation did), and
//! [`dlpack_cuda_test_driver_settle`] waits until every stream has run its work.
//!
//! The library exports only the driver functions `dlpack-cuda` needs (its `REQUIRED_SYMBOLS`),
//! the two the GPU suite calls itself (`cuLaunchHostFunc`, `cuEventQuery`) and the module,
//! launch, cuBLAS and cuRAND functions of dlpack-candle's CUDA suite; a unit test of
//! dlpack-cuda keeps the lists equal. When cudarc reaches for any other symbol it panics
//! naming it, which is how a gap in `REQUIRED_SYMBOLS` shows up.

#![allow(non_snake_case)] // the driver API's function names

mod device;
mod entry;
mod kernels;
mod libraries;
mod memory;
mod pointers;
mod state;
mod streams;
mod support;

// The exports, by API family.
pub use device::{
    cuCtxGetCurrent, cuCtxSetCurrent, cuCtxSynchronize, cuDeviceGet, cuDeviceGetAttribute,
    cuDeviceGetCount, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain, cuGetErrorName,
    cuGetErrorString, cuInit,
};
pub use kernels::{cuLaunchKernel, cuModuleGetFunction, cuModuleLoadData, cuModuleUnload};
pub use libraries::{
    cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, curandCreateGenerator,
    curandDestroyGenerator, curandSetPseudoRandomGeneratorSeed, curandSetStream,
};
pub use memory::{
    cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocManaged, cuMemFree_v2, cuMemFreeAsync, cuMemFreeHost,
    cuMemHostAlloc, cuMemcpyDtoDAsync_v2, cuMemcpyDtoHAsync_v2, cuMemcpyHtoDAsync_v2,
    cuMemsetD8Async,
};
pub use pointers::cuPointerGetAttributes;
pub use streams::{
    cuEventCreate, cuEventDestroy_v2, cuEventQuery, cuEventRecord, cuEventSynchronize,
    cuLaunchHostFunc, cuStreamCreate, cuStreamDestroy_v2, cuStreamSynchronize, cuStreamWaitEvent,
};
pub use support::{
    CallCounts, LiveObjects, dlpack_cuda_test_driver_calls, dlpack_cuda_test_driver_live,
    dlpack_cuda_test_driver_settle,
};
