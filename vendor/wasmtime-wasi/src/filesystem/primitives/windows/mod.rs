//! The `winx` module contains code specific to Windows, supported by the
//! `winx` crate.

pub(crate) mod fs;
