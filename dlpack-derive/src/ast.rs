//! The parsed model of the struct: its fields with their roles, with references to the original
//! syntax for spans.

use proc_macro2::Span;
use syn::spanned::Spanned;

use crate::attr::{self, Errors, Role};

/// A struct that `#[derive(DLPack)]` was put on.
pub(crate) struct Input<'a> {
    /// The struct's name.
    pub(crate) ident: &'a syn::Ident,
    /// Its generics, where clause included.
    pub(crate) generics: &'a syn::Generics,
    /// Its `#[dlpack(...)]` attributes.
    pub(crate) attrs: attr::Container,
    /// All its attributes as written, for `#[repr(...)]`.
    pub(crate) all_attrs: &'a [syn::Attribute],
    /// Named, tuple or unit.
    pub(crate) style: Style,
    /// Its fields in declaration order.
    pub(crate) fields: Vec<Field<'a>>,
}

/// The kind of struct.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Style {
    /// `struct S { a: A }`.
    Named,
    /// `struct S(A);`.
    Tuple,
    /// `struct S;`.
    Unit,
}

/// One field.
pub(crate) struct Field<'a> {
    /// `name` or `0`, for `self.#member` and struct literals.
    pub(crate) member: syn::Member,
    /// Its type.
    pub(crate) ty: &'a syn::Type,
    /// Its `#[dlpack(...)]` attributes.
    pub(crate) attrs: attr::Field,
    /// The whole field, for spans.
    pub(crate) original: &'a syn::Field,
}

impl Field<'_> {
    /// The field's role, if it has one.
    pub(crate) fn role(&self) -> Option<Role> {
        self.attrs.role.get().copied()
    }

    /// Where its role was given (the key inside `#[dlpack(...)]`), else the field itself.
    pub(crate) fn role_span(&self) -> Span {
        self.attrs
            .role
            .span()
            .unwrap_or_else(|| self.original.span())
    }

    /// How messages name the field: `` `data` `` or `field 0`.
    pub(crate) fn describe(&self) -> String {
        match &self.member {
            syn::Member::Named(ident) => format!("`{ident}`"),
            syn::Member::Unnamed(index) => format!("field {}", index.index),
        }
    }
}

impl<'a> Input<'a> {
    /// Builds the model, recording every attribute mistake. `None` for an enum or a union, which
    /// are reported here too.
    pub(crate) fn from_syn(input: &'a syn::DeriveInput, errors: &mut Errors) -> Option<Self> {
        let attrs = attr::Container::from_attrs(&input.attrs, errors);
        let (style, fields) = match &input.data {
            syn::Data::Struct(data) => match &data.fields {
                syn::Fields::Named(named) => (Style::Named, fields_of(&named.named, errors)),
                syn::Fields::Unnamed(unnamed) => {
                    (Style::Tuple, fields_of(&unnamed.unnamed, errors))
                }
                syn::Fields::Unit => (Style::Unit, Vec::new()),
            },
            syn::Data::Enum(data) => {
                errors.spanned(
                    data.enum_token,
                    "#[derive(DLPack)] works on structs only; an enum cannot say which field holds a tensor's data",
                );
                return None;
            }
            syn::Data::Union(data) => {
                errors.spanned(
                    data.union_token,
                    "#[derive(DLPack)] works on structs only, not on unions",
                );
                return None;
            }
        };
        Some(Input {
            ident: &input.ident,
            generics: &input.generics,
            attrs,
            all_attrs: &input.attrs,
            style,
            fields,
        })
    }

    /// The field with `role`, if there is one (the first, if there are several).
    pub(crate) fn field(&self, role: Role) -> Option<&Field<'a>> {
        self.fields.iter().find(|field| field.role() == Some(role))
    }
}

fn fields_of<'a>(
    fields: &'a syn::punctuated::Punctuated<syn::Field, syn::Token![,]>,
    errors: &mut Errors,
) -> Vec<Field<'a>> {
    fields
        .iter()
        .enumerate()
        .map(|(index, field)| Field {
            member: match &field.ident {
                Some(ident) => syn::Member::Named(ident.clone()),
                None => syn::Member::Unnamed(syn::Index {
                    index: index as u32,
                    span: field.ty.span(),
                }),
            },
            ty: &field.ty,
            attrs: attr::Field::from_attrs(&field.attrs, errors),
            original: field,
        })
        .collect()
}
