//! Checks the hand-written Level Zero bindings against the real headers by compiling C.
//!
//! A C program includes `ze_api.h`, `ze_ddi.h`, `zet_ddi.h` and `zes_ddi.h` (Debian bookworm's
//! `libze-dev`) and prints, for every struct this crate binds, its size, alignment and the
//! offset and size of every field; the value of every constant; for every bound function,
//! whether the C function's type equals the Rust signature spelled in C
//! (`__builtin_types_compatible_p`, so pointer constness counts); and for every DDI table of the
//! test driver (`test-driver/src/ddi.rs`, included here), its size, its field offsets, the type
//! of each slot the driver fills, and the type of the export that fills it. Every number is
//! compared with the Rust side. The test also scans `src/sys.rs` so that no binding escapes the
//! check, and the header's `ze_result_t` so that no result code goes unnamed.
//!
//! Where the headers are: `$DLPACK_ONEAPI_ZE_HEADERS` (the directory holding `ze_api.h`), else
//! `/usr/include/level_zero`. When neither exists the test prints `ze_header_layout: NOT RUN`
//! and passes, unless `DLPACK_REQUIRE_ZE_HEADERS=1` (set by the workspace's test command), in
//! which case it fails. Needs a C compiler with GNU extensions (`cc`, or `$CC`: gcc or clang).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use dlpack_oneapi::sys;
use dlpack_oneapi::sys::*;
use dlpack_testing::c_layout::{self, Check, strip_comments};
use dlpack_testing::layout_checks;

#[path = "../test-driver/src/ddi.rs"]
#[allow(dead_code, unreachable_pub)]
mod ddi;

const HEADERS_VAR: &str = "DLPACK_ONEAPI_ZE_HEADERS";
const REQUIRE_VAR: &str = "DLPACK_REQUIRE_ZE_HEADERS";
const DEFAULT_DIR: &str = "/usr/include/level_zero";

/// `sizes!(checks, a, b, ...)`: `sizeof` of typedefs (flags, handles, enums).
macro_rules! sizes {
    ($checks:ident, $($ty:ident),* $(,)?) => {{
        $(
            $checks.push(Check {
                key: format!("sizeof.{}", stringify!($ty)),
                c_expr: format!("sizeof({})", stringify!($ty)),
                rust: size_of::<$ty>() as i128,
            });
        )*
    }};
}

/// `(C name, value)` of the free constants of `sys`, named once so a typo cannot hide.
macro_rules! consts {
    ($($c:ident),* $(,)?) => { &[$((stringify!($c), sys::$c as i128)),*] };
}

const FREE_CONSTANTS: &[(&str, i128)] = consts!(
    ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE,
    ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
    ZE_EVENT_SCOPE_FLAG_HOST,
    ZE_MAX_DEVICE_UUID_SIZE,
    ZE_MAX_DEVICE_NAME,
);

