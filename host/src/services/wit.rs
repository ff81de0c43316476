//! The capabilities' bindings together: the one [`HasData`] every binding is added with
//! (a host call gets a [`CallCtx`] from the store's state through [`CallView`]), and
//! [`add_to_linker`], generated from the capability list.

use wasmtime::component::{HasData, Linker};

use super::{CallCtx, CallView};

/// The data every capability's host functions get: a [`CallCtx`].
pub struct HasCall;

impl HasData for HasCall {
    type Data<'a> = CallCtx<'a>;
}

macro_rules! define_add_to_linker {
    ($($name:ident: $ty:ty,)*) => {
        /// Adds every capability's interface to `linker`, for any state that gives a
        /// [`CallCtx`].
        pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
            $(super::$name::wit::add_to_linker(linker)?;)*
            Ok(())
        }
    };
}

crate::for_each_capability!(define_add_to_linker);
