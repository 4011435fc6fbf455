//! `#[dlpack(...)]` attributes, parsed into typed values.
//!
//! Every mistake is recorded in [`Errors`] and parsing goes on, so that one compile shows all of
//! them (serde's way). Attribute names are the constants of [`key`].

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;

/// The attribute's name and every key it takes.
pub(crate) mod key {
    /// `#[dlpack(...)]`.
    pub(crate) const DLPACK: &str = "dlpack";

    /// Field role: the buffer holding the elements.
    pub(crate) const DATA: &str = "data";
    /// Field role: the sizes.
    pub(crate) const SHAPE: &str = "shape";
    /// Field role: the strides, in elements.
    pub(crate) const STRIDES: &str = "strides";
    /// Field role: bytes from the buffer's start to the first element.
    pub(crate) const BYTE_OFFSET: &str = "byte_offset";
    /// Field role (a `Device`), or container key (a constant device expression).
    pub(crate) const DEVICE: &str = "device";

    /// Container key: the path of the dlpack-core facade.
    pub(crate) const CRATE: &str = "crate";
    /// Container key: consumers must not write.
    pub(crate) const READ_ONLY: &str = "read_only";
    /// Container key: generate the export only, no `TryFrom<ManagedTensor>`.
    pub(crate) const EXPORT_ONLY: &str = "export_only";

    /// The keys a field takes, as the error message lists them.
    pub(crate) const FIELD_KEYS: &str = "`data`, `shape`, `strides`, `byte_offset` or `device`";
    /// The keys a struct takes, as the error message lists them.
    pub(crate) const CONTAINER_KEYS: &str =
        "`crate = \"...\"`, `device = ...`, `read_only` or `export_only`";
}

/// The mistakes found so far; they are reported together, each with its own span.
#[derive(Default)]
pub(crate) struct Errors(Vec<syn::Error>);

impl Errors {
    /// Records an error spanned on `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl core::fmt::Display) {
        self.0.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl core::fmt::Display) {
        self.0.push(syn::Error::new(span, message));
    }

    /// Records an error from syn.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.0.push(error);
    }

    /// All errors combined into one (each keeps its span), or `Ok` if there were none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        let mut errors = self.0.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}

/// What a field is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// `#[dlpack(data)]`.
    Data,
    /// `#[dlpack(shape)]`.
    Shape,
    /// `#[dlpack(strides)]`.
    Strides,
    /// `#[dlpack(byte_offset)]`.
    ByteOffset,
    /// `#[dlpack(device)]`.
    Device,
}

impl Role {
    /// Every role, in the order the docs list them.
    pub(crate) const ALL: [Role; 5] = [
        Role::Data,
        Role::Shape,
        Role::Strides,
        Role::ByteOffset,
        Role::Device,
    ];

    /// The key as the user writes it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Role::Data => key::DATA,
            Role::Shape => key::SHAPE,
            Role::Strides => key::STRIDES,
            Role::ByteOffset => key::BYTE_OFFSET,
            Role::Device => key::DEVICE,
        }
    }

    fn from_path(path: &syn::Path) -> Option<Role> {
        Role::ALL.into_iter().find(|role| path.is_ident(role.key()))
    }
}

/// A value given at most once, remembered with the span of the key that gave it.
pub(crate) struct Once<T> {
    /// The key, for the duplicate message.
    name: &'static str,
    value: Option<(Span, T)>,
}

impl<T> Once<T> {
    fn new(name: &'static str) -> Self {
        Once { name, value: None }
    }

    /// Sets the value, or records a duplicate-key error at `span`.
    fn set(&mut self, errors: &mut Errors, span: Span, value: T) {
        if self.value.is_some() {
            errors.at(
                span,
                format_args!("duplicate dlpack attribute `{}`", self.name),
            );
        } else {
            self.value = Some((span, value));
        }
    }

    /// The value, if given.
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, value)| value)
    }

    /// The span of the key that gave the value, if given.
    pub(crate) fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(span, _)| *span)
    }
}

/// The attributes on the struct itself.
pub(crate) struct Container {
    /// `crate = "path"`: where dlpack-core is (`::dlpack_core` when not given).
    pub(crate) krate: Once<syn::Path>,
    /// `device = EXPR`: a constant device for every tensor this type exports.
    pub(crate) device: Once<syn::Expr>,
    /// `read_only`.
    pub(crate) read_only: Once<()>,
    /// `export_only`.
    pub(crate) export_only: Once<()>,
}

impl Container {
    /// Parses every `#[dlpack(...)]` on the struct.
    pub(crate) fn from_attrs(attrs: &[syn::Attribute], errors: &mut Errors) -> Self {
        let mut container = Container {
            krate: Once::new(key::CRATE),
            device: Once::new(key::DEVICE),
            read_only: Once::new(key::READ_ONLY),
            export_only: Once::new(key::EXPORT_ONLY),
        };
        for attr in dlpack_attrs(attrs, Place::Struct, errors) {
            parse_keys(attr, Place::Struct, errors, |meta, errors| {
                container.parse_key(meta, errors)
            });
        }
        container
    }

