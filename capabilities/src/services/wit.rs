//! The capabilities' bindings together: the one [`HasData`] every binding is added with
//! (a host call gets a [`CallCtx`] from the store's state through [`CallView`]), and
//! [`add_to_linker`], generated from the capability list, which also adds every frozen
//! contract version's interfaces (served by the same bindings through their adapter).

use wasmtime::component::{HasData, Linker};

use crate::bindings::v0_1_0;

use super::{CallCtx, CallView};

/// The data a capability's host functions get: a [`CallCtx`] of its own service `S`.
pub struct HasCall<S>(std::marker::PhantomData<fn() -> S>);

impl<S: 'static> HasData for HasCall<S> {
    type Data<'a> = CallCtx<'a, S>;
}

macro_rules! define_add_to_linker {
    ($($name:ident: $ty:ty,)*) => {
        /// Adds every capability's interface to `linker`, in the current contract and
        /// in every frozen one, for any state that gives a [`CallCtx`].
        pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
            $(super::$name::wit::add_to_linker(linker)?;)*
            v0_1_0::add_to_linker(linker)?;
            Ok(())
        }
    };
}

crate::for_each_capability!(define_add_to_linker);
