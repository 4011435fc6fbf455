//! Modules and kernel launches (`cuModule*`, `cuLaunchKernel`): the few candle-kernels kernels
//! that dlpack-candle's CUDA suite reaches, run on the host in stream order, so that the suite's
//! export, import and stream logic runs here without a GPU.
//!
//! - `cuModuleLoadData` keeps the names of the `.entry` functions in the PTX text it is given
//!   (candle-kernels' real PTX, as nvcc compiled it). `cuModuleGetFunction` answers
//!   `CUDA_ERROR_NOT_FOUND` for a name the PTX does not define, as the driver does: a kernel
//!   name that candle asks for and candle-kernels lacks fails here as on a GPU.
//! - A function the PTX defines runs here only if its family is modelled: `ucopy_<dtype>` (the
//!   strided copy behind candle's `contiguous`), `affine_<dtype>` for f32 and f64,
//!   `badd_<dtype>` (broadcast addition) for u8, u32, i64, f32 and f64, and
//!   `is_<index>_<dtype>` (`index_select`) with u8, u32 or i64 indices. Any other is refused
//!   with `CUDA_ERROR_NOT_SUPPORTED`, naming it.
//! - A launch decodes its arguments when it is called (as the driver copies them), and runs on
//!   its stream in order with the copies, memsets and event waits around it. Every element it
//!   reads or writes must lie inside the allocation its pointer points into: a kernel that would
//!   read past its tensor's memory is refused (on the stream, counted), where a GPU would read
//!   whatever is there.
//!
//! The arithmetic follows candle-kernels' sources: `numel` output elements in row-major order;
//! an `info` array of dims then strides (two sets of strides for binary kernels), with NULL
//! meaning contiguous; strided indices computed as `get_strided_index` does.

use core::ffi::{CStr, c_char, c_uint, c_void};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUresult::{
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED,
};
use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};

use crate::entry::{Refusal, entry, invalid, put, refuse, refuse_later};
use crate::memory::Place;
use crate::state::{lock, state};

/// Element types of the modelled kernels, by candle's dtype names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    U8,
    U32,
    I16,
    I32,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    F8E4M3,
}

impl Elem {
    fn parse(name: &str) -> Option<Elem> {
        Some(match name {
            "u8" => Elem::U8,
            "u32" => Elem::U32,
            "i16" => Elem::I16,
            "i32" => Elem::I32,
            "i64" => Elem::I64,
            "f16" => Elem::F16,
            "bf16" => Elem::Bf16,
            "f32" => Elem::F32,
            "f64" => Elem::F64,
            "f8_e4m3" | "f8e4m3" => Elem::F8E4M3,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::F8E4M3 => 1,
            Elem::I16 | Elem::F16 | Elem::Bf16 => 2,
            Elem::U32 | Elem::I32 | Elem::F32 => 4,
            Elem::I64 | Elem::F64 => 8,
        }
    }
}

/// A modelled kernel.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// `ucopy_<t>(numel, num_dims, info, inp, out)`.
    Copy(Elem),
    /// `affine_<t>(numel, num_dims, info, inp, out, mul, add)`.
    Affine(Elem),
    /// `badd_<t>(numel, num_dims, dims_and_strides, lhs, rhs, out)`.
    Add(Elem),
    /// `is_<i>_<t>(numel, num_dims, info, ids, inp, out, left, src_dim, ids_dim, right)`.
    IndexSelect { index: Elem, elem: Elem },
}

impl Kernel {
    fn parse(name: &str) -> Option<Kernel> {
        if let Some(t) = name.strip_prefix("ucopy_") {
            return Elem::parse(t).map(Kernel::Copy);
        }
        if let Some(t) = name.strip_prefix("affine_") {
            return Elem::parse(t)
                .filter(|e| matches!(e, Elem::F32 | Elem::F64))
                .map(Kernel::Affine);
        }
        if let Some(t) = name.strip_prefix("badd_") {
            return Elem::parse(t)
                .filter(|e| matches!(e, Elem::U8 | Elem::U32 | Elem::I64 | Elem::F32 | Elem::F64))
                .map(Kernel::Add);
        }
        let rest = name.strip_prefix("is_")?;
        let (index, elem) = rest.split_once('_')?;
        let index = Elem::parse(index).filter(|i| matches!(i, Elem::U8 | Elem::U32 | Elem::I64))?;
        Some(Kernel::IndexSelect {
            index,
            elem: Elem::parse(elem)?,
        })
    }

