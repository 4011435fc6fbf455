//! Checks the Rust mirror in `dlpack_core::ffi` against the real upstream `dlpack.h`.
//!
//! The test writes a small C program that includes the header and prints the size, alignment and
//! field offsets of every struct, the value of every `kDL*` enumerator and the version and flag
//! macros, compiles it with the C compiler (`cc`, or `$CC`), runs it and compares every number
//! with Rust's `size_of` / `offset_of!` and this crate's constants. It also scans the header text
//! so that an enumerator or flag the Rust side does not know (a newer header) is an error, and
//! checks the reverse: every Rust constant must exist in the header.
//!
//! Where the header is: `$DLPACK_HEADER` (the path of `dlpack.h`), else
//! `<workspace root>/.cache/dlpack/dlpack.h`, which `scripts/test` downloads. When neither exists
//! the test prints `header_layout: NOT RUN ...` and passes, unless `DLPACK_REQUIRE_HEADER=1`, in
//! which case it fails. Under Miri it is ignored (Miri cannot run a C compiler).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dlpack_core::ffi::{
    self, DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
    DLPackExchangeAPIHeader, DLPackVersion, DLTensor,
};
use dlpack_core::{DataTypeCode, DeviceType, Flags, Version};
use dlpack_testing::c_layout::{self, Check, strip_comments};
use dlpack_testing::layout_checks;

/// `(C name, value)` of every `kDL*` constant in `ffi`, named once so a typo cannot hide.
macro_rules! ffi_consts {
    ($($c:ident),* $(,)?) => { &[$((stringify!($c), ffi::$c)),*] };
}

const FFI_DEVICE_TYPES: &[(&str, DeviceType)] = ffi_consts!(
    kDLCPU,
    kDLCUDA,
    kDLCUDAHost,
    kDLOpenCL,
    kDLVulkan,
    kDLMetal,
    kDLVPI,
    kDLROCM,
    kDLROCMHost,
    kDLExtDev,
    kDLCUDAManaged,
    kDLOneAPI,
    kDLWebGPU,
    kDLHexagon,
    kDLMAIA,
    kDLTrn,
);

const FFI_DTYPE_CODES: &[(&str, DataTypeCode)] = ffi_consts!(
    kDLInt,
    kDLUInt,
    kDLFloat,
    kDLOpaqueHandle,
    kDLBfloat,
    kDLComplex,
    kDLBool,
    kDLFloat8_e3m4,
    kDLFloat8_e4m3,
    kDLFloat8_e4m3b11fnuz,
    kDLFloat8_e4m3fn,
    kDLFloat8_e4m3fnuz,
    kDLFloat8_e5m2,
    kDLFloat8_e5m2fnuz,
    kDLFloat8_e8m0fnu,
    kDLFloat6_e2m3fn,
    kDLFloat6_e3m2fn,
    kDLFloat4_e2m1fn,
);

/// `(macro, ffi constant, the matching Flags constant)` for every flag bit.
const FLAG_MACROS: &[(&str, u64, Flags)] = &[
    (
        "DLPACK_FLAG_BITMASK_READ_ONLY",
        ffi::DLPACK_FLAG_BITMASK_READ_ONLY,
        Flags::READ_ONLY,
    ),
    (
        "DLPACK_FLAG_BITMASK_IS_COPIED",
        ffi::DLPACK_FLAG_BITMASK_IS_COPIED,
        Flags::IS_COPIED,
    ),
    (
        "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
        ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        Flags::IS_SUBBYTE_TYPE_PADDED,
    ),
];

/// An enumerator found in the header text.
#[derive(Debug)]
struct Enumerator {
    name: String,
    /// The `typedef enum { ... } Name;` it belongs to.
    enum_name: String,
    /// The literal after `=`, when there is one (the compiler's value is the one compared).
    literal: Option<i128>,
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every identifier in `text` that starts with `prefix`, with the byte offset just after it.
fn idents_with_prefix<'a>(text: &'a str, prefix: &str) -> Vec<(&'a str, usize)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident(b[i]) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let ident = &text[start..i];
            if ident.starts_with(prefix) {
                found.push((ident, i));
            }
        } else {
            i += 1;
        }
    }
    found
}

