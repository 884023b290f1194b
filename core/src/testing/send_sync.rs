//! Compile-time `Send`/`Sync` checks in the shape of tokio's `tests/async_send_sync.rs`, shared
//! by every crate's `tests/send_sync.rs`: each use fails to compile if the type lost (or, for the
//! `not` forms, gained) the property. They are `const` items, so there is nothing to run.

/// Compiles only for a `Send` type.
pub const fn assert_send<T: ?Sized + Send>() {}

/// Compiles only for a `Sync` type.
pub const fn assert_sync<T: ?Sized + Sync>() {}

/// Compiles only for a `Send + Sync` type.
pub const fn assert_send_sync<T: ?Sized + Send + Sync>() {}

/// `Send + Sync` for each type, at compile time.
///
/// # Examples
///
/// ```
/// streamtask_core::assert_send_sync!(u8, String);
/// ```
#[macro_export]
macro_rules! assert_send_sync {
    ($($t:ty),* $(,)?) => { $( const _: () = $crate::testing::assert_send_sync::<$t>(); )* };
}

/// `Send` for each type, at compile time (pair it with [`assert_not_sync!`](crate::assert_not_sync)
/// where the type is deliberately not `Sync`).
#[macro_export]
macro_rules! assert_send_only {
    ($($t:ty),* $(,)?) => { $( const _: () = $crate::testing::assert_send::<$t>(); )* };
}

/// Compiles only if the type is NOT `Send` (the autoref ambiguity trick tokio uses: if it is
/// `Send`, two impls apply and the path is ambiguous).
///
/// # Examples
///
/// ```
/// streamtask_core::assert_not_send!(std::rc::Rc<u8>);
/// ```
#[macro_export]
macro_rules! assert_not_send {
    ($t:ty) => {
        const _: fn() = || {
            #[allow(dead_code)]
            trait AmbiguousIfSend<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfSend<()> for T {}
            #[allow(dead_code)]
            struct Invalid;
            impl<T: ?Sized + Send> AmbiguousIfSend<Invalid> for T {}
            let _ = <$t as AmbiguousIfSend<_>>::some_item;
        };
    };
}

/// Compiles only if the type is NOT `Sync`.
///
/// # Examples
///
/// ```
/// streamtask_core::assert_not_sync!(std::cell::Cell<u8>);
/// ```
#[macro_export]
macro_rules! assert_not_sync {
    ($t:ty) => {
        const _: fn() = || {
            #[allow(dead_code)]
            trait AmbiguousIfSync<A> {
                fn some_item() {}
            }
            impl<T: ?Sized> AmbiguousIfSync<()> for T {}
            #[allow(dead_code)]
            struct Invalid;
            impl<T: ?Sized + Sync> AmbiguousIfSync<Invalid> for T {}
            let _ = <$t as AmbiguousIfSync<_>>::some_item;
        };
    };
}