    fn parse_key(&mut self, meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let span = meta.path.span();
        if meta.path.is_ident(key::CRATE) {
            match parse_crate_path(meta) {
                Ok(path) => self.krate.set(errors, span, path),
                Err(error) => {
                    errors.push(error);
                    skip_value(meta)?;
                }
            }
        } else if meta.path.is_ident(key::DEVICE) {
            if !meta.input.peek(syn::Token![=]) {
                errors.at(
                    span,
                    "#[dlpack(device)] on the struct needs a value: `#[dlpack(device = dlpack_core::Device::cuda(0))]` (or put #[dlpack(device)] on a field of type `Device`)",
                );
                return skip_value(meta);
            }
            let expr: syn::Expr = meta.value()?.parse()?;
            self.device.set(errors, span, expr);
        } else if meta.path.is_ident(key::READ_ONLY) {
            flag(meta, errors)?;
            self.read_only.set(errors, span, ());
        } else if meta.path.is_ident(key::EXPORT_ONLY) {
            flag(meta, errors)?;
            self.export_only.set(errors, span, ());
        } else if let Some(role) = Role::from_path(&meta.path) {
            errors.at(
                span,
                format_args!(
                    "#[dlpack({})] belongs on a field, not on the struct",
                    role.key()
                ),
            );
            skip_value(meta)?;
        } else {
            let name = path_name(&meta.path);
            errors.spanned(
                &meta.path,
                format_args!(
                    "unknown dlpack attribute `{name}` on a struct; {}expected {}",
                    did_you_mean(
                        &name,
                        &[key::CRATE, key::DEVICE, key::READ_ONLY, key::EXPORT_ONLY]
                    ),
                    key::CONTAINER_KEYS
                ),
            );
            skip_value(meta)?;
        }
        Ok(())
    }
}

/// The attributes on one field.
pub(crate) struct Field {
    /// The field's role, with the span of its key.
    pub(crate) role: Once<Role>,
}

impl Field {
    /// Parses every `#[dlpack(...)]` on a field.
    pub(crate) fn from_attrs(attrs: &[syn::Attribute], errors: &mut Errors) -> Self {
        let mut field = Field {
            role: Once::new("role"),
        };
        for attr in dlpack_attrs(attrs, Place::Field, errors) {
            parse_keys(attr, Place::Field, errors, |meta, errors| {
                field.parse_key(meta, errors)
            });
        }
        field
    }

    fn parse_key(&mut self, meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let span = meta.path.span();
        let Some(role) = Role::from_path(&meta.path) else {
            let name = path_name(&meta.path);
            let hint = if [key::CRATE, key::READ_ONLY, key::EXPORT_ONLY].contains(&name.as_str()) {
                format!("#[dlpack({name})] belongs on the struct, not on a field")
            } else {
                format!(
                    "unknown dlpack attribute `{name}` on a field; {}expected {}",
                    did_you_mean(&name, &Role::ALL.map(Role::key)),
                    key::FIELD_KEYS
                )
            };
            errors.spanned(&meta.path, hint);
            return skip_value(meta);
        };
        if missing_comma(meta, errors) {
            skip_value(meta)?;
        } else if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
            errors.at(
                span,
                format_args!(
                    "#[dlpack({0})] takes no value: write `#[dlpack({0})]` on the field",
                    role.key()
                ),
            );
            skip_value(meta)?;
        }
        match self.role.get() {
            Some(&first) if first == role => errors.at(
                span,
                format_args!("duplicate dlpack attribute `{}`", role.key()),
            ),
            Some(&first) => errors.at(
                span,
                format_args!(
                    "a field has one role: this one is already #[dlpack({})], so it cannot also be #[dlpack({})]",
                    first.key(),
                    role.key()
                ),
            ),
            None => self.role.set(errors, span, role),
        }
        Ok(())
    }
}

/// Where a `#[dlpack(...)]` attribute is, which decides the keys it takes.
#[derive(Clone, Copy)]
enum Place {
    /// On the struct itself.
    Struct,
    /// On one of its fields.
    Field,
}

impl Place {
    /// "a struct takes `crate = "..."`, ...", for messages.
    fn takes(self) -> String {
        match self {
            Place::Struct => format!("a struct takes {}", key::CONTAINER_KEYS),
            Place::Field => format!("a field takes {}", key::FIELD_KEYS),
        }
    }
}

