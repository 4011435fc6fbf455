//! Code generation: the `Export` impl and the `TryFrom<ManagedTensor>` impl.
//!
//! The output is one `const _: () = { ... };`. Inside, `use <facade> as __dlpack;` names the
//! facade once (`::dlpack_core`, or the path from `#[dlpack(crate = "...")]`); everything else is
//! an absolute path (`::core::...`, primitive types through `::core::primitive`), no trait
//! method is called by method syntax, and the generated locals are `__`-prefixed with mixed-site
//! hygiene, so the output compiles under `#![no_implicit_prelude]` and next to user items of any
//! name (a `let` would match a user's constant of the same name, hence the prefix).
//!
//! Trait bounds on field types go into the impls' where clauses, each spanned on the field's
//! type: a type that is not a buffer (or not a dimension list) is reported on the field with
//! dlpack-core's `on_unimplemented` message, and generic structs get exactly the bounds their
//! fields need.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote_spanned};
use syn::spanned::Spanned;

use crate::ast::{Field, Input};
use crate::attr::{self, Errors, Role};
use crate::check;

/// `quote!` with mixed-site hygiene: the generated locals (`__shape`, `__desc`, ...) and the
/// user's locals do not see each other.
macro_rules! q {
    ($($tt:tt)*) => {
        quote::quote_spanned!(proc_macro2::Span::mixed_site()=> $($tt)*)
    };
}

/// A span with mixed-site hygiene located at `tokens`, so that an error in code built with it is
/// reported on the user's field type or expression.
fn at(tokens: &impl Spanned) -> Span {
    Span::mixed_site().located_at(tokens.span())
}

/// Parses, checks and expands one `#[derive(DLPack)]`; every mistake found is in the error.
pub(crate) fn derive(input: &syn::DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let parsed = crate::ast::Input::from_syn(input, &mut errors);
    if let Some(parsed) = &parsed {
        check::check(parsed, &mut errors);
    }
    errors.finish()?;
    match parsed {
        Some(parsed) => Ok(expand(&parsed)),
        // from_syn returns None only after recording an error, which `finish` returned.
        None => Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(DLPack)] works on structs only",
        )),
    }
}

/// The parts of a checked struct that code generation uses.
struct Parts<'a> {
    /// `__dlpack`, the alias of the facade (`::dlpack_core` unless `crate = "..."` says
    /// otherwise) that the generated code names everything through.
    krate: TokenStream,
    data: &'a Field<'a>,
    shape: &'a Field<'a>,
    strides: Option<&'a Field<'a>>,
    byte_offset: Option<&'a Field<'a>>,
    device: Option<&'a Field<'a>>,
}

fn expand(input: &Input<'_>) -> TokenStream {
    let (Some(data), Some(shape)) = (input.field(Role::Data), input.field(Role::Shape)) else {
        // `check` reported a missing data or shape field; nothing is generated without them.
        return TokenStream::new();
    };
    let parts = Parts {
        krate: q! { __dlpack },
        data,
        shape,
        strides: input.field(Role::Strides),
        byte_offset: input.field(Role::ByteOffset),
        device: input.field(Role::Device),
    };
    let export = export_impl(input, &parts);
    let import = match input.attrs.export_only.get() {
        Some(()) => TokenStream::new(),
        None => import_impl(input, &parts),
    };
    // Everything reaches the facade through this one alias: a path that does not resolve is
    // reported once, on the `crate = "..."` string, not at every use.
    let facade = attr::crate_path(&input.attrs);
    let alias = match facade.clone().into_iter().next() {
        // Spanned like the path, so that rustc's span of the whole `use` is the string's.
        Some(first) => respan(&q! { as __dlpack }, first.span()),
        None => q! { as __dlpack },
    };
    q! {
        #[automatically_derived]
        const _: () = {
            use #facade #alias;
            #export
            #import
        };
    }
}

