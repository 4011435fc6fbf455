//! Checks across fields and attributes, after parsing: which roles are present, missing or
//! given twice, and what the struct's shape and layout allow.

use crate::ast::{Input, Style};
use crate::attr::{Errors, Role};

/// Records every mistake in how the struct's parts fit together.
pub(crate) fn check(input: &Input<'_>, errors: &mut Errors) {
    check_lifetimes(input, errors);
    check_generic_names(input, errors);
    check_packed(input, errors);
    if input.style == Style::Tuple && input.fields.iter().all(|f| f.attrs.role.get().is_none()) {
        errors.spanned(
            input.ident,
            "#[derive(DLPack)] on a tuple struct needs attributes on its fields: mark the buffer #[dlpack(data)] and the sizes #[dlpack(shape)], e.g. `struct Image(#[dlpack(data)] Vec<u8>, #[dlpack(shape)] [usize; 2]);`",
        );
        return;
    }
    for role in Role::ALL {
        let mut with_role = input.fields.iter().filter(|f| f.role() == Some(role));
        let Some(first) = with_role.next() else {
            continue;
        };
        for again in with_role {
            errors.at(
                again.role_span(),
                format_args!(
                    "a second #[dlpack({})] field: {} already has this role, and each role goes on one field",
                    role.key(),
                    first.describe()
                ),
            );
        }
    }
    if input.field(Role::Data).is_none() {
        errors.spanned(
            input.ident,
            match input.style {
                Style::Unit => "#[derive(DLPack)] needs fields: a unit struct holds no data; add a buffer field marked #[dlpack(data)] and a shape field marked #[dlpack(shape)]".to_string(),
                _ => "missing #[dlpack(data)]: mark the field that holds the elements (a `Vec<T>`, `Box<[T]>`, `Arc<[T]>` or another `dlpack_core::Buffer`)".to_string(),
            },
        );
    }
    if input.field(Role::Shape).is_none() && input.style != Style::Unit {
        errors.spanned(
            input.ident,
            "missing #[dlpack(shape)]: mark the field that holds the sizes (a `Vec<usize>`, `[usize; N]`, `Vec<i64>` or another `dlpack_core::Dims`)",
        );
    }
    if let (Some(field), Some(span)) = (input.field(Role::Device), input.attrs.device.span()) {
        errors.at(
            span,
            format_args!(
                "the device is given twice: by #[dlpack(device = ...)] on the struct and by the #[dlpack(device)] field {}; keep one",
                field.describe()
            ),
        );
    }
}

/// A derived type moves into a managed tensor that outlives any borrow, so it must be `'static`.
fn check_lifetimes(input: &Input<'_>, errors: &mut Errors) {
    for lifetime in input.generics.lifetimes() {
        errors.spanned(
            &lifetime.lifetime,
            format_args!(
                "#[derive(DLPack)] needs a struct that owns its data: a managed tensor may outlive any borrow, so the struct cannot have the lifetime parameter `{}`",
                lifetime.lifetime
            ),
        );
    }
}

/// The generated code names dlpack-core through the alias `__dlpack` and binds locals named
/// `__data`, `__shape`, ...: a type parameter of that name would hide the alias, and a const
/// parameter would turn a binding into a pattern, both with errors inside the generated code
/// that do not point at the cause. Names starting with `__` are reserved for it instead.
fn check_generic_names(input: &Input<'_>, errors: &mut Errors) {
    let names = input
        .generics
        .params
        .iter()
        .filter_map(|param| match param {
            syn::GenericParam::Type(param) => Some(&param.ident),
            syn::GenericParam::Const(param) => Some(&param.ident),
            syn::GenericParam::Lifetime(_) => None,
        });
    for name in names.filter(|name| name.to_string().starts_with("__")) {
        errors.spanned(
            name,
            format_args!(
                "#[derive(DLPack)] reserves generic parameter names that start with `__` for its generated code (`__dlpack`, `__data`, ...), which `{name}` would clash with; rename the parameter"
            ),
        );
    }
}

/// The generated code borrows the fields (`&mut self.data`, `&self.shape`, ...), and a field of a
/// packed struct may be unaligned, so a packed struct is refused here, on its `packed`, rather
/// than by rustc's E0793 inside the generated code. Other representations (`C`, `align(N)`,
/// `transparent`, ...) keep every field aligned.
fn check_packed(input: &Input<'_>, errors: &mut Errors) {
    for attr in input
        .all_attrs
        .iter()
        .filter(|attr| attr.path().is_ident("repr"))
    {
        // A malformed `#[repr(...)]` is rustc's to report.
        let Ok(hints) = attr.parse_args_with(
            syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
        ) else {
            continue;
        };
        for packed in hints.iter().filter(|hint| hint.path().is_ident("packed")) {
            errors.spanned(
                packed,
                "#[derive(DLPack)] cannot be used on a `#[repr(packed)]` struct: the generated code takes references to its fields (the buffer, the shape, ...), which must be aligned, and a packed struct may leave a field unaligned (rustc's E0793); DLPack data must be aligned too. Remove `packed`; `#[repr(C)]` and `#[repr(align(N))]` work",
            );
        }
    }
}