/// The `#[dlpack(...)]` attributes among `attrs` that hold keys. `#[dlpack]`, `#[dlpack = ...]`,
/// `#[dlpack[...]]`, `#[dlpack{...}]` and an empty `#[dlpack()]` are errors, each naming the
/// keys the attribute takes at `place`.
fn dlpack_attrs<'a>(
    attrs: &'a [syn::Attribute],
    place: Place,
    errors: &mut Errors,
) -> Vec<&'a syn::Attribute> {
    let mut lists = Vec::new();
    for attr in attrs
        .iter()
        .filter(|attr| attr.path().is_ident(key::DLPACK))
    {
        match &attr.meta {
            syn::Meta::List(list) if matches!(list.delimiter, syn::MacroDelimiter::Paren(_)) => {
                if list.tokens.is_empty() {
                    errors.spanned(
                        attr,
                        format_args!(
                            "empty #[dlpack()]: give it a key or remove it; {}",
                            place.takes()
                        ),
                    );
                } else {
                    lists.push(attr);
                }
            }
            _ => errors.spanned(
                attr,
                format_args!(
                    "expected #[dlpack(...)] with the keys in parentheses; {}",
                    place.takes()
                ),
            ),
        }
    }
    lists
}

/// Parses the keys of one `#[dlpack(...)]` with `parse_key`. An error that stops the parse is
/// recorded; one from syn's own reading of the list (a stray comma, a literal where a key
/// belongs, a missing comma after a value) gets the keys `place` takes appended.
fn parse_keys(
    attr: &syn::Attribute,
    place: Place,
    errors: &mut Errors,
    mut parse_key: impl FnMut(&ParseNestedMeta<'_>, &mut Errors) -> syn::Result<()>,
) {
    let mut from_key = false;
    let parsed = attr.parse_nested_meta(|meta| {
        let parsed = parse_key(&meta, errors);
        from_key = parsed.is_err();
        parsed
    });
    match parsed {
        Ok(()) => {}
        Err(error) if from_key => errors.push(error),
        Err(error) => errors.at(error.span(), format_args!("{error}; {}", place.takes())),
    }
}

/// `crate = "path"`: the string must hold a plain path (no generics).
fn parse_crate_path(meta: &ParseNestedMeta<'_>) -> syn::Result<syn::Path> {
    if !meta.input.peek(syn::Token![=]) {
        return Err(syn::Error::new(
            meta.path.span(),
            "#[dlpack(crate)] needs a value: `#[dlpack(crate = \"dlpack_core\")]`, the path to dlpack-core",
        ));
    }
    let value = meta.value()?;
    let lit: syn::LitStr = value.parse().map_err(|error| {
        syn::Error::new(
            error.span(),
            "expected a string: #[dlpack(crate = \"dlpack_core\")]",
        )
    })?;
    lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
        syn::Error::new(
            lit.span(),
            format_args!(
                "`crate = {:?}` is not a path to dlpack-core; expected a path like \"dlpack_core\" or \"::my_facade::dlpack\"",
                lit.value()
            ),
        )
    })
}

/// A key that takes no value, like `read_only`.
fn flag(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
    if missing_comma(meta, errors) {
        skip_value(meta)?;
    } else if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
        let name = path_name(&meta.path);
        errors.at(
            meta.path.span(),
            format_args!("#[dlpack({name})] takes no value: write `#[dlpack({name})]`"),
        );
        skip_value(meta)?;
    }
    Ok(())
}

/// Records an error when another key follows a key that takes no value without a comma between
/// (`#[dlpack(read_only export_only)]`), and says whether it did.
fn missing_comma(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> bool {
    let Ok(next) = meta.input.fork().parse::<syn::Ident>() else {
        return false;
    };
    errors.at(
        next.span(),
        format_args!(
            "expected `,` before `{next}`: keys are separated by commas, as in `#[dlpack({}, {next})]`",
            path_name(&meta.path)
        ),
    );
    true
}

/// Skips whatever follows a key up to the next comma, so that parsing goes on after an error.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    meta.input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tree, next)) = rest.token_tree() {
            if matches!(&tree, TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

/// "did you mean `strides`? " when `name` is a near miss of one of `keys` (a letter or two
/// off, or the same but for case and underscores), else nothing.
fn did_you_mean(name: &str, keys: &[&str]) -> String {
    let squash = |s: &str| s.replace('_', "").to_lowercase();
    keys.iter()
        .map(|key| {
            let distance = if squash(key) == squash(name) {
                0
            } else {
                edit_distance(key, name)
            };
            (distance, key)
        })
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, key)| format!("did you mean `{key}`? "))
        .unwrap_or_default()
}

/// The Levenshtein distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// A path as the user wrote it, for messages.
fn path_name(path: &syn::Path) -> String {
    path.to_token_stream()
        .into_iter()
        .map(|tree| tree.to_string())
        .collect::<Vec<_>>()
        .concat()
}

/// The facade path: `crate = "..."`, else `::dlpack_core`.
pub(crate) fn crate_path(container: &Container) -> TokenStream {
    match container.krate.get() {
        Some(path) => path.to_token_stream(),
        None => quote::quote!(::dlpack_core),
    }
}