/// A C integer literal with optional sign and `u`/`l` suffixes.
fn parse_c_int(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, s),
    };
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    let v = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16).ok()?
    } else {
        s.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Every `kDL*` enumerator of the header, in order, with the enum it belongs to.
fn scan_enumerators(code: &str) -> Vec<Enumerator> {
    let mut found = Vec::new();
    for (name, end) in idents_with_prefix(code, "kDL") {
        let rest = &code[end..];
        let literal = rest.trim_start().strip_prefix('=').and_then(|v| {
            let lit: String = v
                .trim_start()
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '-')
                .collect();
            parse_c_int(&lit)
        });
        // The enumerator list ends at the next `}`; the typedef name follows it.
        let enum_name = rest
            .find('}')
            .map(|close| {
                let after = &rest[close + 1..];
                let decl = after.split(';').next().unwrap_or("");
                decl.trim().to_owned()
            })
            .unwrap_or_default();
        found.push(Enumerator {
            name: name.to_owned(),
            enum_name,
            literal,
        });
    }
    found
}

/// Every `#define DLPACK_FLAG_BITMASK_*` of the header.
fn scan_flag_macros(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let rest = line
                .trim_start()
                .strip_prefix('#')?
                .trim_start()
                .strip_prefix("define")?;
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|&c| is_ident(c as u8))
                .collect();
            name.starts_with("DLPACK_FLAG_BITMASK_").then_some(name)
        })
        .collect()
}

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.join(".."), Path::to_path_buf)
}

const HOW_TO_GET_IT: &str = "get it with `scripts/test` (it downloads the apache-tvm-ffi wheel from PyPI and extracts \
     tvm_ffi/include/dlpack/dlpack.h into .cache/dlpack/dlpack.h), or set DLPACK_HEADER to the path of a DLPack 1.3 \
     dlpack.h";

/// The header to check, or `None` when the test should not run.
fn find_header() -> Option<PathBuf> {
    let required = std::env::var_os("DLPACK_REQUIRE_HEADER").is_some_and(|v| v == "1");
    if let Some(path) = std::env::var_os("DLPACK_HEADER").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        // An explicit path that does not exist is a mistake, never a reason to skip. (A relative
        // path is relative to the package directory, where cargo runs tests.)
        assert!(
            path.is_file(),
            "header_layout: DLPACK_HEADER={} is not a file; {HOW_TO_GET_IT}",
            path.display()
        );
        return Some(std::fs::canonicalize(&path).unwrap_or(path));
    }
    let default = workspace_root().join(".cache/dlpack/dlpack.h");
    if default.is_file() {
        return Some(default);
    }
    assert!(
        !required,
        "header_layout: DLPACK_REQUIRE_HEADER=1 but dlpack.h was not found (DLPACK_HEADER is unset and {} does not \
         exist); {HOW_TO_GET_IT}",
        default.display()
    );
    eprintln!("header_layout: NOT RUN: dlpack.h not found (set DLPACK_HEADER or run scripts/test)");
    None
}

/// Compiles and runs the C program; returns its `name value` lines.
fn run_c(header: &Path, checks: &[Check]) -> BTreeMap<String, i128> {
    let header_dir = header.parent().expect("the header path has a parent");
    let header_file = header
        .file_name()
        .expect("the header path names a file")
        .to_string_lossy();
    c_layout::run_c(
        "header_layout",
        &format!("#include \"{header_file}\""),
        header_dir,
        "c11",
        checks,
    )
}

const DEVICE_ENUM: &str = "DLDeviceType";
const DTYPE_ENUM: &str = "DLDataTypeCode";

