//! Checks of Rust bindings against a C header: the numbers both sides must agree on (sizes,
//! alignments, field offsets, constants), and a runner that compiles and runs the C program that
//! prints the C side. dlpack-core's `header_layout` test (`dlpack.h`) and dlpack-oneapi's
//! `ze_header_layout` test (Level Zero) are built on it.
//!
//! ```
//! use dlpack_testing::c_layout::Check;
//!
//! #[repr(C)]
//! struct pair_t {
//!     first: u8,
//!     r#type: u32,
//! }
//!
//! let mut checks: Vec<Check> = Vec::new();
//! dlpack_testing::layout_checks!(checks, pair_t { first, r#type });
//! let keys: Vec<&str> = checks.iter().map(|c| c.key.as_str()).collect();
//! assert_eq!(keys[..3], ["sizeof.pair_t", "alignof.pair_t", "offsetof.pair_t.first"]);
//! assert_eq!(checks[4].c_expr, "offsetof(pair_t, type)"); // C's name, without `r#`
//! assert_eq!(checks[4].rust, 4);
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// One number both sides must agree on: its key in the C program's output, the C expression that
/// computes it, and Rust's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The name it is printed and compared under, such as `offsetof.DLTensor.ndim`.
    pub key: String,
    /// The C expression of the value, such as `offsetof(DLTensor, ndim)`.
    pub c_expr: String,
    /// The value on the Rust side.
    pub rust: i128,
}

/// The size of a field's type, given a projection to it (no value of `T` is ever made); used by
/// [`layout_checks!`](crate::layout_checks).
pub fn field_size<T, F>(_project: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// The C name of a Rust field name: `r#type` is C's `type`.
pub fn c_field(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}

/// `layout_checks!(checks, Struct { field, ... })` pushes onto `checks` (a `Vec<Check>`) the size
/// and alignment of `Struct` and the offset and size of every field, under the C names of the
/// type and fields (the same as Rust's, but for a raw identifier's `r#`).
#[macro_export]
macro_rules! layout_checks {
    ($checks:ident, $ty:ident { $($field:ident),* $(,)? }) => {{
        let ty = stringify!($ty);
        $checks.push($crate::c_layout::Check {
            key: format!("sizeof.{ty}"),
            c_expr: format!("sizeof({ty})"),
            rust: ::core::mem::size_of::<$ty>() as i128,
        });
        $checks.push($crate::c_layout::Check {
            key: format!("alignof.{ty}"),
            c_expr: format!("_Alignof({ty})"),
            rust: ::core::mem::align_of::<$ty>() as i128,
        });
        $(
            let field = $crate::c_layout::c_field(stringify!($field));
            $checks.push($crate::c_layout::Check {
                key: format!("offsetof.{ty}.{field}"),
                c_expr: format!("offsetof({ty}, {field})"),
                rust: ::core::mem::offset_of!($ty, $field) as i128,
            });
            $checks.push($crate::c_layout::Check {
                key: format!("sizeof.{ty}.{field}"),
                c_expr: format!("sizeof((({ty} *)0)->{field})"),
                rust: $crate::c_layout::field_size(|s: &$ty| &s.$field) as i128,
            });
        )*
    }};
}

/// C source text without its comments (each block comment becomes a space, keeping its line
/// breaks); string and character literals are kept as they are, `//` and `/*` inside them
/// included.
///
/// ```
/// use dlpack_testing::c_layout::strip_comments;
/// let c = "int a; // one\n/* two\n */ char *s = \"/* no */\";";
/// assert_eq!(strip_comments(c), "int a; \n\n  char *s = \"/* no */\";");
/// ```
pub fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    if b[i] == b'\n' {
                        out.push(b'\n');
                    }
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            q @ (b'"' | b'\'') => {
                out.push(q);
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' {
                        out.push(b[i]);
                        i += 1;
                    }
                    if i < b.len() {
                        out.push(b[i]);
                        i += 1;
                    }
                }
                if i < b.len() {
                    out.push(q);
                    i += 1;
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A fresh directory for the C program, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("{what}: cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles and runs a C program that prints every check's C value, and returns them by key.
///
/// The program includes `<stddef.h>` and `<stdio.h>`, then `includes` (the `#include` lines of
/// the headers under test), with `include_dir` on the include path, and is compiled with the C
/// compiler `$CC` (default `cc`; it may carry arguments, as in `ccache gcc`) as `-std=<c_std>
/// -Wall`. `what` names the test in panic messages. Panics, with the compiler's output and the
/// program, when the program does not compile or run.
pub fn run_c(
    what: &str,
    includes: &str,
    include_dir: &Path,
    c_std: &str,
    checks: &[Check],
) -> BTreeMap<String, i128> {
    let dir = TempDir::new(what);
    let mut c =
        format!("#include <stddef.h>\n#include <stdio.h>\n{includes}\n\nint main(void) {{\n");
    for check in checks {
        writeln!(
            c,
            "    printf(\"%s %lld\\n\", \"{}\", (long long)({}));",
            check.key, check.c_expr
        )
        .unwrap();
    }
    c.push_str("    return 0;\n}\n");
    let c_path = dir.0.join("layout.c");
    let exe_path = dir.0.join("layout");
    std::fs::write(&c_path, &c)
        .unwrap_or_else(|e| panic!("{what}: cannot write the C program: {e}"));

    let cc = std::env::var("CC")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cc".to_owned());
    let mut words = cc.split_whitespace();
    let program = words.next().expect("CC is not empty");
    let out = Command::new(program)
        .args(words)
        .arg(format!("-std={c_std}"))
        .args(["-Wall", "-I"])
        .arg(include_dir)
        .arg("-o")
        .arg(&exe_path)
        .arg(&c_path)
        .output()
        .unwrap_or_else(|e| {
            panic!("{what}: cannot run the C compiler `{cc}` (set CC to override): {e}")
        });
    assert!(
        out.status.success(),
        "{what}: `{cc}` failed to compile the layout program against {}:\n{}\n--- program ---\n{c}",
        include_dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(&exe_path)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run the compiled layout program: {e}"));
    assert!(
        out.status.success(),
        "{what}: the layout program failed: {:?}",
        out.status
    );
    let stdout = String::from_utf8(out.stdout).expect("the layout program prints ASCII");
    stdout
        .lines()
        .map(|line| {
            let (name, value) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("{what}: bad line from the C program: {line:?}"));
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("{what}: bad value from the C program: {line:?}"));
            (name.to_owned(), value)
        })
        .collect()
}