    /// The name of pointer argument `i`, for messages.
    fn argument(self, i: usize) -> &'static str {
        match (self, i) {
            (_, 2) => "info",
            (Kernel::Add(_), 3) => "lhs",
            (Kernel::Add(_), 4) => "rhs",
            (Kernel::IndexSelect { .. }, 3) => "ids",
            (Kernel::IndexSelect { .. }, 4) | (Kernel::Copy(_) | Kernel::Affine(_), 3) => "inp",
            _ => "out",
        }
    }

    /// How many arguments the kernel takes.
    fn arity(self) -> usize {
        match self {
            Kernel::Copy(_) => 5,
            Kernel::Add(_) => 6,
            Kernel::Affine(_) => 7,
            Kernel::IndexSelect { .. } => 10,
        }
    }
}

/// Loaded modules (their entry names) and the functions taken from them.
#[derive(Default)]
struct Modules {
    modules: HashMap<usize, HashSet<String>>,
    functions: HashMap<usize, (usize, String, Kernel)>,
}

fn modules() -> &'static Mutex<Modules> {
    static MODULES: OnceLock<Mutex<Modules>> = OnceLock::new();
    MODULES.get_or_init(Mutex::default)
}

/// Module and function handles, counted up from here (apart from stream and event handles).
fn next_handle() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0x7_0000);
    NEXT.fetch_add(0x10, Ordering::Relaxed)
}

/// The `.entry` names a PTX text defines.
fn entries(ptx: &str) -> HashSet<String> {
    ptx.split(".entry")
        .skip(1)
        .filter_map(|rest| {
            let name = rest
                .trim_start()
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()?;
            (!name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

/// `cuModuleLoadData`: a module from PTX text (NUL-terminated), in the current context.
///
/// # Safety
/// `module` is valid for a write; `image` is a NUL-terminated PTX text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    entry("cuModuleLoadData", || {
        state()?.current()?;
        if image.is_null() {
            return Err(invalid("a NULL module image"));
        }
        // SAFETY: a NUL-terminated text (the caller's contract).
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        let text = text
            .to_str()
            .map_err(|_| invalid("a module image that is not PTX text (a cubin or fatbin?)"))?;
        let handle = next_handle();
        lock(modules()).modules.insert(handle, entries(text));
        // SAFETY: the caller's contract.
        unsafe { put(module, core::ptr::with_exposed_provenance_mut(handle)) }
    })
}

/// `cuModuleGetFunction`: `CUDA_ERROR_NOT_FOUND` for a name the module does not define.
///
/// # Safety
/// `function` is valid for a write; `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    entry("cuModuleGetFunction", || {
        if name.is_null() {
            return Err(invalid("a NULL function name"));
        }
        // SAFETY: NUL-terminated (the caller's contract).
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let mut modules = lock(modules());
        let defined = modules.modules.get(&module.addr()).ok_or_else(|| {
            refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!("module {:#x}", module.addr()),
            )
        })?;
        if !defined.contains(&name) {
            return Err(refuse(
                CUDA_ERROR_NOT_FOUND,
                format!("the module defines no kernel `{name}`"),
            ));
        }
        let kernel = Kernel::parse(&name).ok_or_else(|| {
            refuse(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("kernel `{name}` is not modelled by this test driver"),
            )
        })?;
        let handle = next_handle();
        modules
            .functions
            .insert(handle, (module.addr(), name, kernel));
        // SAFETY: the caller's contract.
        unsafe { put(function, core::ptr::with_exposed_provenance_mut(handle)) }
    })
}

/// `cuModuleUnload`: the module and its functions.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    entry("cuModuleUnload", || {
        let mut modules = lock(modules());
        modules.modules.remove(&module.addr()).ok_or_else(|| {
            refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!("module {:#x}", module.addr()),
            )
        })?;
        modules.functions.retain(|_, (m, _, _)| *m != module.addr());
        Ok(())
    })
}

/// Device memory a kernel argument points into: from the pointer to the end of its allocation.
struct Region {
    place: Place,
    len: usize,
    what: &'static str,
}

impl Region {
    fn at(pointer: CUdeviceptr, what: &'static str) -> Result<Region, Refusal> {
        let (place, len) = state()?.reach(pointer).map_err(|e| e.context(what))?;
        Ok(Region { place, len, what })
    }

    /// The pointer to element `index` of `size` bytes, inside the region.
    fn element(&self, index: usize, size: usize) -> Result<*mut u8, String> {
        match index
            .checked_mul(size)
            .filter(|&at| at.checked_add(size).is_some_and(|end| end <= self.len))
        {
            // SAFETY: `at + size` bytes lie inside the region's allocation.
            Some(at) => Ok(unsafe { self.place.ptr().add(at) }),
            None => Err(format!(
                "element {index} ({size} bytes each) of `{}` lies past the end of its allocation ({} bytes from the pointer)",
                self.what, self.len
            )),
        }
    }