#[test]
#[cfg_attr(miri, ignore = "runs the C compiler, which Miri cannot do")]
fn rust_mirror_matches_the_c_header() {
    let Some(header) = find_header() else { return };
    let text = std::fs::read_to_string(&header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", header.display()));
    let code = strip_comments(&text);
    let enumerators = scan_enumerators(&code);
    let flag_macros = scan_flag_macros(&code);

    // Everything the C program prints: first the numbers both sides compute the same way.
    let mut checks = Vec::new();
    layout_checks!(checks, DLPackVersion { major, minor });
    layout_checks!(
        checks,
        DLDevice {
            device_type,
            device_id
        }
    );
    layout_checks!(checks, DLDataType { code, bits, lanes });
    layout_checks!(
        checks,
        DLTensor {
            data,
            device,
            ndim,
            dtype,
            shape,
            strides,
            byte_offset
        }
    );
    layout_checks!(
        checks,
        DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter
        }
    );
    layout_checks!(
        checks,
        DLManagedTensorVersioned {
            version,
            manager_ctx,
            deleter,
            flags,
            dl_tensor
        }
    );
    layout_checks!(checks, DLPackExchangeAPIHeader { version, prev_api });
    layout_checks!(
        checks,
        DLPackExchangeAPI {
            header,
            managed_tensor_allocator,
            managed_tensor_from_py_object_no_sync,
            managed_tensor_to_py_object_no_sync,
            dltensor_from_py_object_no_sync,
            current_work_stream,
        }
    );
    checks.push(Check {
        key: "sizeof.DLDeviceType".into(),
        c_expr: "sizeof(DLDeviceType)".into(),
        rust: size_of::<ffi::DLDeviceType>() as i128,
    });
    checks.push(Check {
        key: "macro.DLPACK_MAJOR_VERSION".into(),
        c_expr: "DLPACK_MAJOR_VERSION".into(),
        rust: ffi::DLPACK_MAJOR_VERSION.into(),
    });
    checks.push(Check {
        key: "macro.DLPACK_MINOR_VERSION".into(),
        c_expr: "DLPACK_MINOR_VERSION".into(),
        rust: ffi::DLPACK_MINOR_VERSION.into(),
    });
    for &(name, value, _) in FLAG_MACROS {
        checks.push(Check {
            key: format!("macro.{name}"),
            c_expr: name.into(),
            rust: value.into(),
        });
    }
    let compared = checks.len();
    // Then every enumerator the header declares; the Rust side is compared below, by enum.
    for e in &enumerators {
        checks.push(Check {
            key: format!("enum.{}", e.name),
            c_expr: e.name.clone(),
            rust: 0,
        });
    }

    let c = run_c(&header, &checks);
    let mut errors: Vec<String> = Vec::new();
    let c_value = |key: &str, errors: &mut Vec<String>| -> Option<i128> {
        let v = c.get(key).copied();
        if v.is_none() {
            errors.push(format!("{key}: the C program printed no value"));
        }
        v
    };

    // Sizes, alignments, offsets, version and flag macros.
    for check in &checks[..compared] {
        if let Some(cv) = c_value(&check.key, &mut errors)
            && cv != check.rust
        {
            errors.push(format!(
                "{}: C says {cv}, Rust says {}",
                check.key, check.rust
            ));
        }
    }
    if Version::CURRENT != Version::new(ffi::DLPACK_MAJOR_VERSION, ffi::DLPACK_MINOR_VERSION) {
        errors.push(format!(
            "Version::CURRENT is {}, not the ffi DLPACK_*_VERSION",
            Version::CURRENT
        ));
    }

    // Flags: Rust's Flags agree with ffi, and the header has no flag Rust lacks.
    let mut all_flags = 0u64;
    for &(name, value, flag) in FLAG_MACROS {
        all_flags |= value;
        if flag.0 != value {
            errors.push(format!(
                "{name}: ffi says {value:#x}, Flags says {:#x}",
                flag.0
            ));
        }
    }
    for name in &flag_macros {
        if !FLAG_MACROS.iter().any(|&(n, _, _)| n == name) {
            errors.push(format!(
                "{name}: defined by the header, missing from the Rust side"
            ));
        }
    }
    if Flags::ALL_KNOWN.0 != all_flags {
        errors.push(format!(
            "Flags::ALL_KNOWN is {:#x}, the header's flags make {all_flags:#x}",
            Flags::ALL_KNOWN.0
        ));
    }

    // Enumerators, header to Rust: every one must be mirrored, with the compiler's value.
    let mut header_devices: Vec<(&str, i128)> = Vec::new();
    let mut header_dtypes: Vec<(&str, i128)> = Vec::new();
    for e in &enumerators {
        let Some(value) = c_value(&format!("enum.{}", e.name), &mut errors) else {
            continue;
        };
        if let Some(lit) = e.literal
            && lit != value
        {
            errors.push(format!(
                "{}: the header text reads {lit} but the compiler says {value}",
                e.name
            ));
        }
        match e.enum_name.as_str() {
            DEVICE_ENUM => header_devices.push((&e.name, value)),
            DTYPE_ENUM => header_dtypes.push((&e.name, value)),
            other => errors.push(format!(
                "{}: enumerator of `{other}`, an enum the Rust side does not mirror",
                e.name
            )),
        }
    }
    let mut seen = BTreeSet::new();
    for e in &enumerators {
        if !seen.insert(&e.name) {
            errors.push(format!(
                "{}: found twice in the header text (scanner confused?)",
                e.name
            ));
        }
    }

    check_enum(
        &mut errors,
        DEVICE_ENUM,
        &header_devices,
        &DeviceType::ALL
            .iter()
            .map(|t| (i128::from(t.0), t.c_name()))
            .collect::<Vec<_>>(),
        &FFI_DEVICE_TYPES
            .iter()
            .map(|&(n, t)| (n, i128::from(t.0)))
            .collect::<Vec<_>>(),
        |v| i32::try_from(v).ok().and_then(|v| DeviceType(v).c_name()),
    );
    check_enum(
        &mut errors,
        DTYPE_ENUM,
        &header_dtypes,
        &DataTypeCode::ALL
            .iter()
            .map(|t| (i128::from(t.0), t.c_name()))
            .collect::<Vec<_>>(),
        &FFI_DTYPE_CODES
            .iter()
            .map(|&(n, t)| (n, i128::from(t.0)))
            .collect::<Vec<_>>(),
        |v| u8::try_from(v).ok().and_then(|v| DataTypeCode(v).c_name()),
    );

    // Every `kDL*` name ffi.rs mentions must be in the tables above, so none goes unchecked.
    let ffi_src = strip_comments(include_str!("../src/ffi.rs"));
    let listed: BTreeSet<&str> = FFI_DEVICE_TYPES
        .iter()
        .map(|c| c.0)
        .chain(FFI_DTYPE_CODES.iter().map(|c| c.0))
        .collect();
    for (name, _) in idents_with_prefix(&ffi_src, "kDL") {
        if !listed.contains(name) {
            errors.push(format!("ffi::{name}: not checked by this test; add it to FFI_DEVICE_TYPES or FFI_DTYPE_CODES"));
        }
    }

    assert!(
        errors.is_empty(),
        "header_layout: the Rust mirror disagrees with {} in {} place(s):\n  {}\n",
        header.display(),
        errors.len(),
        errors.join("\n  ")
    );
    eprintln!(
        "header_layout: OK: {} sizes, offsets and macros and {} enumerators ({} device types, {} dtype codes) match {}",
        compared,
        enumerators.len(),
        header_devices.len(),
        header_dtypes.len(),
        header.display()
    );
}