/// `tokens` with every span (inside groups too) replaced by `span`.
fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|mut tree| {
            if let proc_macro2::TokenTree::Group(group) = &tree {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(&group.stream(), span));
                inner.set_span(span);
                tree = proc_macro2::TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// The span of a type's last token: tokens carrying it make rustc's span of a where predicate
/// (from the type's first token to the bound's last) cover exactly the type.
fn end_of(ty: &syn::Type) -> Span {
    ty.to_token_stream()
        .into_iter()
        .last()
        .map_or_else(|| ty.span(), |tree| tree.span())
}

/// `Type: Bound`, every token of the bound (facade path included) located at the end of the
/// type, so that rustc reports an unsatisfied bound on the field's type, with dlpack-core's
/// `on_unimplemented` message, rather than on the derive.
fn bound(ty: &syn::Type, bound: &TokenStream) -> TokenStream {
    let span = end_of(ty);
    let bound = respan(bound, span);
    quote_spanned! {span=> #ty: #bound }
}

/// The bounds the export needs: the data field is a buffer, the shape and strides fields are
/// dimension lists, the byte offset converts to `u64`.
fn export_bounds(parts: &Parts<'_>) -> Vec<TokenStream> {
    let k = &parts.krate;
    let mut bounds = vec![
        bound(parts.data.ty, &q! { #k::Buffer }),
        bound(parts.shape.ty, &q! { #k::Dims }),
    ];
    if let Some(strides) = parts.strides {
        bounds.push(bound(strides.ty, &q! { #k::Dims }));
    }
    if let Some(offset) = parts.byte_offset {
        let ty = offset.ty;
        bounds.push(bound(ty, &q! { ::core::marker::Copy }));
        let span = end_of(ty);
        bounds.push(quote_spanned! {span=>
            ::core::primitive::u64: ::core::convert::TryFrom<#ty>
        });
    }
    bounds
}

/// `Name<..>: Send + 'static` (what `Export` asks of every producer) when the struct has type
/// parameters, so that a parameter no role bounds (`M` in `meta: M`) is required to be `Send`
/// and `'static` by the impls rather than refused by rustc; a struct without type parameters
/// gets rustc's own message on the derive instead.
fn self_bound(input: &Input<'_>) -> Option<TokenStream> {
    input.generics.type_params().next()?;
    let ident = input.ident;
    let (_, ty_generics, _) = input.generics.split_for_impl();
    Some(q! { #ident #ty_generics: ::core::marker::Send + 'static })
}

/// The where clause of an impl: the struct's own predicates, then `bounds`, each once (a shape
/// and strides of the same type need one `Dims` predicate: a repeated one would set off clippy's
/// `type_repetition_in_bounds` in the user's crate).
fn where_clause(generics: &syn::Generics, bounds: &[TokenStream]) -> TokenStream {
    let own = generics
        .where_clause
        .iter()
        .flat_map(|clause| clause.predicates.iter());
    let mut seen = std::collections::HashSet::new();
    let bounds = bounds.iter().filter(|bound| seen.insert(bound.to_string()));
    q! { where #(#own,)* #(#bounds,)* }
}

fn export_impl(input: &Input<'_>, parts: &Parts<'_>) -> TokenStream {
    let k = &parts.krate;
    let ident = input.ident;
    let mut bounds = export_bounds(parts);
    bounds.extend(self_bound(input));
    let where_clause = where_clause(input.generics, &bounds);
    let (impl_generics, ty_generics, _) = input.generics.split_for_impl();
    let shape_member = &parts.shape.member;
    let shape_ty = parts.shape.ty;
    let describe_call = describe_call(parts);
    let read_only = input.attrs.read_only.get().map(|()| {
        q! { __desc.flags |= #k::Flags::READ_ONLY; }
    });
    let device = device_override(input, parts);
    // What makes a description untrustworthy: strides of another length than the shape, a
    // device override of another device type than the buffer's.
    let mut distrust = Vec::new();
    if let Some(strides) = parts.strides {
        let (member, ty) = (&strides.member, strides.ty);
        distrust.push(q! { <#ty as #k::Dims>::ndim(&self.#member) != __shape.len() });
    }
    if device.is_some() {
        distrust.push(q! { !__same_device_type });
    }
    let refuse = (!distrust.is_empty()).then(|| {
        q! {
            // An empty allocation: the export constructor refuses the description.
            if #(#distrust)||* {
                if let ::core::option::Option::Some(__allocation) = &mut __desc.allocation {
                    __allocation.end = __allocation.start;
                }
            }
        }
    });
    let body = if read_only.is_some() || refuse.is_some() {
        q! {
            let mut __desc = #describe_call;
            #read_only
            #device
            #refuse
            __desc
        }
    } else {
        describe_call
    };
    // A read-only tensor keeps its `Vec`: the user asked that no consumer write it.
    let data_ty = parts.data.ty;
    let (gives_vec, give_vec) = match input.attrs.read_only.get() {
        Some(()) => (q! { false }, q! { let _ = __slot; }),
        None => (
            q! { <#data_ty as #k::Buffer>::GIVES_VEC },
            give_vec_body(parts),
        ),
    };
    let check = check_body(input, parts);
    // SAFETY (of the generated `unsafe impl`): `describe` reports the data field's buffer
    // through `describe_buffer`, whose description names the buffer's allocation, so the export
    // constructor refuses any layout (shape, strides, byte offset) that reaches outside the
    // buffer. The `Buffer` contract makes that allocation initialised elements of `Elem` on the
    // buffer's device, valid while the struct lives and writable unless the buffer is read-only
    // (the description then is too). The device is overridden only by one of the same device
    // type; a description that cannot be trusted (strides of another length than the shape, an
    // override naming another device type) gets an empty allocation, which export refuses.
    // `ndim` is the shape field's, read once by the export constructor, which sizes the arrays
    // `describe` writes. `give_vec` hands the buffer's `Vec` over only when the tensor is all of
    // it, row-major from its first element (and `Buffer::give_vec` gives only a host `Vec`).
    q! {
        #[automatically_derived]
        unsafe impl #impl_generics #k::Export for #ident #ty_generics #where_clause {
            const GIVES_VEC: ::core::primitive::bool = #gives_vec;

            fn check(&self) -> ::core::result::Result<(), #k::Error> {
                #check
            }

            fn ndim(&self) -> ::core::primitive::usize {
                <#shape_ty as #k::Dims>::ndim(&self.#shape_member)
            }

            fn describe(
                &mut self,
                __shape: &mut [::core::primitive::i64],
                __strides: &mut [::core::primitive::i64],
            ) -> #k::ExportDesc {
                #body
            }

            fn give_vec(&mut self, __slot: &mut dyn ::core::any::Any) {
                #give_vec
            }
        }
    }
}

/// `Export::check`: the typed errors for fields that disagree (strides of another length than
/// the shape, a device of another type than the buffer's), which `describe` can only refuse.
fn check_body(input: &Input<'_>, parts: &Parts<'_>) -> TokenStream {
    let k = &parts.krate;
    let strides = parts.strides.map(|field| {
        let (member, ty) = (&field.member, field.ty);
        let shape = &parts.shape.member;
        let shape_ty = parts.shape.ty;
        q! {
            let __found = <#ty as #k::Dims>::ndim(&self.#member);
            let __expected = <#shape_ty as #k::Dims>::ndim(&self.#shape);
            if __found != __expected {
                return ::core::result::Result::Err(#k::Error::NdimMismatch {
                    found: __found,
                    expected: __expected,
                });
            }
        }
    });
    let device = match (parts.device, input.attrs.device.get()) {
        (Some(field), _) => {
            let (member, ty) = (&field.member, field.ty);
            Some(quote_spanned! {at(ty)=> self.#member })
        }
        (None, Some(expr)) => Some(quote_spanned! {at(expr)=> const { #expr } }),
        (None, None) => None,
    };
    let device = device.map(|device| {
        let data = &parts.data.member;
        let data_ty = parts.data.ty;
        q! {
            let __claimed: #k::Device = #device;
            let __actual = <#data_ty as #k::Buffer>::device(&self.#data);
            if __claimed.device_type != __actual.device_type {
                return ::core::result::Result::Err(#k::Error::DeviceMismatch {
                    claimed: __claimed,
                    actual: __actual,
                });
            }
        }
    });
    q! {
        #strides
        #device
        ::core::result::Result::Ok(())
    }
}

/// `describe_buffer(&mut self.data, &self.shape, <strides>, <offset>, __shape, __strides)`.
fn describe_call(parts: &Parts<'_>) -> TokenStream {
    let k = &parts.krate;
    let data = &parts.data.member;
    let shape = &parts.shape.member;
    let strides = match parts.strides {
        Some(field) => {
            let member = &field.member;
            q! { ::core::option::Option::Some(&self.#member) }
        }
        None => q! { ::core::option::Option::None::<&[::core::primitive::i64; 0]> },
    };
    let offset = byte_offset(parts);
    q! {
        #k::__private::describe_buffer(&mut self.#data, &self.#shape, #strides, #offset, __shape, __strides)
    }
}

/// The byte offset as a `u64`; a value that does not fit becomes `u64::MAX`, which the export
/// constructor refuses (the first element would lie past the buffer).
fn byte_offset(parts: &Parts<'_>) -> TokenStream {
    match parts.byte_offset {
        Some(field) => {
            let (member, ty) = (&field.member, field.ty);
            q! {
                ::core::result::Result::unwrap_or(
                    <::core::primitive::u64 as ::core::convert::TryFrom<#ty>>::try_from(self.#member),
                    ::core::primitive::u64::MAX,
                )
            }
        }
        None => q! { 0 },
    }
}

/// Takes the device of the device field or the constant when it is of the buffer's device type
/// (the ordinal is the user's to name); `__same_device_type` says whether it was.
fn device_override(input: &Input<'_>, parts: &Parts<'_>) -> Option<TokenStream> {
    let k = &parts.krate;
    let device = match (parts.device, input.attrs.device.get()) {
        (Some(field), _) => {
            let (member, ty) = (&field.member, field.ty);
            quote_spanned! {at(ty)=> self.#member }
        }
        (None, Some(expr)) => quote_spanned! {at(expr)=> const { #expr } },
        (None, None) => return None,
    };
    Some(q! {
        let __device: #k::Device = #device;
        let __same_device_type = __device.device_type == __desc.device.device_type;
        if __same_device_type {
            __desc.device = __device;
        }
    })
}

/// `give_vec`: hands the buffer's `Vec` over only when the tensor is exactly the whole buffer,
/// compact row-major from its first element.
fn give_vec_body(parts: &Parts<'_>) -> TokenStream {
    let k = &parts.krate;
    let data = &parts.data.member;
    let data_ty = parts.data.ty;
    let shape = &parts.shape.member;
    let shape_ty = parts.shape.ty;
    let offset = parts.byte_offset.map(|_| {
        let offset = byte_offset(parts);
        q! {
            if #offset != 0 {
                return;
            }
        }
    });
    let strides = parts.strides.map(|field| {
        let (member, ty) = (&field.member, field.ty);
        q! {
            if <#ty as #k::Dims>::ndim(&self.#member) != __ndim {
                return;
            }
            let mut __strides = <[::core::primitive::i64]>::repeat(&[0], __ndim);
            <#ty as #k::Dims>::write_dims(&self.#member, &mut __strides);
            // Exactly the compact row-major strides of the sizes, as an export without strides
            // would write them.
            let mut __step: ::core::primitive::i64 = 1;
            let mut __axis = __ndim;
            while __axis > 0 {
                __axis -= 1;
                if __strides[__axis] != __step {
                    return;
                }
                let __size = __sizes[__axis];
                __step = __step.saturating_mul(if __size > 1 { __size } else { 1 });
            }
        }
    });
    q! {
        #offset
        let __ndim = <#shape_ty as #k::Dims>::ndim(&self.#shape);
        let mut __sizes = <[::core::primitive::i64]>::repeat(&[0], __ndim);
        // The sizes alone: nothing here may touch the buffer's elements (not even take a
        // pointer to them through `&mut`), which the exported tensor still points to if the
        // `Vec` stays where it is.
        <#shape_ty as #k::Dims>::write_dims(&self.#shape, &mut __sizes);
        #strides
        let mut __elements: ::core::primitive::usize = 1;
        for &__size in &__sizes {
            let ::core::result::Result::Ok(__size) =
                <::core::primitive::usize as ::core::convert::TryFrom<::core::primitive::i64>>::try_from(__size)
            else {
                return;
            };
            let ::core::option::Option::Some(__product) = __elements.checked_mul(__size) else {
                return;
            };
            __elements = __product;
        }
        if __elements == <#data_ty as #k::Buffer>::len(&self.#data) {
            #k::__private::give_vec_of_buffer(&mut self.#data, __slot);
        }
    }
}

fn import_impl(input: &Input<'_>, parts: &Parts<'_>) -> TokenStream {
    let k = &parts.krate;
    let ident = input.ident;
    // The export's bounds again, behind a `for<'__dlpack>` that changes nothing for bounds on
    // generic types but makes rustc skip (rather than report a second time) a bound on a
    // concrete type that does not hold: the export impl reports that one already.
    let mut bounds: Vec<_> = export_bounds(parts)
        .into_iter()
        .chain(self_bound(input))
        .map(|bound| q! { for<'__dlpack> #bound })
        .collect();
    // Fields the import has no value for start from `Default` (the byte offset of a compact
    // copy is 0, `u64::default()`).
    for field in &input.fields {
        if matches!(field.role(), None | Some(Role::ByteOffset)) {
            bounds.push(bound(field.ty, &q! { ::core::default::Default }));
        }
    }
    // A device field of another type than `Device` is reported by the export impl alone.
    if let Some(device) = parts.device {
        let ty = device.ty;
        bounds.push(q! { for<'__dlpack> #ty: ::core::convert::From<#k::Device> });
    }
    let where_clause = where_clause(input.generics, &bounds);
    let (impl_generics, ty_generics, _) = input.generics.split_for_impl();

    let data_ty = parts.data.ty;
    let shape_ty = parts.shape.ty;
    let values = input.fields.iter().map(|field| {
        let member = &field.member;
        let ty = field.ty;
        let value = match field.role() {
            Some(Role::Data) => q! { __data },
            Some(Role::Shape) => q! { __shape },
            Some(Role::Strides) => q! { __strides },
            Some(Role::Device) => q! { ::core::convert::From::from(__device) },
            Some(Role::ByteOffset) | None => {
                quote_spanned! {at(ty)=> <#ty as ::core::default::Default>::default() }
            }
        };
        q! { #member: #value }
    });
    let strides = parts.strides.map(|field| {
        let ty = field.ty;
        q! {
            // The copy is compact row-major: `describe_buffer` without strides writes those.
            let __strides: #ty = {
                let __ndim = <#shape_ty as #k::Dims>::ndim(&__shape);
                let mut __sizes = <[::core::primitive::i64]>::repeat(&[0], __ndim);
                let mut __row_major = <[::core::primitive::i64]>::repeat(&[0], __ndim);
                let _ = #k::__private::describe_buffer(
                    &mut __data,
                    &__shape,
                    ::core::option::Option::None::<&[::core::primitive::i64; 0]>,
                    0,
                    &mut __sizes,
                    &mut __row_major,
                );
                <#ty as #k::Dims>::from_dims(&__row_major)?
            };
        }
    });
    let data_mut = parts.strides.map(|_| q! { mut });
    let device = parts.device.map(|_| {
        q! {
            // Where the copy lives; the tensor's own device when it is of the same type, so
            // that an ordinal the buffer type cannot know survives the trip.
            let __device: #k::Device = {
                let __copied = <#data_ty as #k::Buffer>::device(&__data);
                let __claimed = #k::CheckedTensor::device(&__tensor);
                if __claimed.device_type == __copied.device_type {
                    __claimed
                } else {
                    __copied
                }
            };
        }
    });
    q! {
        #[automatically_derived]
        impl #impl_generics ::core::convert::TryFrom<#k::ManagedTensor> for #ident #ty_generics
        #where_clause
        {
            type Error = #k::Error;

            fn try_from(
                __tensor: #k::ManagedTensor,
            ) -> ::core::result::Result<Self, #k::Error> {
                let __tensor = match #k::ManagedTensor::reclaim::<Self>(__tensor) {
                    ::core::result::Result::Ok(__value) => {
                        return ::core::result::Result::Ok(__value);
                    }
                    ::core::result::Result::Err(__tensor) => __tensor,
                };
                let __found = #k::CheckedTensor::dtype(&__tensor);
                let __expected = <<#data_ty as #k::Buffer>::Elem as #k::Element>::DTYPE;
                if __found != __expected {
                    return ::core::result::Result::Err(#k::Error::DataTypeMismatch {
                        found: __found,
                        expected: __expected,
                    });
                }
                let __shape =
                    <#shape_ty as #k::Dims>::from_dims(#k::CheckedTensor::shape(&__tensor))?;
                let #data_mut __data = <#data_ty as #k::Buffer>::copy_from_tensor(&__tensor)?;
                #strides
                #device
                ::core::result::Result::Ok(Self { #(#values,)* })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Expansion snapshots: the generated code for a plain and a generic struct, compared with
    //! the checked-in `tests/expand/*.expanded.rs`. After an intended change to the output, run
    //! `DLPACK_DERIVE_BLESS=1 cargo test -p dlpack-derive --lib` and review the diff.

    /// The derive's output for `input`, formatted.
    fn expand_source(input: &str) -> String {
        let input: syn::DeriveInput = syn::parse_str(input).expect("the input is a struct");
        let tokens = super::derive(&input).expect("the input derives without errors");
        let file: syn::File = syn::parse2(tokens).expect("the expansion is Rust items");
        prettyplease::unparse(&file)
    }

    fn check(name: &str, input: &str, expected: &str) {
        let actual = expand_source(input);
        if std::env::var_os("DLPACK_DERIVE_BLESS").is_some() {
            let path = format!(
                "{}/tests/expand/{name}.expanded.rs",
                env!("CARGO_MANIFEST_DIR")
            );
            std::fs::write(&path, &actual).expect("the snapshot is writable");
            return;
        }
        assert!(
            actual == expected,
            "the expansion of tests/expand/{name}.rs changed; if that is intended, rerun with \
             DLPACK_DERIVE_BLESS=1 and review the diff of tests/expand/{name}.expanded.rs.\n\
             --- expected\n{expected}\n--- actual\n{actual}"
        );
    }

    #[test]
    fn a_plain_struct_expands_to_the_snapshot() {
        check(
            "plain",
            include_str!("../tests/expand/plain.rs"),
            include_str!("../tests/expand/plain.expanded.rs"),
        );
    }

    #[test]
    fn a_generic_struct_expands_to_the_snapshot() {
        check(
            "generic",
            include_str!("../tests/expand/generic.rs"),
            include_str!("../tests/expand/generic.expanded.rs"),
        );
    }

    #[test]
    fn a_renamed_facade_is_the_only_path_to_dlpack_core() {
        let expansion = expand_source(include_str!("../tests/expand/generic.rs"));
        assert!(
            expansion.contains("use tensors as __dlpack;"),
            "{expansion}"
        );
        assert!(!expansion.contains("dlpack_core"), "{expansion}");
        let plain = expand_source(include_str!("../tests/expand/plain.rs"));
        assert!(plain.contains("use ::dlpack_core as __dlpack;"), "{plain}");
        assert_eq!(plain.matches("dlpack_core").count(), 1, "{plain}");
    }

    #[test]
    fn the_output_is_one_anonymous_const() {
        let input = syn::parse_str(include_str!("../tests/expand/plain.rs")).expect("a struct");
        let tokens = super::derive(&input).expect("no errors");
        let file: syn::File = syn::parse2(tokens).expect("items");
        let [syn::Item::Const(item)] = &file.items[..] else {
            panic!("expected one const item, found {} items", file.items.len());
        };
        assert_eq!(item.ident, "_");
        assert!(
            item.attrs
                .iter()
                .any(|a| a.path().is_ident("automatically_derived"))
        );
    }

    #[test]
    fn every_mistake_is_reported_in_one_error() {
        let input = syn::parse_str(
            r#"
            #[dlpack(crate = "a b", unknown)]
            struct S {
                #[dlpack(data, shape)]
                a: Vec<f32>,
                #[dlpack(data)]
                b: Vec<f32>,
            }
            "#,
        )
        .expect("a struct");
        let error = super::derive(&input).expect_err("the input has mistakes");
        let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 5, "{messages:#?}");
        assert!(messages[0].starts_with("`crate = \"a b\"` is not a path"));
        assert!(messages[1].starts_with("unknown dlpack attribute `unknown`"));
        assert!(messages[2].starts_with("a field has one role"));
        assert!(messages[3].starts_with("a second #[dlpack(data)] field"));
        assert!(messages[4].starts_with("missing #[dlpack(shape)]"));
    }
}