/// Every named value of every `c_enum!` type of `sys`.
fn enum_constants() -> Vec<(&'static str, i128)> {
    fn all<T: Copy>(list: &[(&'static str, T)], value: fn(T) -> u32) -> Vec<(&'static str, i128)> {
        list.iter()
            .map(|&(n, v)| (n, i128::from(value(v))))
            .collect()
    }
    let mut out = Vec::new();
    out.extend(all(ze_result_t::ALL, |v| v.0));
    out.extend(all(ze_api_version_t::ALL, |v| v.0));
    out.extend(all(ze_structure_type_t::ALL, |v| v.0));
    out.extend(all(ze_device_type_t::ALL, |v| v.0));
    out.extend(all(ze_memory_type_t::ALL, |v| v.0));
    out.extend(all(ze_command_queue_mode_t::ALL, |v| v.0));
    out.extend(all(ze_command_queue_priority_t::ALL, |v| v.0));
    out
}

/// A Rust type as written in `sys` (`*mut *mut c_void`), in C (`void**`).
fn c_type(rust: &str) -> String {
    // `stringify!` may print `* mut T` or `*mut T`.
    let t = rust
        .trim()
        .replacen("* mut", "*mut", 1)
        .replacen("* const", "*const", 1);
    let t = t.as_str();
    if let Some(rest) = t.strip_prefix("*mut") {
        return format!("{}*", c_type(rest));
    }
    if let Some(rest) = t.strip_prefix("*const") {
        return format!("const {}*", c_type(rest));
    }
    match t {
        "u8" => "uint8_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "c_void" => "void",
        "c_char" => "char",
        other => other,
    }
    .to_owned()
}

/// Every identifier in `text` starting with `prefix`.
fn idents(text: &str, prefix: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

fn find_headers() -> Option<PathBuf> {
    let required = std::env::var_os(REQUIRE_VAR).is_some_and(|v| v == "1");
    if let Some(dir) = std::env::var_os(HEADERS_VAR).filter(|p| !p.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("ze_api.h").is_file(),
            "ze_header_layout: {HEADERS_VAR}={} has no ze_api.h; expected the directory of \
             Level Zero's headers (Debian: apt-get install libze-dev)",
            dir.display()
        );
        return Some(dir);
    }
    let default = PathBuf::from(DEFAULT_DIR);
    if default.join("ze_api.h").is_file() {
        return Some(default);
    }
    assert!(
        !required,
        "ze_header_layout: {REQUIRE_VAR}=1 but {DEFAULT_DIR}/ze_api.h does not exist and \
         {HEADERS_VAR} is unset; install Debian's libze-dev"
    );
    // Written to the stream itself, not with `eprintln!`, which the test harness captures for
    // passing tests: the line must show in a plain `cargo test`.
    let _ = writeln!(
        std::io::stderr(),
        "ze_header_layout: NOT RUN: {DEFAULT_DIR}/ze_api.h not found. This test did not run; \
         install Debian's libze-dev (scripts/test does) or set {REQUIRE_VAR}=1 to make this an \
         error."
    );
    None
}

/// Compiles and runs the C program printing every check as `key value`.
fn run_c(dir: &Path, checks: &[Check]) -> BTreeMap<String, i128> {
    let includes = "#include <stdint.h>\n#include \"ze_api.h\"\n#include \"ze_ddi.h\"\n\
                    #include \"zet_ddi.h\"\n#include \"zes_ddi.h\"";
    // GNU C: the function-type checks use `__builtin_types_compatible_p`.
    c_layout::run_c("ze_header_layout", includes, dir, "gnu11", checks)
}

#[test]
fn the_bindings_match_the_level_zero_headers() {
    let Some(dir) = find_headers() else { return };
    let mut checks = Vec::new();

    // Structs.
    layout_checks!(checks, ze_device_uuid_t { id });
    layout_checks!(
        checks,
        ze_device_properties_t {
            stype,
            pNext,
            r#type,
            vendorId,
            deviceId,
            flags,
            subdeviceId,
            coreClockRate,
            maxMemAllocSize,
            maxHardwareContexts,
            maxCommandQueuePriority,
            numThreadsPerEU,
            physicalEUSimdWidth,
            numEUsPerSubslice,
            numSubslicesPerSlice,
            numSlices,
            timerResolution,
            timestampValidBits,
            kernelTimestampValidBits,
            uuid,
            name,
        }
    );
    layout_checks!(
        checks,
        ze_context_desc_t {
            stype,
            pNext,
            flags
        }
    );
    layout_checks!(
        checks,
        ze_device_mem_alloc_desc_t {
            stype,
            pNext,
            flags,
            ordinal
        }
    );
    layout_checks!(
        checks,
        ze_host_mem_alloc_desc_t {
            stype,
            pNext,
            flags
        }
    );
    layout_checks!(
        checks,
        ze_memory_allocation_properties_t {
            stype,
            pNext,
            r#type,
            id,
            pageSize
        }
    );
    layout_checks!(
        checks,
        ze_command_queue_desc_t {
            stype,
            pNext,
            ordinal,
            index,
            flags,
            mode,
            priority
        }
    );
    layout_checks!(
        checks,
        ze_event_pool_desc_t {
            stype,
            pNext,
            flags,
            count
        }
    );
    layout_checks!(
        checks,
        ze_event_desc_t {
            stype,
            pNext,
            index,
            signal,
            wait
        }
    );
    let checked_structs: BTreeSet<String> = checks
        .iter()
        .filter_map(|c| c.key.strip_prefix("sizeof.").filter(|k| !k.contains('.')))
        .map(str::to_owned)
        .collect();

    // Typedefs: enums, flags, handles.
    sizes!(
        checks,
        ze_result_t,
        ze_api_version_t,
        ze_structure_type_t,
        ze_device_type_t,
        ze_memory_type_t,
        ze_command_queue_mode_t,
        ze_command_queue_priority_t,
        ze_init_flags_t,
        ze_device_property_flags_t,
        ze_context_flags_t,
        ze_device_mem_alloc_flags_t,
        ze_host_mem_alloc_flags_t,
        ze_command_queue_flags_t,
        ze_event_pool_flags_t,
        ze_event_scope_flags_t,
        ze_driver_handle_t,
        ze_device_handle_t,
        ze_context_handle_t,
        ze_command_list_handle_t,
        ze_event_pool_handle_t,
        ze_event_handle_t,
    );

    // Constants.
    let constants: Vec<(&str, i128)> = enum_constants()
        .into_iter()
        .chain(FREE_CONSTANTS.iter().copied())
        .collect();
    for &(name, value) in &constants {
        checks.push(Check {
            key: format!("const.{name}"),
            c_expr: name.to_owned(),
            rust: value,
        });
    }

    // Function types.
    for f in sys::FUNCTIONS {
        let params: Vec<String> = f.params.iter().map(|p| c_type(p)).collect();
        checks.push(Check {
            key: format!("fn.{}", f.name),
            c_expr: format!(
                "__builtin_types_compatible_p(__typeof__(&{}), {} (*)({}))",
                f.name,
                c_type(f.ret),
                params.join(", ")
            ),
            rust: 1,
        });
    }

    // The test driver's DDI tables.
    for table in ddi::TABLES.iter().chain(ddi::SLOT_TABLES) {
        let t = table.name;
        checks.push(Check {
            key: format!("sizeof.{t}"),
            c_expr: format!("sizeof({t})"),
            rust: table.size as i128,
        });
        checks.push(Check {
            key: format!("getter.{}", table.getter),
            c_expr: format!(
                "__builtin_types_compatible_p(__typeof__(&{}), ze_result_t (*)(ze_api_version_t, {t}*))",
                table.getter
            ),
            rust: 1,
        });
        for &(field, offset, function) in table.fields {
            checks.push(Check {
                key: format!("offsetof.{t}.{field}"),
                c_expr: format!("offsetof({t}, {field})"),
                rust: offset as i128,
            });
            if let Some(function) = function {
                checks.push(Check {
                    key: format!("slot.{t}.{field}"),
                    c_expr: format!(
                        "__builtin_types_compatible_p(__typeof__((({t} *)0)->{field}), __typeof__(&{function}))"
                    ),
                    rust: 1,
                });
            }
        }
    }

    let c = run_c(&dir, &checks);
    let mut errors = Vec::new();
    for check in &checks {
        match c.get(&check.key) {
            None => errors.push(format!("{}: the C program printed no value", check.key)),
            Some(&v) if v != check.rust => errors.push(format!(
                "{}: C says {v}, Rust says {} ({})",
                check.key, check.rust, check.c_expr
            )),
            Some(_) => {}
        }
    }

    // Nothing in sys.rs escapes the checks above.
    let sys_src = strip_comments(include_str!("../src/sys.rs"));
    let checked_names: BTreeSet<&str> = constants.iter().map(|c| c.0).collect();
    for name in idents(&sys_src, "ZE_") {
        if !checked_names.contains(name.as_str()) {
            errors.push(format!(
                "sys::{name}: not compared with the header; add it to this test"
            ));
        }
    }
    let checked_sizes: BTreeSet<String> = checks
        .iter()
        .filter_map(|c| c.key.strip_prefix("sizeof."))
        .map(str::to_owned)
        .collect();
    for word in ["pub struct ", "pub type "] {
        for line in sys_src.lines().filter_map(|l| l.trim().strip_prefix(word)) {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let is_binding = name.starts_with("ze_") && !name.starts_with("_");
            if is_binding && !checked_sizes.contains(&name) && !checked_structs.contains(&name) {
                errors.push(format!(
                    "sys::{name}: not compared with the header; add it to this test"
                ));
            }
        }
    }

    // Every result code of the header has a name on the Rust side.
    let header =
        strip_comments(&std::fs::read_to_string(dir.join("ze_api.h")).expect("read ze_api.h"));
    let start = header
        .find("typedef enum _ze_result_t")
        .expect("ze_result_t in ze_api.h");
    let end = start + header[start..].find('}').expect("end of ze_result_t");
    for name in idents(&header[start..end], "ZE_RESULT_") {
        if name != "ZE_RESULT_FORCE_UINT32" && ze_result_t::ALL.iter().all(|(n, _)| *n != name) {
            errors.push(format!(
                "{name}: a result code of the header that ze_result_t lacks"
            ));
        }
    }

    assert!(
        errors.is_empty(),
        "ze_header_layout: the bindings disagree with {} in {} place(s):\n  {}\n",
        dir.display(),
        errors.len(),
        errors.join("\n  ")
    );
    eprintln!(
        "ze_header_layout: OK: {} checks ({} structs, {} constants, {} functions, {} DDI tables) \
         match {}",
        checks.len(),
        checked_structs.len(),
        constants.len(),
        sys::FUNCTIONS.len(),
        ddi::TABLES.len() + ddi::SLOT_TABLES.len(),
        dir.display()
    );
}