    fn read_u64(&self, index: usize) -> Result<u64, String> {
        let at = self.element(index, 8)?;
        // SAFETY: 8 bytes inside the allocation (checked).
        Ok(unsafe { at.cast::<u64>().read_unaligned() })
    }

    fn is_freed(&self) -> bool {
        self.place.is_freed()
    }
}

/// The row-major index `i` of a tensor of `dims`, as an element offset through `strides`
/// (candle-kernels' `get_strided_index`).
fn strided(mut i: usize, dims: &[usize], strides: &[usize]) -> usize {
    let mut at = 0usize;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        at = at.wrapping_add((i % d.max(1)).wrapping_mul(s));
        i /= d.max(1);
    }
    at
}

/// candle-kernels' `is_contiguous`.
fn contiguous(dims: &[usize], strides: &[usize]) -> bool {
    let mut acc = 1usize;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 && acc != s {
            return false;
        }
        acc = acc.wrapping_mul(d);
    }
    true
}

/// How a kernel indexes one operand, decided once per launch: element `i` itself where the
/// operand's strides are contiguous (or there is no `info`), else through
/// `get_strided_index`.
enum Indexing<'a> {
    Contiguous,
    Strided {
        dims: &'a [usize],
        strides: &'a [usize],
    },
}

impl<'a> Indexing<'a> {
    /// The indexing of the operand whose strides are set `set` of `info` (set 0 holds the dims).
    fn of(info: &'a Option<Vec<Vec<usize>>>, set: usize) -> Self {
        match info {
            Some(v) if !contiguous(&v[0], &v[set]) => Indexing::Strided {
                dims: &v[0],
                strides: &v[set],
            },
            _ => Indexing::Contiguous,
        }
    }

    fn at(&self, i: usize) -> usize {
        match *self {
            Indexing::Contiguous => i,
            Indexing::Strided { dims, strides } => strided(i, dims, strides),
        }
    }
}

/// A launch, its arguments decoded.
struct Launch {
    kernel: Kernel,
    name: String,
    sizes: Vec<u64>,
    regions: Vec<Option<Region>>,
    /// `mul` and `add` of an affine kernel, as raw bytes of the element type.
    scalars: [u64; 2],
}

impl Launch {
    fn region(&self, i: usize) -> Result<&Region, String> {
        self.regions[i]
            .as_ref()
            .ok_or_else(|| format!("argument {i} of `{}` is NULL", self.name))
    }

    /// `info`'s dims and one or more sets of strides (empty for a NULL `info`: contiguous).
    fn info(&self, i: usize, sets: usize) -> Result<Option<Vec<Vec<usize>>>, String> {
        let Some(info) = self.regions[i].as_ref() else {
            return Ok(None);
        };
        let n = self.sizes[1] as usize;
        let mut out = Vec::new();
        for set in 0..=sets {
            let mut v = Vec::with_capacity(n);
            for k in 0..n {
                v.push(info.read_u64(set * n + k)? as usize);
            }
            out.push(v);
        }
        Ok(Some(out))
    }

