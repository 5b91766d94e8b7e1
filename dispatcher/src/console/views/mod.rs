//! The console's pages as HTML (maud: every value is escaped unless marked otherwise).
//! Pure: values in, markup out.

pub mod approvals;
pub mod hook;
pub mod layout;
pub mod list;
pub mod new_hook;
pub mod sign_in;
