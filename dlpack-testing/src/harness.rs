//! A small test harness for the test binaries that need their own `main` (`harness = false`):
//! those that load a driver library into the process before any test runs (dlpack-oneapi's
//! Level Zero tests, dlpack-cuda's suites), and the GPU suite, which must say when it did not
//! run. It runs named cases the way libtest does, and builds the workspace's test driver
//! libraries.
//!
//! ```
//! use dlpack_testing::harness::{Case, cases, run_cases};
//!
//! fn adds(base: &u32) { assert_eq!(base + 1, 3) }
//! fn multiplies(base: &u32) { assert_eq!(base * 2, 4) }
//!
//! let all: &[Case<u32>] = cases![u32; adds, multiplies];
//! let outcome = run_cases("arithmetic", &2, all, &[], |_name, case| case());
//! assert_eq!(outcome.failed, Vec::<&str>::new());
//! assert_eq!(outcome.ran, 2);
//! ```

use std::ffi::OsString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A named test case taking the suite's fixture.
pub type Case<X> = (&'static str, fn(&X));

/// `cases![Fixture; a, b]`: the cases `a` and `b`, named after their functions.
#[macro_export]
macro_rules! cases {
    ($fixture:ty; $($case:ident),* $(,)?) => {
        &[$((stringify!($case), $case as fn(&$fixture))),*]
    };
}
pub use crate::cases;

/// What [`run_cases`] did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The cases that ran.
    pub ran: usize,
    /// The names of those that panicked.
    pub failed: Vec<&'static str>,
    /// Cases left out by the filters.
    pub filtered: usize,
    /// `--list` was given: the cases were listed, none ran.
    pub listed: bool,
}

impl Outcome {
    /// Prints libtest's summary line and turns the outcome into an exit code.
    pub fn report(&self, suite: &str) -> ExitCode {
        if self.listed {
            return ExitCode::SUCCESS;
        }
        if !self.failed.is_empty() {
            println!("\nfailures ({suite}):");
            for name in &self.failed {
                println!("    {name}");
            }
        }
        let verdict = if self.failed.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "\ntest result: {verdict}. {} passed; {} failed; {} filtered out ({suite})\n",
            self.ran - self.failed.len(),
            self.failed.len(),
            self.filtered
        );
        if self.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

/// libtest's options that take a value (`--test-threads 2`), besides `--skip`: the value is
/// not a filter.
const OPTIONS_WITH_VALUES: [&str; 6] = [
    "--test-threads",
    "--color",
    "--format",
    "--logfile",
    "--shuffle-seed",
    "-Z",
];

/// The name filters and `--skip` filters in libtest's arguments.
fn filters(args: &[String]) -> (Vec<&str>, Vec<&str>) {
    let (mut include, mut skip) = (Vec::new(), Vec::new());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--skip" {
            skip.extend(args.next().map(String::as_str));
        } else if let Some(value) = arg.strip_prefix("--skip=") {
            skip.push(value);
        } else if OPTIONS_WITH_VALUES.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            include.push(arg.as_str());
        }
    }
    (include, skip)
}

/// Runs `cases` like libtest does, with the arguments `args` (the binary's, without its name):
/// names select by substring (`--exact`: by whole name), `--skip NAME` leaves out what it
/// matches, `--list` lists the cases, other options (and their values) are ignored. Each case
/// runs inside `around`, which can check for leaks after it; a case fails when it or `around`
/// panics.
pub fn run_cases<X>(
    suite: &str,
    fixture: &X,
    cases: &[Case<X>],
    args: &[String],
    around: impl Fn(&str, &dyn Fn()),
) -> Outcome {
    if args.iter().any(|a| a == "--list") {
        for (name, _) in cases {
            println!("{name}: test");
        }
        return Outcome {
            listed: true,
            ..Outcome::default()
        };
    }
    let exact = args.iter().any(|a| a == "--exact");
    let (include, skip) = filters(args);
    let matches = |name: &str, filter: &str| {
        if exact {
            name == filter
        } else {
            name.contains(filter)
        }
    };
    let selected: Vec<&Case<X>> = cases
        .iter()
        .filter(|(name, _)| include.is_empty() || include.iter().any(|f| matches(name, f)))
        .filter(|(name, _)| !skip.iter().any(|f| matches(name, f)))
        .collect();
    println!("\nrunning {} tests ({suite})", selected.len());
    let mut failed = Vec::new();
    for (name, case) in &selected {
        match catch_unwind(AssertUnwindSafe(|| around(name, &|| case(fixture)))) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    Outcome {
        ran: selected.len(),
        failed,
        filtered: cases.len() - selected.len(),
        listed: false,
    }
}

/// The test arguments of this process: its command line without the binary's name.
pub fn test_args() -> Vec<String> {
    std::env::args().skip(1).collect()
}

/// A `cdylib` of this workspace: the file named by the environment variable `path_var` when it
/// is set, or else built now with `cargo build -p <package>` run in `workspace_dir`, and found
/// among the artifacts cargo reports as the library whose file stem contains `lib_name`.
///
/// The nested cargo shares the workspace's target directory. That does not deadlock: cargo
/// releases its build lock before it runs test binaries (checked with cargo 1.95); if another
/// cargo is building, this one waits for the lock like any build.
///
/// `Err` when cargo cannot be run; a build that fails, or a path that is not a file, is a panic,
/// since the library is part of this workspace.
pub fn workspace_cdylib(
    package: &str,
    lib_name: &str,
    path_var: &str,
    workspace_dir: &Path,
) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(path_var).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{path_var}={} is not a file; expected the path of the {lib_name} library",
            path.display()
        );
        return Ok(path);
    }
    let cargo: OsString = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let output = Command::new(&cargo)
        .args([
            "build",
            "-p",
            package,
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(workspace_dir)
        .output()
        .map_err(|e| {
            format!(
                "cannot run cargo ({}) to build {package}: {e}; set {path_var}",
                cargo.to_string_lossy()
            )
        })?;
    assert!(
        output.status.success(),
        "building {package} (cargo build -p {package}) failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains(lib_name))
        .find_map(|l| {
            let rest = &l[l.find("\"filenames\":[\"")? + 14..];
            let end = rest.find('"')?;
            Some(PathBuf::from(rest[..end].replace("\\\\", "\\")))
        })
        .unwrap_or_else(|| panic!("cargo built no {lib_name} library:\n{stdout}"));
    assert!(
        path.is_file(),
        "cargo reported {}, which is not a file",
        path.display()
    );
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn option_values_are_not_filters_and_skip_excludes() {
        assert_eq!(
            filters(&args(
                "--test-threads 1 --color always round --skip=slow --skip two -q"
            )),
            (vec!["round"], vec!["slow", "two"])
        );
        assert_eq!(
            filters(&args("--nocapture --exact a b")),
            (vec!["a", "b"], vec![])
        );
    }

    fn one(_: &()) {}
    fn two(_: &()) {}

    #[test]
    fn skip_and_exact_select_as_libtest_does() {
        let all: &[Case<()>] = cases![(); one, two];
        let run = |line: &str| run_cases("t", &(), all, &args(line), |_, case| case());
        assert_eq!(run("--test-threads 1").ran, 2);
        assert_eq!(run("--skip one").ran, 1);
        assert_eq!(run("--exact on").ran, 0);
        assert_eq!(run("on").ran, 1);
    }
}