    fn run(&self) -> Result<(), String> {
        if self.regions.iter().flatten().any(Region::is_freed) {
            return Err(format!(
                "`{}` reached memory freed before the stream got to it",
                self.name
            ));
        }
        let numel = self.sizes[0] as usize;
        match self.kernel {
            Kernel::Copy(elem) => {
                let size = elem.size();
                let (out, info) = (self.region(4)?, self.info(2, 1)?);
                let inp = self.regions[3].as_ref().unwrap_or(out);
                let source = Indexing::of(&info, 1);
                for i in 0..numel {
                    let (src, dst) = (inp.element(source.at(i), size)?, out.element(i, size)?);
                    // SAFETY: both elements lie inside their allocations (checked).
                    unsafe { core::ptr::copy(src, dst, size) };
                }
            }
            Kernel::Affine(elem) => {
                let (out, info) = (self.region(4)?, self.info(2, 1)?);
                let inp = self.regions[3].as_ref().unwrap_or(out);
                let source = Indexing::of(&info, 1);
                for i in 0..numel {
                    let (src, dst) = (
                        inp.element(source.at(i), elem.size())?,
                        out.element(i, elem.size())?,
                    );
                    // SAFETY: elements of the kernel's type inside their allocations (checked);
                    // the scalars are the launch's arguments of that type.
                    unsafe {
                        match elem {
                            Elem::F32 => {
                                let (m, a) = (self.scalars[0] as u32, self.scalars[1] as u32);
                                let x = src.cast::<f32>().read_unaligned();
                                dst.cast::<f32>()
                                    .write_unaligned(x * f32::from_bits(m) + f32::from_bits(a));
                            }
                            _ => {
                                let x = src.cast::<f64>().read_unaligned();
                                dst.cast::<f64>().write_unaligned(
                                    x * f64::from_bits(self.scalars[0])
                                        + f64::from_bits(self.scalars[1]),
                                );
                            }
                        }
                    }
                }
            }
            Kernel::Add(elem) => {
                let size = elem.size();
                let (lhs, rhs, out) = (self.region(3)?, self.region(4)?, self.region(5)?);
                let info = self.info(2, 2)?;
                let (left, right) = (Indexing::of(&info, 1), Indexing::of(&info, 2));
                for i in 0..numel {
                    let (x, y, z) = (
                        lhs.element(left.at(i), size)?,
                        rhs.element(right.at(i), size)?,
                        out.element(i, size)?,
                    );
                    // SAFETY: elements of the kernel's type inside their allocations (checked).
                    unsafe {
                        match elem {
                            Elem::U8 => z.write(x.read().wrapping_add(y.read())),
                            Elem::U32 => add::<u32>(x, y, z, u32::wrapping_add),
                            Elem::I64 => add::<i64>(x, y, z, i64::wrapping_add),
                            Elem::F32 => add::<f32>(x, y, z, |a, b| a + b),
                            _ => add::<f64>(x, y, z, |a, b| a + b),
                        }
                    }
                }
            }
            Kernel::IndexSelect { index, elem } => {
                let size = elem.size();
                let (ids, inp, out) = (self.region(3)?, self.region(4)?, self.region(5)?);
                let info = self.info(2, 1)?;
                let source = Indexing::of(&info, 1);
                let (src_dim, ids_dim, right) = (
                    self.sizes[7] as usize,
                    self.sizes[8] as usize,
                    self.sizes[9] as usize,
                );
                if ids_dim == 0 || right == 0 {
                    return Ok(());
                }
                for dst in 0..numel {
                    let left_i = dst / (ids_dim * right);
                    let id_i = dst / right % ids_dim;
                    let right_i = dst % right;
                    let at = ids.element(id_i, index.size())?;
                    // SAFETY: an index of the kernel's index type inside its allocation.
                    let id = unsafe {
                        match index {
                            Elem::U8 => u64::from(at.read()),
                            Elem::U32 => u64::from(at.cast::<u32>().read_unaligned()),
                            _ => at.cast::<u64>().read_unaligned(),
                        }
                    };
                    let target = out.element(dst, size)?;
                    let max = match index {
                        Elem::U8 => u64::from(u8::MAX),
                        Elem::U32 => u64::from(u32::MAX),
                        _ => i64::MAX as u64,
                    };
                    if id == max {
                        // SAFETY: an element inside its allocation (checked).
                        unsafe { target.write_bytes(0, size) };
                        continue;
                    }
                    if id as usize >= src_dim {
                        return Err(format!(
                            "`{}`: index {id} at position {id_i} is out of range for a dimension of {src_dim}",
                            self.name
                        ));
                    }
                    let src = left_i * (src_dim * right) + id as usize * right + right_i;
                    let from = inp.element(source.at(src), size)?;
                    // SAFETY: both elements lie inside their allocations (checked).
                    unsafe { core::ptr::copy(from, target, size) };
                }
            }
        }
        Ok(())
    }
}

/// `*z = f(*x, *y)` for elements of `T`.
///
/// # Safety
/// Each pointer is valid for an unaligned access of `T`.
unsafe fn add<T: Copy>(x: *mut u8, y: *mut u8, z: *mut u8, f: impl Fn(T, T) -> T) {
    // SAFETY: the caller's contract.
    unsafe {
        let v = f(
            x.cast::<T>().read_unaligned(),
            y.cast::<T>().read_unaligned(),
        );
        z.cast::<T>().write_unaligned(v);
    }
}

