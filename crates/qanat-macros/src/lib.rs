//! Qanat's procedural macros. One so far: [`macro@boxed`], which makes an `async fn`
//! return its future boxed so that the body is compiled once, in the crate that defines
//! it, instead of again in every crate that awaits it.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::visit_mut::{self, VisitMut};
use syn::{
    parse_macro_input, parse_quote, Error, FnArg, GenericParam, ItemFn, Lifetime, LifetimeParam,
    ParenthesizedGenericArguments, Pat, PatIdent, ReturnType, Type, TypeBareFn, TypeImplTrait,
    TypeReference,
};

/// Compiles an `async fn`'s body once, in its own crate.
///
/// An optimized build shares no generic code between crates, and the body of an `async
/// fn` (its state machine's `poll`) is compiled where the future is polled: again, with
/// everything it calls (a domain crate's SQL, DataFusion's planner, arrow's kernels), in
/// every crate that awaits it — the domain crates above, `qanat-api`, the binary and
/// each test binary. With `#[boxed]` the function returns its future as a
/// `Pin<Box<dyn Future + Send>>`, whose `poll` is compiled here; callers `.await` it as
/// before, and pay one allocation per call.
///
/// The function keeps its meaning: every argument is moved into the future (and dropped
/// when it finishes, as with `async fn`), elided lifetimes become named ones that the
/// future outlives, and `?` and `return` work as written. `#[boxed(?Send)]` leaves out
/// the `Send` bound. Generic functions (type or const parameters, `impl Trait`
/// arguments) are refused: they are compiled where they are used whatever is done here.
#[proc_macro_attribute]
pub fn boxed(attr: TokenStream, item: TokenStream) -> TokenStream {
    let send = match attr.to_string().replace(' ', "").as_str() {
        "" => true,
        "?Send" => false,
        _ => {
            return Error::new(Span::call_site(), "#[boxed] takes nothing or `?Send`")
                .into_compile_error()
                .into()
        }
    };
    let f = parse_macro_input!(item as ItemFn);
    expand(f, send)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

fn expand(mut f: ItemFn, send: bool) -> syn::Result<Tokens> {
    let sig = &mut f.sig;
    if sig.asyncness.take().is_none() {
        return Err(Error::new_spanned(
            sig.fn_token,
            "#[boxed] goes on an `async fn`",
        ));
    }
    if let Some(p) = sig
        .generics
        .params
        .iter()
        .find(|p| !matches!(p, GenericParam::Lifetime(_)))
    {
        return Err(generic(p));
    }

    // Name the inputs' elided lifetimes and move every argument into the future.
    let mut namer = Namer::default();
    let mut receiver = None;
    let mut has_self = false;
    let mut moves = Vec::new();
    for (i, arg) in sig.inputs.iter_mut().enumerate() {
        match arg {
            FnArg::Receiver(r) => {
                has_self = true;
                namer.visit_type_mut(&mut r.ty);
                // `&self` stands for `self: &Self`, whose (now named) lifetime both carry.
                if let Type::Reference(TypeReference {
                    lifetime: Some(named),
                    ..
                }) = &*r.ty
                {
                    if let Some((_, lifetime)) = &mut r.reference {
                        *lifetime = Some(named.clone());
                    }
                    receiver = Some(named.clone());
                }
            }
            FnArg::Typed(t) => {
                namer.visit_type_mut(&mut t.ty);
                match &mut *t.pat {
                    Pat::Ident(PatIdent {
                        by_ref: None,
                        subpat: None,
                        ident,
                        mutability,
                        ..
                    }) => {
                        let mutability = mutability.take();
                        moves.push(quote! {
                            #[allow(clippy::redundant_locals)]
                            let #mutability #ident = #ident;
                        });
                    }
                    pat => {
                        let name = format_ident!("__arg{}", i);
                        let pat = std::mem::replace(pat, parse_quote!(#name));
                        moves.push(quote!(let #pat = #name;));
                    }
                }
            }
        }
    }
    if let Some(span) = namer.impl_trait {
        return Err(Error::new(
            span,
            "#[boxed] is for non-generic async fns: an `impl Trait` argument makes this one generic, and it is compiled where it is used anyway",
        ));
    }

    // The output's elided lifetimes follow the elision rules: the receiver's, or the one
    // input lifetime there is.
    let mut output = match &sig.output {
        ReturnType::Default => parse_quote!(()),
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    let declared: Vec<Lifetime> = sig
        .generics
        .lifetimes()
        .map(|l| l.lifetime.clone())
        .collect();
    let only = match (declared.len(), namer.named.len()) {
        (1, 0) => Some(declared[0].clone()),
        (0, 1) => Some(namer.named[0].clone()),
        _ => None,
    };
    let mut elided = OutputLifetimes {
        lifetime: receiver.or(only),
        unresolved: None,
        impl_trait: None,
    };
    elided.visit_type_mut(&mut output);
    if let Some(span) = elided.unresolved {
        return Err(Error::new(
            span,
            "#[boxed] cannot tell which input this lifetime is borrowed from: name it",
        ));
    }
    if let Some(span) = elided.impl_trait {
        return Err(Error::new(
            span,
            "#[boxed] cannot box a future whose output is an `impl Trait`",
        ));
    }

    // Every lifetime the future may capture outlives it.
    let boxed = Lifetime::new("'boxed", Span::call_site());
    let params = &mut sig.generics.params;
    for lifetime in namer.named.iter().chain([&boxed]) {
        params.push(GenericParam::Lifetime(LifetimeParam::new(lifetime.clone())));
    }
    let where_clause = sig.generics.make_where_clause();
    for lifetime in declared.iter().chain(&namer.named) {
        where_clause
            .predicates
            .push(parse_quote!(#lifetime: #boxed));
    }
    if has_self {
        where_clause.predicates.push(parse_quote!(Self: #boxed));
    }
    let send = send.then(|| quote!(+ ::core::marker::Send));
    sig.output = parse_quote! {
        -> ::core::pin::Pin<::std::boxed::Box<
            dyn ::core::future::Future<Output = #output> #send + #boxed
        >>
    };

    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = f;
    // The dead `return` fixes the future's output type, so that `?` inside converts
    // errors into the declared one.
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            ::std::boxed::Box::pin(async move {
                if let ::core::option::Option::Some(__ret) =
                    ::core::option::Option::None::<#output>
                {
                    #[allow(unreachable_code)]
                    return __ret;
                }
                #(#moves)*
                #block
            })
        }
    })
}

fn generic(p: &GenericParam) -> Error {
    Error::new_spanned(
        p,
        "#[boxed] is for non-generic async fns: a generic one is compiled where it is used anyway",
    )
}

/// Names the elided lifetimes of an input type (`&T`, `'_`), each a fresh one.
#[derive(Default)]
struct Namer {
    named: Vec<Lifetime>,
    impl_trait: Option<Span>,
}

impl Namer {
    fn fresh(&mut self) -> Lifetime {
        let lifetime = Lifetime::new(&format!("'life{}", self.named.len()), Span::call_site());
        self.named.push(lifetime.clone());
        lifetime
    }
}

impl VisitMut for Namer {
    fn visit_type_reference_mut(&mut self, r: &mut TypeReference) {
        if r.lifetime.is_none() {
            r.lifetime = Some(self.fresh());
        }
        visit_mut::visit_type_reference_mut(self, r);
    }

    fn visit_lifetime_mut(&mut self, l: &mut Lifetime) {
        if l.ident == "_" {
            *l = self.fresh();
        }
    }

    // Elision inside `fn(&T)` and `Fn(&T) -> &U` is higher-ranked, not the function's.
    fn visit_type_bare_fn_mut(&mut self, _: &mut TypeBareFn) {}

    fn visit_parenthesized_generic_arguments_mut(&mut self, _: &mut ParenthesizedGenericArguments) {
    }

    fn visit_type_impl_trait_mut(&mut self, t: &mut TypeImplTrait) {
        self.impl_trait
            .get_or_insert_with(|| syn::spanned::Spanned::span(t));
    }
}

/// Fills the output type's elided lifetimes with the one elision picks.
struct OutputLifetimes {
    lifetime: Option<Lifetime>,
    unresolved: Option<Span>,
    impl_trait: Option<Span>,
}

impl OutputLifetimes {
    fn fill(&mut self, span: Span) -> Option<Lifetime> {
        if self.lifetime.is_none() {
            self.unresolved.get_or_insert(span);
        }
        self.lifetime.clone()
    }
}

impl VisitMut for OutputLifetimes {
    fn visit_type_reference_mut(&mut self, r: &mut TypeReference) {
        if r.lifetime.is_none() {
            r.lifetime = self.fill(r.and_token.span);
        }
        visit_mut::visit_type_reference_mut(self, r);
    }

    fn visit_lifetime_mut(&mut self, l: &mut Lifetime) {
        if l.ident == "_" {
            if let Some(named) = self.fill(l.span()) {
                *l = named;
            }
        }
    }

    fn visit_type_bare_fn_mut(&mut self, _: &mut TypeBareFn) {}

    fn visit_parenthesized_generic_arguments_mut(&mut self, _: &mut ParenthesizedGenericArguments) {
    }

    fn visit_type_impl_trait_mut(&mut self, t: &mut TypeImplTrait) {
        self.impl_trait
            .get_or_insert_with(|| syn::spanned::Spanned::span(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(item: Tokens) -> String {
        match expand(syn::parse2(item).expect("an fn"), true) {
            Ok(out) => panic!("accepted: {out}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn refuses_what_it_cannot_box_usefully() {
        assert!(refused(quote!(
            fn f() {}
        ))
        .contains("async fn"));
        assert!(refused(quote!(
            async fn f<T>(t: T) {}
        ))
        .contains("non-generic"));
        assert!(refused(quote!(
            async fn f<const N: usize>() {}
        ))
        .contains("non-generic"));
        assert!(refused(quote!(
            async fn f(x: impl Into<String>) {}
        ))
        .contains("impl Trait"));
        assert!(refused(quote!(
            async fn f(a: &str, b: &str) -> &str {
                a
            }
        ))
        .contains("name it"));
    }

    #[test]
    fn names_elided_lifetimes_and_bounds_them() {
        let out = expand(
            syn::parse2(quote!(
                pub async fn f(&self, a: &str, c: Cow<'_, str>) -> &str {
                    a
                }
            ))
            .expect("an fn"),
            true,
        )
        .expect("boxed")
        .to_string()
        .replace(' ', "");
        for part in [
            "pubfnf<'life0,'life1,'life2,'boxed>(&'life0self,a:&'life1str,c:Cow<'life2,str>)",
            "Future<Output=&'life0str>+::core::marker::Send+'boxed",
            "where'life0:'boxed,'life1:'boxed,'life2:'boxed,Self:'boxed",
        ] {
            assert!(out.contains(part), "{part} not in {out}");
        }
    }
}
