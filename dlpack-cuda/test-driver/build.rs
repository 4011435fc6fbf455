//! Names the library `libcuda.so` (its `DT_SONAME`). A test that opens this library by its path
//! first makes every later `dlopen("libcuda.so")` in the process, cudarc's included, return it:
//! the dynamic linker matches an already loaded library by soname. No `LD_LIBRARY_PATH`, no
//! re-executed test binary.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
}