/// `cuLaunchKernel`: a modelled kernel with its arguments in `params` (`extra` unsupported),
/// run in order on `stream`. The grid and block sizes are not used: the kernels loop over
/// `numel` as candle-kernels' grid-stride loops do.
///
/// # Safety
/// `params` holds one valid pointer per kernel argument, each to a value of the argument's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernel(
    function: CUfunction,
    _grid_x: c_uint,
    _grid_y: c_uint,
    _grid_z: c_uint,
    _block_x: c_uint,
    _block_y: c_uint,
    _block_z: c_uint,
    _shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    entry("cuLaunchKernel", || {
        let (name, kernel) = lock(modules())
            .functions
            .get(&function.addr())
            .map(|(_, name, kernel)| (name.clone(), *kernel))
            .ok_or_else(|| {
                refuse(
                    CUDA_ERROR_INVALID_HANDLE,
                    format!("function {:#x}", function.addr()),
                )
            })?;
        if !extra.is_null() {
            return Err(invalid("kernel arguments through `extra`"));
        }
        if params.is_null() {
            return Err(invalid(format!("`{name}` launched without arguments")));
        }
        let stream = state()?.stream(stream)?;
        // SAFETY: one valid pointer per argument (the caller's contract); `arity` is the
        // kernel's argument count.
        let args: Vec<*mut c_void> = (0..kernel.arity())
            .map(|i| unsafe { params.add(i).read() })
            .collect();
        if args.iter().any(|a| a.is_null()) {
            return Err(invalid(format!(
                "`{name}` launched with a NULL argument pointer"
            )));
        }
        // SAFETY: each argument points to a value of its type: a size_t or a device pointer
        // (both 8 bytes), or a scalar of the element type (read by its size below).
        let word = |i: usize| unsafe { args[i].cast::<u64>().read_unaligned() };
        let pointers: &[usize] = match kernel {
            Kernel::Copy(_) | Kernel::Affine(_) => &[2, 3, 4],
            Kernel::Add(_) => &[2, 3, 4, 5],
            Kernel::IndexSelect { .. } => &[2, 3, 4, 5],
        };
        let mut sizes = vec![0u64; kernel.arity()];
        let mut regions: Vec<Option<Region>> = (0..kernel.arity()).map(|_| None).collect();
        for i in 0..kernel.arity() {
            if pointers.contains(&i) {
                let pointer = word(i);
                if pointer != 0 {
                    regions[i] = Some(Region::at(pointer, kernel.argument(i))?);
                }
            } else if !matches!(kernel, Kernel::Affine(_)) || i < 5 {
                sizes[i] = word(i);
            }
        }
        let mut scalars = [0u64; 2];
        if let Kernel::Affine(elem) = kernel {
            for (k, scalar) in scalars.iter_mut().enumerate() {
                // SAFETY: a scalar of the element type (f32 or f64).
                *scalar = unsafe {
                    match elem {
                        Elem::F32 => u64::from(args[5 + k].cast::<u32>().read_unaligned()),
                        _ => args[5 + k].cast::<u64>().read_unaligned(),
                    }
                };
            }
        }
        let launch = Launch {
            kernel,
            name,
            sizes,
            regions,
            scalars,
        };
        state()?.queue(
            &stream,
            Box::new(move || {
                if let Err(why) = launch.run() {
                    refuse_later(&why);
                }
            }),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_entries_are_found_by_name() {
        let ptx = ".version 8.0\n.visible .entry ucopy_f32(\n.param .u64 a\n)\n{}\n\
                   .visible .entry is_i64_f8_e4m3 (\n)";
        let found = entries(ptx);
        assert!(found.contains("ucopy_f32") && found.contains("is_i64_f8_e4m3"));
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn kernel_names_parse_into_their_families() {
        assert!(matches!(
            Kernel::parse("ucopy_bf16"),
            Some(Kernel::Copy(Elem::Bf16))
        ));
        assert!(matches!(
            Kernel::parse("is_i64_f8_e4m3"),
            Some(Kernel::IndexSelect {
                index: Elem::I64,
                elem: Elem::F8E4M3
            })
        ));
        assert!(matches!(
            Kernel::parse("badd_i64"),
            Some(Kernel::Add(Elem::I64))
        ));
        assert!(Kernel::parse("affine_u8").is_none());
        assert!(Kernel::parse("uexp_f32").is_none());
    }

    #[test]
    fn strided_indices_match_candle_kernels() {
        // A 2x3 tensor transposed from 3x2 storage: element (i, j) at j * 2 + i.
        let (dims, strides) = ([2, 3], [1, 2]);
        let got: Vec<usize> = (0..6).map(|i| strided(i, &dims, &strides)).collect();
        assert_eq!(got, [0, 2, 4, 1, 3, 5]);
        assert!(contiguous(&[2, 3], &[3, 1]) && contiguous(&[1, 3], &[7, 1]));
        assert!(!contiguous(&dims, &strides));
    }
}
