mod check;
mod open_impl;
mod remove_dir_impl;
mod remove_file_impl;
mod set_times_impl;
mod stat_impl;

pub(crate) use check::beneath_supported;
pub(crate) use open_impl::open_impl;
pub(crate) use remove_dir_impl::remove_dir_impl;
pub(crate) use remove_file_impl::remove_file_impl;
pub(crate) use set_times_impl::{set_times_impl, set_times_nofollow_impl};
pub(crate) use stat_impl::stat_impl;