/// Compares one enum of the header (`(name, value)` in header order) with the Rust side:
/// `all` is `ALL` as `(value, c_name())`, `ffi` the `ffi::kDL*` constants, `c_name_of` the
/// `c_name()` of any value.
fn check_enum(
    errors: &mut Vec<String>,
    enum_name: &str,
    header: &[(&str, i128)],
    all: &[(i128, Option<&str>)],
    ffi: &[(&str, i128)],
    c_name_of: impl Fn(i128) -> Option<&'static str>,
) {
    let in_header = |name: &str| header.iter().find(|h| h.0 == name).map(|h| h.1);
    // Header to Rust.
    for &(name, value) in header {
        if c_name_of(value) != Some(name) {
            errors.push(format!(
                "{enum_name}::{name} = {value}: Rust's c_name({value}) is {:?}",
                c_name_of(value)
            ));
        }
        if !all.iter().any(|a| a.0 == value) {
            errors.push(format!("{enum_name}::{name} = {value}: missing from ALL"));
        }
        match ffi.iter().find(|f| f.0 == name) {
            None => errors.push(format!("{enum_name}::{name} = {value}: no ffi::{name}")),
            Some(&(_, v)) if v != value => {
                errors.push(format!("ffi::{name}: C says {value}, Rust says {v}"))
            }
            Some(_) => {}
        }
    }
    // Rust to header.
    for &(value, name) in all {
        match name {
            None => errors.push(format!(
                "{enum_name}: ALL holds {value}, which has no c_name()"
            )),
            Some(name) => match in_header(name) {
                None => errors.push(format!(
                    "{enum_name}: ALL holds {name} = {value}, which the header lacks"
                )),
                Some(v) if v != value => errors.push(format!(
                    "{enum_name}: ALL holds {name} = {value}, C says {v}"
                )),
                Some(_) => {}
            },
        }
    }
    for &(name, value) in ffi {
        if in_header(name).is_none() {
            errors.push(format!(
                "ffi::{name} = {value}: the header has no such {enum_name} enumerator"
            ));
        }
    }
    // ALL is documented to be in header order, without duplicates.
    let header_order: Vec<i128> = header.iter().map(|h| h.1).collect();
    let all_order: Vec<i128> = all.iter().map(|a| a.0).collect();
    if header_order != all_order {
        errors.push(format!(
            "{enum_name}: ALL is {all_order:?}, the header's order is {header_order:?}"
        ));
    }
}
