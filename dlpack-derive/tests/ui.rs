//! Compile-time behaviour: right uses compile (and run), wrong uses fail with a message spanned
//! on the mistake. The `.stderr` files hold rustc's exact output under the pinned toolchain
//! (rust-toolchain.toml); regenerate them with `TRYBUILD=overwrite` after a toolchain bump and
//! review the diff.

#[test]
#[cfg_attr(
    miri,
    ignore = "trybuild runs cargo and rustc, which Miri cannot interpret"
)]
fn right_uses_compile_and_wrong_uses_fail_with_a_message_on_the_mistake() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/input/*.rs");
    cases.compile_fail("tests/ui/attributes/*.rs");
    cases.compile_fail("tests/ui/roles/*.rs");
    cases.compile_fail("tests/ui/types/*.rs");
}
